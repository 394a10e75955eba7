// Asio's non-template code, compiled once for the whole build (ASIO_SEPARATE_COMPILATION, set on
// meshnode::asio in cmake/deps.cmake), and the one place where we choose how Asio's reactor
// allocates its per-socket records.
//
// Why the records get a heap of their own: epoll_reactor keeps one descriptor_state (168 B) per
// socket it has ever had open at once and never frees them (epoll can still hand out a pointer
// to a closed socket's record, so Asio keeps them type-stable on a free list for reuse). Allocated
// from the general heap during a load peak, they land between the short-lived objects of the same
// size class, and once the peak is over every 12 KiB slab that still holds one record stays
// resident: after the 10,000-connection soak (bench/soak.sh) 1.45 MB of records pinned 4 MB of
// 192 B slabs (issue 11). In a jemalloc arena of their own they sit densely, and the general
// heap's slabs empty out and go back to the system after the peak.
//
// Why records are also freed (net/reactor_records.hpp): dense or not, the records of a 10,000
// socket peak are ~1.4 MB that Asio would keep for the process's life. On proxy workers, where one
// thread runs one io_context, a record its socket freed is retired to a per-thread list instead of
// Asio's free list, reused from there, and deleted once the scheduler's FIFO order proves that no
// queued event can still name it.
#include <asio/detail/config.hpp>

#if !defined(ASIO_SEPARATE_COMPILATION)
#error "asio_impl.cpp is Asio's separately compiled source: build it with ASIO_SEPARATE_COMPILATION"
#endif

#include <asio/detail/epoll_reactor.hpp>
#include <asio/detail/object_pool.hpp>

#include <cstddef>
#include <new>

namespace asio::detail {
// Declared before Asio's sources below instantiate them (allocate_descriptor_state in
// epoll_reactor.ipp): an explicit specialization must precede the first use.
template <>
epoll_reactor::descriptor_state* object_pool_access::create<epoll_reactor::descriptor_state, bool>(bool locking);
template <>
void object_pool_access::destroy<epoll_reactor::descriptor_state>(epoll_reactor::descriptor_state* state);
template <>
template <>
epoll_reactor::descriptor_state* object_pool<epoll_reactor::descriptor_state>::alloc<bool>(bool locking);
template <>
void object_pool<epoll_reactor::descriptor_state>::free(epoll_reactor::descriptor_state* state);
}  // namespace asio::detail

#include <asio/impl/src.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>

#include <atomic>
#include <cstdint>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "net/drained_read.hpp"
#include "net/reactor_records.hpp"

#include <sys/socket.h>

#include <cerrno>

// jemalloc's non-standard API (jemalloc(3)). Weak: resolved when the executable links jemalloc
// (meshnode_use_allocator in cmake/meshnode.cmake), null on glibc, where the records come from
// operator new as Asio would allocate them.
extern "C" {
int mallctl(const char* name, void* oldp, std::size_t* oldlenp, void* newp, std::size_t newlen)
    __attribute__((weak));
void* mallocx(std::size_t size, int flags) __attribute__((weak));
void dallocx(void* ptr, int flags) __attribute__((weak));
}

namespace {

// jemalloc(3) flag encodings (jemalloc 5): MALLOCX_ARENA(a) and MALLOCX_TCACHE_NONE. Bypassing the
// thread cache keeps a freed record from being handed to an unrelated allocation of its class.
constexpr int mallocx_arena(unsigned arena) { return static_cast<int>((arena + 1) << 20); }
constexpr int kMallocxTcacheNone = 1 << 8;

/// The jemalloc flags that address the reactor records' own arena, created on first use;
/// -1 on glibc or when jemalloc refuses to create an arena (then operator new is used).
int record_heap_flags() {
  static const int flags = [] {
    if (mallctl == nullptr || mallocx == nullptr || dallocx == nullptr) return -1;
    unsigned arena = 0;
    std::size_t len = sizeof(arena);
    if (mallctl("arenas.create", &arena, &len, nullptr, 0) != 0) return -1;
    return mallocx_arena(arena) | kMallocxTcacheNone;
  }();
  return flags;
}

}  // namespace

