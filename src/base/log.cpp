#include "base/log.hpp"

#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <spdlog/details/log_msg.h>
#include <spdlog/sinks/base_sink.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace meshnode::base {
namespace {

using SteadyClock = std::chrono::steady_clock;

/// stderr without a write(2) on the logging thread: lines are formatted by the caller (so their
/// order is the order of the calls) into one buffer, and a writer thread empties it at most
/// kBatch after the first line it holds arrived (or as soon as kFlushBytes are queued), one write
/// for every line queued meanwhile. A caller wakes the writer only for the first line of a batch:
/// at a few thousand lines/s that is one wake-up and one write per kBatch, not one per line. Never blocks a caller on stderr: past kMaxPending bytes a
/// line is dropped and counted (reported in a later line). Warning and error lines are limited to
/// kRatePerSec after a burst of kBurst (the excess counted, then reported). Critical lines and
/// flush() wait for the buffer to be written (abort paths, shutdown).
class StderrWriterSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  static constexpr std::size_t kMaxPending = 1 << 20;
  static constexpr std::size_t kFlushBytes = 64 << 10;
  static constexpr std::chrono::milliseconds kBatch{10};
  static constexpr double kRatePerSec = 50;
  static constexpr double kBurst = 500;

  StderrWriterSink() : last_refill_(SteadyClock::now()) {
    writer_ = std::thread([this] { run(); });
  }

  ~StderrWriterSink() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    writer_.join();  // run() writes what is left before it returns
  }

  StderrWriterSink(const StderrWriterSink&) = delete;
  StderrWriterSink& operator=(const StderrWriterSink&) = delete;

 protected:
  // base_sink holds mutex_ around both.
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const bool limited = msg.level == spdlog::level::warn || msg.level == spdlog::level::err;
    if (limited && !take_token()) {
      ++suppressed_;
      return;
    }
    if (suppressed_ > 0) report_suppressed();
    if (dropped_ > 0) report_dropped();
    append(msg);
    if (msg.level >= spdlog::level::critical) wait_written();
  }

  void flush_() override { wait_written(); }

 private:
  bool take_token() {
    const auto now = SteadyClock::now();
    tokens_ = std::min(kBurst, tokens_ + std::chrono::duration<double>(now - last_refill_).count() * kRatePerSec);
    last_refill_ = now;
    if (tokens_ < 1) return false;
    tokens_ -= 1;
    return true;
  }

  // Formats `msg` into the buffer (mutex_ held).
  void append(const spdlog::details::log_msg& msg) {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    if (pending_.size() + formatted.size() > kMaxPending) {
      ++dropped_;
      return;
    }
    const std::size_t before = pending_.size();
    pending_.append(formatted.data(), formatted.size());
    if (before == 0 || (before < kFlushBytes && pending_.size() >= kFlushBytes)) wake_.notify_one();
  }

  void note(spdlog::level::level_enum level, const std::string& text) {
    spdlog::details::log_msg m(spdlog::source_loc{}, "meshnode", level, text);
    spdlog::memory_buf_t formatted;
    formatter_->format(m, formatted);
    const bool was_empty = pending_.empty();
    pending_.append(formatted.data(), formatted.size());  // a note may exceed the bound by one line
    if (was_empty) wake_.notify_one();
  }

  void report_suppressed() {
    note(spdlog::level::warn, "log: " + std::to_string(suppressed_) + " warning/error lines suppressed (over " +
                                  std::to_string(static_cast<int>(kRatePerSec)) + "/s)");
    suppressed_ = 0;
  }

  void report_dropped() {
    note(spdlog::level::warn, "log: " + std::to_string(dropped_) + " lines dropped (stderr too slow)");
    dropped_ = 0;
  }

  // mutex_ held by the caller (through base_sink); waits until the writer has written all.
  void wait_written() {
    std::unique_lock lock(mutex_, std::adopt_lock);
    flush_requested_ = true;
    wake_.notify_one();
    written_.wait(lock, [this] { return (pending_.empty() && !writing_) || writer_done_; });
    lock.release();
  }

  static void write_all(const std::string& data) {
    std::size_t off = 0;
    while (off < data.size()) {
      ssize_t n = ::write(STDERR_FILENO, data.data() + off, data.size() - off);
      if (n > 0) {
        off += static_cast<std::size_t>(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && errno == EAGAIN) {
        pollfd p{STDERR_FILENO, POLLOUT, 0};
        ::poll(&p, 1, 100);
      } else {
        return;  // stderr is gone: nothing more can be said
      }
    }
  }

  void run() {
    pthread_setname_np(pthread_self(), "log-writer");
    std::string out;
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait_for(lock, std::chrono::seconds(1), [this] { return !pending_.empty() || stop_; });
      if (pending_.empty()) {
        if (stop_) break;
        // Quiet for a second: say what the rate limit held back, if anything.
        if (suppressed_ > 0) report_suppressed();
        if (dropped_ > 0) report_dropped();
        if (pending_.empty()) continue;
      }
      // Let the batch fill: the lines of the next kBatch go out in the same write.
      wake_.wait_for(lock, kBatch, [this] { return stop_ || flush_requested_ || pending_.size() >= kFlushBytes; });
      out.clear();
      out.swap(pending_);
      writing_ = true;
      lock.unlock();
      write_all(out);
      if (out.capacity() > kMaxPending) out = std::string();  // do not keep a burst's buffer
      lock.lock();
      writing_ = false;
      if (pending_.empty()) {
        flush_requested_ = false;
        written_.notify_all();
      }
    }
    writer_done_ = true;
    written_.notify_all();
  }

  std::thread writer_;
  std::condition_variable wake_;     // pending_ became non-empty, or stop_
  std::condition_variable written_;  // pending_ drained
  std::string pending_;              // guarded by mutex_
  bool writing_ = false;             // guarded by mutex_
  bool stop_ = false;                // guarded by mutex_
  bool writer_done_ = false;         // guarded by mutex_
  bool flush_requested_ = false;     // guarded by mutex_: a caller waits in wait_written()
  std::size_t dropped_ = 0;          // guarded by mutex_
  std::size_t suppressed_ = 0;       // guarded by mutex_
  double tokens_ = kBurst;           // guarded by mutex_
  SteadyClock::time_point last_refill_;
};

}  // namespace

Result<void> init_logging(std::string_view level) {
  auto parsed = spdlog::level::from_str(std::string(level));
  if (parsed == spdlog::level::off && level != "off") {
    return fail(Errc::kInvalidArgument, "unknown log level '" + std::string(level) + "'");
  }
  spdlog::drop("meshnode");
  auto logger = std::make_shared<spdlog::logger>("meshnode", std::make_shared<StderrWriterSink>());
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%fZ\t%l\t%v", spdlog::pattern_time_type::utc);
  logger->set_level(parsed);
  // Not flush_on(info): a flush waits for the writer. Critical lines are written before they return.
  logger->flush_on(spdlog::level::critical);
  spdlog::set_default_logger(logger);
  return {};
}

void flush_logging() {
  if (auto logger = spdlog::default_logger()) logger->flush();
}

}  // namespace meshnode::base
