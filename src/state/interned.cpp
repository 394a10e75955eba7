#include "state/interned.hpp"

#include <array>
#include <memory>
#include <mutex>
#include <ostream>
#include <vector>

namespace meshnode::state {

struct InternedString::Entry {
  explicit Entry(std::string_view v, std::size_t h) : value(v), hash(h) {}
  std::atomic<std::uint32_t> refs{1};
  std::atomic<bool> immortal{false};  // never counted, never freed
  const std::string value;
  const std::size_t hash;
};

namespace {

using Entry = InternedString::Entry;

// One shard's entries: open addressing with linear probing over (hash, entry) slots, so a probe
// compares the stored hash before it touches an entry (a std::unordered_set of pointers reads
// every entry of a bucket chain to find the chain's end). Used under the shard's mutex.
class EntryTable {
  // Bits 7..10 pick the shard (shard_of), so they are the same for every entry here: index by a
  // rotation that moves them to the top.
  static std::size_t home(std::size_t hash, std::size_t mask) { return ((hash >> 11) | (hash << 53)) & mask; }

 public:
  Entry* find(std::string_view value, std::size_t hash) const {
    if (used_ == 0) return nullptr;
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = home(hash, mask); slots_[i].entry != nullptr; i = (i + 1) & mask) {
      if (slots_[i].hash == hash && slots_[i].entry->value == value) return slots_[i].entry;
    }
    return nullptr;
  }
  void insert(Entry* e) {
    if ((used_ + 1) * 4 > slots_.size() * 3) grow();
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = home(e->hash, mask);
    while (slots_[i].entry != nullptr) i = (i + 1) & mask;
    slots_[i] = Slot{e->hash, e};
    ++used_;
  }
  void erase(const Entry* e) {
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = home(e->hash, mask);
    while (slots_[i].entry != e) i = (i + 1) & mask;  // present: only the pool erases its entries
    // Backward-shift deletion: pull later members of the probe run into the hole.
    for (std::size_t j = (i + 1) & mask; slots_[j].entry != nullptr; j = (j + 1) & mask) {
      std::size_t h = home(slots_[j].hash, mask);
      bool stays = i <= j ? (h > i && h <= j) : (h > i || h <= j);
      if (!stays) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = Slot{};
    --used_;
  }
  std::size_t size() const { return used_; }

 private:
  struct Slot {
    std::size_t hash = 0;
    Entry* entry = nullptr;
  };
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{});
    const std::size_t mask = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.entry == nullptr) continue;
      std::size_t i = home(s.hash, mask);
      while (slots_[i].entry != nullptr) i = (i + 1) & mask;
      slots_[i] = s;
    }
  }
  std::vector<Slot> slots_;
  std::size_t used_ = 0;
};

struct Shard {
  std::mutex mutex;
  EntryTable entries;
};

// Per-thread cache in front of the pool: large enough for the nodes, namespaces and names a big
// response cycles through (the benchmark: 500 nodes, 100 namespaces).
constexpr std::size_t kCacheSlots = 4096;

// Sharded so the helper threads that convert a big response rarely wait on each other.
constexpr std::size_t kShards = 16;

std::array<Shard, kShards>& shards() {
  static auto* pool = new std::array<Shard, kShards>();  // never destroyed: handles outlive statics
  return *pool;
}

Shard& shard_of(std::size_t hash) { return shards()[(hash >> 7) % kShards]; }

const std::string& empty_string() {
  static const std::string empty;
  return empty;
}

}  // namespace

InternedString::Entry* InternedString::intern(std::string_view value) {
  if (value.empty()) return nullptr;
  return intern(value, std::hash<std::string_view>{}(value));
}

InternedString::Entry* InternedString::intern(std::string_view value, std::size_t hash) {
  Shard& shard = shard_of(hash);
  std::lock_guard lock(shard.mutex);
  if (Entry* found = shard.entries.find(value, hash)) {
    // Under the shard lock: release() only frees an entry while holding this lock with refs == 0.
    found->refs.fetch_add(1, std::memory_order_relaxed);
    return found;
  }
  auto owned = std::make_unique<Entry>(value, hash);
  Entry* e = owned.get();
  shard.entries.insert(e);
  owned.release();  // owned by the pool from here on; freed by release()
  return e;
}

void InternedString::retain(Entry* e) noexcept {
  if (e != nullptr && !e->immortal.load(std::memory_order_relaxed)) e->refs.fetch_add(1, std::memory_order_relaxed);
}