namespace asio::detail {

template <>
epoll_reactor::descriptor_state* object_pool_access::create<epoll_reactor::descriptor_state, bool>(bool locking) {
  using State = epoll_reactor::descriptor_state;
  const int flags = record_heap_flags();
  if (flags < 0) return new State(locking);
  void* memory = mallocx(sizeof(State), flags);
  if (memory == nullptr) throw std::bad_alloc();
  try {
    return new (memory) State(locking);
  } catch (...) {
    dallocx(memory, kMallocxTcacheNone);
    throw;
  }
}

template <>
void object_pool_access::destroy<epoll_reactor::descriptor_state>(epoll_reactor::descriptor_state* state) {
  using State = epoll_reactor::descriptor_state;
  if (record_heap_flags() < 0) {
    delete state;
    return;
  }
  state->~State();
  // dallocx finds the arena from the pointer.
  dallocx(state, kMallocxTcacheNone);
}

}  // namespace asio::detail

namespace {

using asio::detail::epoll_reactor;
using Record = epoll_reactor::descriptor_state;
using RecordPool = asio::detail::object_pool<Record>;

// The Asio internals used here are private or protected members. An explicit instantiation may
// name one (C++ [temp.spec.general]/6): each GrantMember below hands a pointer to one member to
// `granted(Tag)`, which is all the access we take.
template <typename Tag, typename Tag::type Member>
struct GrantMember {
  friend typename Tag::type granted(Tag) { return Member; }
};

// The reactor that registered a record (descriptor_state::reactor_).
struct ReactorMember {
  using type = epoll_reactor* Record::*;
  friend type granted(ReactorMember);
};
template struct GrantMember<ReactorMember, &Record::reactor_>;

std::atomic<std::size_t> records_created{0};
std::atomic<std::size_t> records_destroyed{0};
std::atomic<std::size_t> records_retired{0};

// Records still retired when their thread exits: the io_context may outlive the thread with
// events queued that name them, so they are kept, reachable, rather than deleted. The list is
// never destroyed (exit-time leak checks run after static destructors).
std::mutex graveyard_mu;
std::vector<Record*>& graveyard() {
  static auto* const records = std::make_unique<std::vector<Record*>>().release();
  return *records;
}

/// The records one reclaiming thread's sockets freed, newest last.
class RetiredRecords {
 public:
  ~RetiredRecords() {
    std::lock_guard lock(graveyard_mu);
    try {
      for (const Entry& e : entries_) graveyard().push_back(e.record);
    } catch (const std::bad_alloc&) {
      // Out of memory at thread exit: the records stay allocated, only unreachable.
    }
    records_retired.fetch_sub(entries_.size(), std::memory_order_relaxed);
  }

  /// Makes this thread reclaim the records of `io`'s reactor.
  void reclaim_for(asio::io_context& io) {
    reactor_ = &asio::use_service<epoll_reactor>(io);
    scheduler_ = &asio::use_service<asio::detail::scheduler>(io);
  }

  /// Whether `scheduler` is the one this thread reclaims for, and this thread is running it.
  [[nodiscard]] bool runs(const asio::detail::scheduler* scheduler) const {
    return scheduler != nullptr && scheduler == scheduler_ && scheduler_->can_dispatch();
  }

  /// Whether `record`, freed now on this thread, may wait here: it belongs to the reactor this
  /// thread reclaims for, and this thread is running that reactor's scheduler, so the scheduler's
  /// FIFO order is this thread's.
  [[nodiscard]] bool accepts(Record* record) const {
    return reactor_ != nullptr && record->*granted(ReactorMember{}) == reactor_ && runs(scheduler_);
  }

