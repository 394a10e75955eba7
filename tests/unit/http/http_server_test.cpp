#include "http/http_server.hpp"

#include <gtest/gtest.h>

#include <asio/io_context.hpp>
#include <stdexcept>
#include <string>

#include "http/telemetry_routes.hpp"
#include "unit/http/http_test_client.hpp"

namespace meshnode::http {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing_client::Client;
using testing_client::RawResponse;
using testing_client::ServerFixture;

class HttpServerTest : public ServerFixture {
 protected:
  void add_routes(HttpServer& server) override {
    add_readiness_routes(server, readiness_);
    add_metrics_routes(server, registry_);
    server.route("/echo", [](const HttpRequest& request) {
      std::string body = request.method + " " + request.path;
      for (const auto& [k, v] : request.query) body += " " + k + "=" + v;
      return HttpResponse{.body = body};
    });
    server.route("/throw", [](const HttpRequest&) -> HttpResponse { throw std::runtime_error("boom"); });
  }

  telemetry::Readiness readiness_;
  telemetry::MetricsRegistry registry_;
};

TEST_F(HttpServerTest, ReadinessReadyNotReadyAndMethod) {
  RawResponse r = get("GET", "/healthz/ready");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "ready\n");
  readiness_.add_pending("state manager");
  readiness_.add_pending("proxy");
  r = get("GET", "/healthz/ready");
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(r.body, "not ready, pending: proxy, state manager\n");
  r = get("POST", "/healthz/ready");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.headers["allow"], "GET");
}

TEST_F(HttpServerTest, MetricsOnBothPaths) {
  registry_.counter("istio_tcp_connections_opened_total", "opened", {{"reporter", "source"}}).inc(2);
  for (const char* path : {"/metrics", "/stats/prometheus"}) {
    RawResponse r = get("GET", path);
    EXPECT_EQ(r.status, 200) << path;
    EXPECT_EQ(r.headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
    EXPECT_NE(r.body.find("istio_tcp_connections_opened_total{reporter=\"source\"} 2\n"), std::string::npos);
  }
}

TEST_F(HttpServerTest, UnknownPathIs404ListingKnownPaths) {
  RawResponse r = get("GET", "/nope?x=1");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("not found: /nope"), std::string::npos);
  EXPECT_NE(r.body.find("  /healthz/ready\n"), std::string::npos);
  EXPECT_NE(r.body.find("  /metrics\n"), std::string::npos);
}

TEST_F(HttpServerTest, QueryIsPercentDecodedAndHandlerExceptionIs500) {
  EXPECT_EQ(get("GET", "/echo?level=a%3Ab+c").body, "GET /echo level=a:b c");
  EXPECT_EQ(get("GET", "/throw").status, 500);
}

TEST_F(HttpServerTest, KeepAliveServesSequentialAndPipelinedRequests) {
  Client client(server_->port());
  client.send(client.request("GET", "/echo?n=1"));
  auto first = client.read_response();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->body, "GET /echo n=1");
  EXPECT_EQ(first->headers["connection"], "keep-alive");
  client.send(client.request("POST", "/echo?n=2", "Content-Length: 5\r\n") + "hello" +
              client.request("GET", "/echo?n=3"));
  auto second = client.read_response();
  auto third = client.read_response();
  ASSERT_TRUE(second && third);
  EXPECT_EQ(second->body, "POST /echo n=2");
  EXPECT_EQ(third->body, "GET /echo n=3");
}

TEST_F(HttpServerTest, ConnectionCloseIsHonoured) {
  Client client(server_->port());
  client.send(client.request("GET", "/echo", "Connection: close\r\n"));
  auto r = client.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->headers["connection"], "close");
  EXPECT_TRUE(client.wait_closed(5s));
}

TEST_F(HttpServerTest, OversizedHeadIs431AndServerKeepsServing) {
  Client big(server_->port());
  big.send(big.request("GET", "/echo", "X-Big: " + std::string(16 * 1024, 'a') + "\r\n"));
  auto r = big.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 431);
  EXPECT_TRUE(big.wait_closed(5s));
  EXPECT_EQ(get("GET", "/echo").status, 200);
}

TEST_F(HttpServerTest, GarbageIs400ThenClose) {
  Client client(server_->port());
  client.send(std::string("\x16\x03\x01\x00\xa5\x01\x00\x00", 8));
  auto r = client.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_TRUE(client.wait_closed(5s));
}

TEST_F(HttpServerTest, UnsupportedBodiesAreRejectedThenClosed) {
  EXPECT_EQ(get("POST", "/echo", "Transfer-Encoding: chunked\r\n").status, 501);
  EXPECT_EQ(get("POST", "/echo", "Content-Length: 100000\r\n").status, 413);
}

TEST_F(HttpServerTest, SilentClientIsClosedAfterHeadTimeout) {
  const auto start = Clock::now();
  Client client(server_->port());
  EXPECT_TRUE(client.wait_closed(6s));
  const auto elapsed = Clock::now() - start;
  EXPECT_GE(elapsed, 1500ms);
  EXPECT_LT(elapsed, 5s);
}

TEST_F(HttpServerTest, StopClosesOpenConnections) {
  Client client(server_->port());
  client.send(client.request("GET", "/echo"));
  ASSERT_TRUE(client.read_response());
  server_->stop();
  EXPECT_TRUE(client.wait_closed(5s));
}

TEST(HttpServerListen, ReportsBadHostAndBusyPort) {
  asio::io_context io;
  HttpServer first(io, "first");
  ASSERT_TRUE(first.listen("127.0.0.1", 0));
  HttpServer second(io, "second");
  auto busy = second.listen("127.0.0.1", first.port());
  ASSERT_FALSE(busy);
  EXPECT_EQ(busy.error().code, base::Errc::kIo);
  EXPECT_NE(busy.error().context.find("127.0.0.1:" + std::to_string(first.port())), std::string::npos);
  auto bad = second.listen("localhost", 0);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, base::Errc::kInvalidArgument);
  EXPECT_TRUE(second.listen("[::1]", 0) || true);  // IPv6 may be disabled; must not crash
}

}  // namespace
}  // namespace meshnode::http
