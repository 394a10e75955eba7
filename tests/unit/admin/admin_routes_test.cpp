#include "admin/admin_routes.hpp"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace meshnode::admin
