#include "admin/admin_routes.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <string>
#include <thread>

#include "unit/http/http_test_client.hpp"

namespace meshnode::admin {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using http::testing_client::RawResponse;

class AdminRoutesTest : public http::testing_client::ServerFixture {
 protected:
  void add_routes(http::HttpServer& server) override {
    add_admin_routes(
        server, [] { return std::string("{\"workloads\":[]}"); }, [this] { quit_called_ = true; });
  }

  std::atomic<bool> quit_called_{false};
};

TEST_F(AdminRoutesTest, AdminConfigDumpIndexAndQuit) {
  RawResponse r = get("GET", "/config_dump");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], "application/json");
  EXPECT_EQ(r.body, "{\"workloads\":[]}");
  r = get("GET", "/");
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("/config_dump\n"), std::string::npos);
  EXPECT_NE(r.body.find("/quitquitquit\n"), std::string::npos);
  r = get("GET", "/quitquitquit");
  EXPECT_EQ(r.status, 405);
  EXPECT_FALSE(quit_called_);
  r = get("POST", "/quitquitquit");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "shutdown now\n");
  const auto deadline = Clock::now() + 5s;
  while (!quit_called_ && Clock::now() < deadline) std::this_thread::yield();
  EXPECT_TRUE(quit_called_);
}

TEST_F(AdminRoutesTest, MemoryReportsRssAndTheAllocator) {
  RawResponse r = get("GET", "/debug/memory");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], "application/json");
  auto j = nlohmann::json::parse(r.body);
  // The test executable runs on glibc (or a sanitizer's allocator): RSS from the kernel, no totals.
  EXPECT_EQ(j.at("allocator"), "glibc");
  EXPECT_GT(j.at("rss_bytes").get<std::uint64_t>(), 1'000'000u);
  EXPECT_GT(j.at("rss_anon_bytes").get<std::uint64_t>(), 0u);
  EXPECT_GT(j.at("rss_file_bytes").get<std::uint64_t>(), 0u);
  EXPECT_EQ(j.at("allocated_bytes"), 0);
  EXPECT_TRUE(j.at("bins").is_array());
  EXPECT_TRUE(j.at("bins").empty());
  // The admin server's own socket has a reactor record.
  EXPECT_GE(j.at("reactor_records").at("created").get<std::uint64_t>(), 1u);
  EXPECT_TRUE(j.at("reactor_records").contains("destroyed"));
  EXPECT_TRUE(j.at("reactor_records").contains("retired"));
  // A heap profile needs jemalloc with profiling on: refused with the reason, never a 200.
  r = get("GET", "/debug/heap_profile");
  EXPECT_EQ(r.status, 405);
  r = get("POST", "/debug/heap_profile");
  EXPECT_EQ(r.status, 409);
  EXPECT_NE(r.body.find("heap profiling is off"), std::string::npos) << r.body;
}

}  // namespace
}  // namespace meshnode::admin
