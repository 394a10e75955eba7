// Asio's reactor records given back on a worker (net/reactor_records.hpp): the memory of a peak
// returns, and no event still queued for a closed socket touches a deleted record (the dev
// preset's AddressSanitizer reports that as a heap-use-after-free).
#include "net/reactor_records.hpp"

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/local/connect_pair.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/post.hpp>
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <functional>
#include <future>
#include <memory>
#include <thread>
#include <vector>

namespace meshnode::net {
namespace {

/// One io_context run by one thread that reclaims records, as a proxy worker.
class Worker {
 public:
  Worker() {
    thread_ = std::thread([this] {
      reclaim_reactor_records_on_this_thread(io_);
      io_.run();
    });
  }
  ~Worker() {
    guard_.reset();
    thread_.join();
  }
  /// Runs `fn` as a handler on the worker and waits until it returned.
  void run(std::function<void()> fn) {
    std::promise<void> done;
    asio::post(io_, [&] {
      fn();
      done.set_value();
    });
    done.get_future().wait();
  }
  /// Waits until everything queued on the worker before this call has run.
  void settle() {
    for (int i = 0; i < 3; ++i) run([] {});
  }
  asio::io_context& io() { return io_; }

 private:
  asio::io_context io_{1};
  asio::executor_work_guard<asio::io_context::executor_type> guard_ = asio::make_work_guard(io_);
  std::thread thread_;
};

using Socket = asio::local::stream_protocol::socket;

/// Opens `n` connected pairs on the worker; each reader waits in a read into `sink` whose
/// completion (data, or the cancel of its close) counts in `reads_ended`.
void open_waiting_pairs(Worker& w, int n, std::vector<std::unique_ptr<Socket>>& readers,
                        std::vector<std::unique_ptr<Socket>>& writers, std::array<char, 16>& sink,
                        int& reads_ended) {
  w.run([&] {
    for (int i = 0; i < n; ++i) {
      readers.push_back(std::make_unique<Socket>(w.io()));
      writers.push_back(std::make_unique<Socket>(w.io()));
      asio::local::connect_pair(*readers.back(), *writers.back());
      readers.back()->async_read_some(asio::buffer(sink), [&reads_ended](std::error_code, std::size_t) {
        ++reads_ended;
      });
    }
  });
}

TEST(ReactorRecords, AWorkerGivesBackTheRecordsOfClosedSocketsAndReusesThemUntilThen) {
  constexpr std::size_t kSockets = 600;  // within the usual 1024 open-files soft limit
  Worker w;
  std::vector<std::unique_ptr<asio::ip::tcp::socket>> sockets;
  w.run([&] {
    for (std::size_t i = 0; i < kSockets; ++i) {
      sockets.push_back(std::make_unique<asio::ip::tcp::socket>(w.io()));
      sockets.back()->open(asio::ip::tcp::v4());  // registers the descriptor: one record
    }
  });
  const ReactorRecordStats opened = reactor_record_stats();
  w.run([&] { sockets.clear(); });
  const ReactorRecordStats closed = reactor_record_stats();
  EXPECT_EQ(closed.retired - opened.retired, kSockets) << "each closed socket's record waits on its worker";
  EXPECT_EQ(closed.destroyed, opened.destroyed) << "nothing is deleted before the worker says so";

  // Until the worker releases them, a new socket takes a retired record instead of a new one.
  w.run([&] {
    sockets.push_back(std::make_unique<asio::ip::tcp::socket>(w.io()));
    sockets.back()->open(asio::ip::tcp::v4());
  });
  EXPECT_EQ(reactor_record_stats().created, closed.created);
  EXPECT_EQ(closed.retired - reactor_record_stats().retired, 1u);

  w.run([&] { release_idle_reactor_records(w.io()); });
  w.settle();
  const ReactorRecordStats released = reactor_record_stats();
  EXPECT_EQ(released.destroyed - closed.destroyed, kSockets - 1);
  EXPECT_EQ(released.retired, opened.retired);
  w.run([&] { sockets.clear(); });
}

TEST(ReactorRecords, SocketsClosedOffTheirWorkerKeepTheirRecords) {
  // The main thread runs no io_context: Asio's own free list keeps the records, as it always did.
  asio::io_context io;
  const ReactorRecordStats before = reactor_record_stats();
  {
    asio::ip::tcp::socket s(io);
    s.open(asio::ip::tcp::v4());
  }
  release_idle_reactor_records(io);  // not running `io`: does nothing
  const ReactorRecordStats after = reactor_record_stats();
  EXPECT_EQ(after.retired, before.retired);
  EXPECT_EQ(after.destroyed, before.destroyed);
}

// Events epoll returned for sockets that a handler then closes are still queued when the
// records are released: step 2 must come after them. Varying how many handler hops separate the
// write, the close and the release puts the release on every side of the queued events.
TEST(ReactorRecords, EventsQueuedForClosedSocketsNeverTouchAReleasedRecord) {
  constexpr int kPairs = 64;
  constexpr int kRounds = 80;
  Worker w;
  const ReactorRecordStats before = reactor_record_stats();
  int reads_ended = 0;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::unique_ptr<Socket>> readers, writers;
    std::array<char, 16> sink{};
    open_waiting_pairs(w, kPairs, readers, writers, sink, reads_ended);
    const int hops = round % 4;
    std::function<void(int)> close_after;  // `hops` posts, then close the readers and release
    close_after = [&](int left) {
      if (left > 0) {
        asio::post(w.io(), [&, left] { close_after(left - 1); });
        return;
      }
      readers.clear();
      release_idle_reactor_records(w.io());
    };
    w.run([&] {
      for (auto& s : writers) (void)::write(s->native_handle(), "x", 1);  // readers become readable
      close_after(hops);
    });
    w.settle();
    w.run([&] { writers.clear(); });
  }
  w.settle();
  EXPECT_EQ(reads_ended, kPairs * kRounds);
  EXPECT_GE(reactor_record_stats().destroyed - before.destroyed, std::size_t{kRounds} * kPairs);
}

// Two trims overlap when a worker is 30 s behind: the first one's step 2 is queued, then epoll
// returns events for sockets that a handler closes and the second trim seals. The first step 2
// must delete only what the first step 1 sealed. The queue this builds on the worker:
// [reactor, close, trim 2, step 2 of trim 1] -> the reactor queues the readers' events behind
// step 2 of trim 1, the close retires their records, trim 2 seals them.
TEST(ReactorRecords, AnEarlierTrimNeverDeletesWhatALaterOneSealed) {
  constexpr int kPairs = 64;
  constexpr int kRounds = 40;
  Worker w;
  int reads_ended = 0;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::unique_ptr<Socket>> readers, writers;
    std::array<char, 16> sink{};
    open_waiting_pairs(w, kPairs, readers, writers, sink, reads_ended);
    std::promise<void> started, go;
    auto started_f = started.get_future();
    auto go_f = go.get_future();
    asio::post(w.io(), [&] {  // trim 1, running while the close and trim 2 are posted
      started.set_value();
      go_f.wait();
      for (auto& s : writers) (void)::write(s->native_handle(), "x", 1);  // readers become readable
      release_idle_reactor_records(w.io());
    });
    started_f.wait();
    asio::post(w.io(), [&] { readers.clear(); });
    asio::post(w.io(), [&] { release_idle_reactor_records(w.io()); });
    go.set_value();
    w.settle();
    w.run([&] { writers.clear(); });
  }
  w.settle();
  EXPECT_EQ(reads_ended, kPairs * kRounds);
}

}  // namespace
}  // namespace meshnode::net