void InternedString::release(Entry* e) noexcept {
  if (e == nullptr || e->immortal.load(std::memory_order_relaxed)) return;
  // Fast path: not the last reference. Another holder cannot drop to zero under us, and intern()
  // only increments, so a plain CAS loop is enough.
  std::uint32_t refs = e->refs.load(std::memory_order_relaxed);
  while (refs > 1) {
    if (e->refs.compare_exchange_weak(refs, refs - 1, std::memory_order_release, std::memory_order_relaxed))
      return;
  }
  // Possibly the last reference: decide under the shard lock, where intern() cannot revive it.
  Shard& shard = shard_of(e->hash);
  std::unique_lock lock(shard.mutex);
  if (e->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  shard.entries.erase(e);
  lock.unlock();
  std::unique_ptr<Entry> gone(e);
}

void InternedString::retain_n(Entry* e, std::uint32_t n) noexcept {
  if (!e->immortal.load(std::memory_order_relaxed)) e->refs.fetch_add(n, std::memory_order_relaxed);
}

void InternedString::release_n(Entry* e, std::uint32_t n) noexcept {
  if (n == 0 || e->immortal.load(std::memory_order_relaxed)) return;
  std::uint32_t refs = e->refs.load(std::memory_order_relaxed);
  while (refs > n) {
    if (e->refs.compare_exchange_weak(refs, refs - n, std::memory_order_release, std::memory_order_relaxed))
      return;
  }
  // Possibly the last references: as release(), decide under the shard lock.
  Shard& shard = shard_of(e->hash);
  std::unique_lock lock(shard.mutex);
  if (e->refs.fetch_sub(n, std::memory_order_acq_rel) != n) return;
  shard.entries.erase(e);
  lock.unlock();
  std::unique_ptr<Entry> gone(e);
}

InternedStringBatch::~InternedStringBatch() {
  for (const Slot& s : slots_) {
    if (s.entry != nullptr) InternedString::release_n(s.entry, s.spare);
  }
}

void InternedStringBatch::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.empty() ? 256 : old.size() * 2, Slot{});
  const std::size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.entry == nullptr) continue;
    std::size_t i = s.hash & mask;
    while (slots_[i].entry != nullptr) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

// Reserve this many references per refill: one atomic add covers as many handles.
constexpr std::uint32_t kRefill = 64;

InternedString InternedStringBatch::hand_out(Slot& s) {
  // Keep one reference back so the entry stays alive while it is in this table.
  if (s.spare == 1) {
    InternedString::retain_n(s.entry, kRefill);
    s.spare += kRefill;
  }
  --s.spare;
  InternedString out;
  out.entry_ = s.entry;  // adopts one of the reserved references
  return out;
}

std::size_t InternedStringBatch::find_or_add(std::string_view value) {
  if ((used_ + 1) * 2 > slots_.size()) grow();
  const std::size_t hash = std::hash<std::string_view>{}(value);
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t i = hash & mask;; i = (i + 1) & mask) {
    Slot& s = slots_[i];
    if (s.entry == nullptr) {
      s.entry = InternedString::intern(value, hash);  // one reference: ours
      s.hash = hash;
      s.spare = 1;
      ++used_;
      return i;
    }
    if (s.hash == hash && s.entry->value == value) return i;
  }
}

InternedString InternedStringBatch::get(std::string_view value) {
  if (value.empty()) return {};
  return hand_out(slots_[find_or_add(value)]);
}

InternedString InternedStringBatch::get(std::string_view value, std::size_t site) {
  if (value.empty()) return {};
  std::size_t& last = last_[site % kSites];
  // Compared by value: after a grow() the slot may hold another entry (never a freed one).
  if (last < slots_.size() && slots_[last].entry != nullptr && slots_[last].entry->value == value)
    return hand_out(slots_[last]);
  last = find_or_add(value);
  return hand_out(slots_[last]);
}

InternedString InternedString::immortal(std::string_view value) {
  InternedString out(value);
  // Once immortal, releases stop counting; a holder that interned it before still holds a valid
  // entry, since immortal entries are never freed.
  if (out.entry_ != nullptr) out.entry_->immortal.store(true, std::memory_order_relaxed);
  return out;
}

InternedString InternedString::cached(std::string_view value) {
  if (value.empty()) return {};
  thread_local std::array<InternedString, kCacheSlots> slots;
  std::size_t hash = std::hash<std::string_view>{}(value);
  InternedString& slot = slots[hash % kCacheSlots];
  if (slot.entry_ == nullptr || slot.entry_->hash != hash || slot.entry_->value != value) {
    InternedString fresh;
    fresh.entry_ = intern(value, hash);
    slot = std::move(fresh);
  }
  return slot;
}

InternedString& InternedString::operator=(const InternedString& other) noexcept {
  if (entry_ != other.entry_) {
    retain(other.entry_);
    release(entry_);
    entry_ = other.entry_;
  }
  return *this;
}

InternedString& InternedString::operator=(InternedString&& other) noexcept {
  if (this != &other) {
    release(entry_);
    entry_ = other.entry_;
    other.entry_ = nullptr;
  }
  return *this;
}

const std::string& InternedString::str() const noexcept {
  return entry_ == nullptr ? empty_string() : entry_->value;
}

std::string InternedString::concat(std::string_view a, std::string_view b) {
  std::string out;
  out.reserve(a.size() + b.size());
  out.append(a).append(b);
  return out;
}

std::ostream& operator<<(std::ostream& os, const InternedString& s) { return os << s.view(); }

std::size_t InternedString::pool_size_for_test() {
  std::size_t n = 0;
  for (auto& shard : shards()) {
    std::lock_guard lock(shard.mutex);
    n += shard.entries.size();
  }
  return n;
}

}  // namespace meshnode::state