  /// False when the list cannot grow (out of memory): the record then goes to Asio's free list,
  /// as a socket's close must not throw.
  bool retire(Record* record, RecordPool* pool) noexcept {
    try {
      entries_.push_back({record, pool, kUnsealed});
    } catch (const std::bad_alloc&) {
      return false;
    }
    records_retired.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  /// A retired record of `pool` for a new socket, or null.
  Record* take(RecordPool* pool) {
    for (auto it = entries_.rbegin(); it != entries_.rend() && it - entries_.rbegin() < 8; ++it) {
      if (it->pool != pool) continue;
      Record* record = it->record;
      entries_.erase(std::next(it).base());
      records_retired.fetch_sub(1, std::memory_order_relaxed);
      return record;
    }
    return nullptr;
  }

  /// Step 1: the records retired since the last step 1 become deletable by the step 2 of this
  /// seal, which is returned. None is kept in reserve: a kept record would stay wherever its
  /// socket's peak put it and pin its 12 KiB slab (the soak's 256 kept records pinned 1.2 MB),
  /// while a new one costs one small allocation.
  std::uint64_t seal() {
    ++seals_;
    for (Entry& e : entries_) {
      if (e.seal == kUnsealed) e.seal = seals_;
    }
    return seals_;
  }

  /// Step 2: deletes what step 1 sealed as `seal` and no socket took since. Only those: when two
  /// trims overlap (a worker 30 s behind), a record the second one sealed may have an event
  /// queued behind the first one's step 2.
  void release_sealed(std::uint64_t seal) {
    std::size_t kept = 0;
    for (Entry& e : entries_) {
      if (e.seal == seal) {
        asio::detail::object_pool_access::destroy(e.record);
        records_destroyed.fetch_add(1, std::memory_order_relaxed);
        records_retired.fetch_sub(1, std::memory_order_relaxed);
      } else {
        entries_[kept++] = e;
      }
    }
    entries_.resize(kept);
    if (entries_.capacity() > 256 && entries_.size() < entries_.capacity() / 4) entries_.shrink_to_fit();
  }

 private:
  static constexpr std::uint64_t kUnsealed = 0;
  struct Entry {
    Record* record;
    RecordPool* pool;  // the reactor's pool it came from: only that pool may reuse it
    std::uint64_t seal;
  };
  std::vector<Entry> entries_;
  std::uint64_t seals_ = kUnsealed;
  epoll_reactor* reactor_ = nullptr;
  asio::detail::scheduler* scheduler_ = nullptr;
};

RetiredRecords& retired_records() {
  thread_local RetiredRecords records;
  return records;
}

void link_live(Record*& live_list, Record* record) {
  asio::detail::object_pool_access::next(record) = live_list;
  asio::detail::object_pool_access::prev(record) = nullptr;
  if (live_list != nullptr) asio::detail::object_pool_access::prev(live_list) = record;
  live_list = record;
}

}  // namespace

namespace asio::detail {

// Asio's object_pool::alloc and ::free, with the retired list between the free list and `create`.
template <>
template <>
epoll_reactor::descriptor_state* object_pool<epoll_reactor::descriptor_state>::alloc<bool>(bool locking) {
  Record* record = free_list_;
  if (record != nullptr) {
    free_list_ = object_pool_access::next(record);
  } else if (record = retired_records().take(this); record == nullptr) {
    record = object_pool_access::create<Record>(locking);
    records_created.fetch_add(1, std::memory_order_relaxed);
  }
  link_live(live_list_, record);
  return record;
}

template <>
void object_pool<epoll_reactor::descriptor_state>::free(epoll_reactor::descriptor_state* record) {
  if (live_list_ == record) live_list_ = object_pool_access::next(record);
  if (Record* prev = object_pool_access::prev(record)) object_pool_access::next(prev) = object_pool_access::next(record);
  if (Record* next = object_pool_access::next(record)) object_pool_access::prev(next) = object_pool_access::prev(record);
  object_pool_access::prev(record) = nullptr;
  object_pool_access::next(record) = nullptr;
  if (RetiredRecords& retired = retired_records(); retired.accepts(record) && retired.retire(record, this)) return;
  object_pool_access::next(record) = free_list_;
  free_list_ = record;
}

}  // namespace asio::detail

namespace meshnode::net {

void reclaim_reactor_records_on_this_thread(asio::io_context& io) { retired_records().reclaim_for(io); }

void release_idle_reactor_records(asio::io_context& io) {
  RetiredRecords& retired = retired_records();
  if (!retired.runs(&asio::use_service<asio::detail::scheduler>(io))) return;
  const std::uint64_t seal = retired.seal();
  // Behind every completion queued so far, on this same thread (the only one running `io`).
  asio::post(io, [seal] { retired_records().release_sealed(seal); });
}

ReactorRecordStats reactor_record_stats() {
  return {.created = records_created.load(std::memory_order_relaxed),
          .destroyed = records_destroyed.load(std::memory_order_relaxed),
          .retired = records_retired.load(std::memory_order_relaxed)};
}

}  // namespace meshnode::net

// What net/drained_read.hpp needs: a TCP socket's reactor record, and in it the lock, the "try
// recv before waiting" flags and the registered epoll mask.
namespace {

using Socket = asio::basic_socket<asio::ip::tcp, asio::any_io_executor>;
using SocketImpl = asio::detail::io_object_impl<asio::detail::reactive_socket_service<asio::ip::tcp>, asio::any_io_executor>;
constexpr int kMaxOps = epoll_reactor::max_ops;

struct SocketImplMember {
  using type = SocketImpl Socket::*;
  friend type granted(SocketImplMember);
};
template struct GrantMember<SocketImplMember, &Socket::impl_>;
struct RecordMutexMember {
  using type = asio::detail::conditionally_enabled_mutex Record::*;
  friend type granted(RecordMutexMember);
};
template struct GrantMember<RecordMutexMember, &Record::mutex_>;
struct RecordSpeculativeMember {
  using type = bool (Record::*)[kMaxOps];
  friend type granted(RecordSpeculativeMember);
};
template struct GrantMember<RecordSpeculativeMember, &Record::try_speculative_>;
struct RecordEventsMember {
  using type = std::uint32_t Record::*;
  friend type granted(RecordEventsMember);
};
template struct GrantMember<RecordEventsMember, &Record::registered_events_>;

Record* record_of(asio::ip::tcp::socket& socket) noexcept {
  Socket& base = socket;
  return (base.*granted(SocketImplMember{})).get_implementation().reactor_data_;
}

// Under the record's lock. Not for a socket epoll refused (registered_events_ == 0): no event
// would ever mark it readable again, which is why Asio makes the same check.
void mark_drained(Record* record) noexcept {
  if (record->*granted(RecordEventsMember{}) != 0) (record->*granted(RecordSpeculativeMember{}))[epoll_reactor::read_op] = false;
}

template <typename Call>
ssize_t call_noting_drained(asio::ip::tcp::socket& socket, Call call) noexcept {
  const int fd = socket.native_handle();
  Record* record = socket.is_open() ? record_of(socket) : nullptr;
  std::optional<asio::detail::conditionally_enabled_mutex::scoped_lock> lock;
  if (record != nullptr) lock.emplace(record->*granted(RecordMutexMember{}));
  ssize_t n;
  do n = call(fd);
  while (n < 0 && errno == EINTR);
  const int saved = errno;
  if (record != nullptr && n < 0 && (saved == EAGAIN || saved == EWOULDBLOCK)) mark_drained(record);
  lock.reset();
  errno = saved;  // after the unlock, which may set it
  return n;
}

}  // namespace

namespace meshnode::net {

ssize_t recv_noting_drained(asio::ip::tcp::socket& socket, void* data, std::size_t size) noexcept {
  return call_noting_drained(socket, [&](int fd) { return ::recv(fd, data, size, MSG_DONTWAIT); });
}

ssize_t peek_noting_drained(asio::ip::tcp::socket& socket) noexcept {
  char byte;
  return call_noting_drained(socket, [&](int fd) { return ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT); });
}

}  // namespace meshnode::net
