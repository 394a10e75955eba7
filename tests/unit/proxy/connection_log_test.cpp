// The access-log line an operator reads: how a connection ended must be in it.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <sstream>
#include <string>

#include "proxy/connection_log.hpp"

namespace meshnode::proxy {
namespace {

/// Routes the default logger into a string for one test.
class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    sink->set_pattern("%l %v");
    auto logger = std::make_shared<spdlog::logger>("capture", sink);
    logger->set_level(spdlog::level::info);
    spdlog::set_default_logger(logger);
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

ConnectionRecord record() {
  ConnectionRecord r;
  r.id = "c1";
  r.direction = "outbound";
  r.dst_addr = "10.0.0.2:15008";
  return r;
}

TEST(ConnectionLog, CleanEndHasNoReason) {
  CapturedLog log;
  log_connection(record());
  EXPECT_EQ(log.text().rfind("info ", 0), 0u) << log.text();
  EXPECT_EQ(log.text().find("ended="), std::string::npos) << log.text();
  EXPECT_EQ(log.text().find("error="), std::string::npos) << log.text();
}

TEST(ConnectionLog, PeerResetIsInfoAndSaysHowItEnded) {
  CapturedLog log;
  auto r = record();
  r.moved.error = base::Error{base::Errc::kReset, "HBONE stream refused by the peer (REFUSED_STREAM)"};
  log_connection(r);
  EXPECT_EQ(log.text().rfind("info ", 0), 0u) << log.text();
  EXPECT_NE(log.text().find("ended=\"") , std::string::npos) << log.text();
  EXPECT_NE(log.text().find("REFUSED_STREAM"), std::string::npos) << log.text();
}

TEST(ConnectionLog, FailureIsAnErrorWithItsReason) {
  CapturedLog log;
  auto r = record();
  r.moved.error = base::Error{base::Errc::kPolicyDenied, "denied by policy ns/deny-all"};
  log_connection(r);
  EXPECT_EQ(log.text().rfind("error ", 0), 0u) << log.text();
  EXPECT_NE(log.text().find("error=\"") , std::string::npos) << log.text();
  EXPECT_NE(log.text().find("deny-all"), std::string::npos) << log.text();
}

}  // namespace
}  // namespace meshnode::proxy
