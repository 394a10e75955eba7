#include "admin/http_server.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <asio/io_context.hpp>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "admin/admin_routes.hpp"
#include "base/unique_fd.hpp"

namespace meshnode::admin {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct RawResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lowercased names
  std::string body;
};

// A blocking POSIX client with poll-based deadlines: the test never sleeps blindly.
class Client {
 public:
  explicit Client(uint16_t port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      throw std::runtime_error("connect");
  }

  void send(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_.get(), data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("send");
      data.remove_prefix(static_cast<std::size_t>(n));
    }
  }

  // Reads one Content-Length framed response; nullopt on EOF/error/deadline.
  std::optional<RawResponse> read_response(Clock::duration timeout = 5s) {
    const auto deadline = Clock::now() + timeout;
    std::size_t end;
    while ((end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (!fill(deadline)) return std::nullopt;
    }
    RawResponse response = parse_head(buffer_.substr(0, end));
    buffer_.erase(0, end + 4);
    const std::size_t length = std::stoul(response.headers["content-length"]);
    while (buffer_.size() < length) {
      if (!fill(deadline)) return std::nullopt;
    }
    response.body = buffer_.substr(0, length);
    buffer_.erase(0, length);
    return response;
  }

  // True once the server closed the connection (EOF or reset) before the deadline.
  bool wait_closed(Clock::duration timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      if (!fill(deadline)) return closed_;
    }
    return false;
  }

  std::string request(std::string_view method, std::string_view target, std::string_view extra = "") {
    return std::string(method) + " " + std::string(target) + " HTTP/1.1\r\nHost: test\r\n" +
           std::string(extra) + "\r\n";
  }

 private:
  static RawResponse parse_head(const std::string& head) {
    RawResponse response;
    response.status = std::stoi(head.substr(9, 3));
    std::size_t pos = head.find("\r\n");
    while (pos != std::string::npos) {
      const std::size_t next = head.find("\r\n", pos + 2);
      const std::string line =
          head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
      const std::size_t colon = line.find(':');
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      response.headers[name] = line.substr(colon + 2);
      pos = next;
    }
    return response;
  }

  // One poll+recv; false on EOF, error or deadline.
  bool fill(Clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd pfd{fd_.get(), POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(left)) <= 0) return false;
    char chunk[4096];
    const ssize_t n = ::recv(fd_.get(), chunk, sizeof chunk, 0);
    if (n <= 0) {
      closed_ = n == 0 || errno == ECONNRESET;
      return false;
    }
    buffer_.append(chunk, static_cast<std::size_t>(n));
    return true;
  }

  base::UniqueFd fd_;
  std::string buffer_;
  bool closed_ = false;
};

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<HttpServer>(io_, "test");
    add_readiness_routes(*server_, readiness_);
    add_metrics_routes(*server_, registry_);
    add_admin_routes(
        *server_, [] { return std::string("{\"workloads\":[]}"); }, [this] { quit_called_ = true; });
    server_->route("/echo", [](const HttpRequest& request) {
      std::string body = request.method + " " + request.path;
      for (const auto& [k, v] : request.query) body += " " + k + "=" + v;
      return HttpResponse{.body = body};
    });
    server_->route("/throw", [](const HttpRequest&) -> HttpResponse { throw std::runtime_error("boom"); });
    ASSERT_TRUE(server_->listen("127.0.0.1", 0));
    ASSERT_NE(server_->port(), 0);
    thread_ = std::thread([this] { io_.run(); });
  }

  void TearDown() override {
    server_->stop();
    io_.stop();
    thread_.join();
    server_.reset();
  }

  RawResponse get(std::string_view method, std::string_view target, std::string_view extra = "") {
    Client client(server_->port());
    client.send(client.request(method, target, extra));
    auto response = client.read_response();
    EXPECT_TRUE(response.has_value());
    return response.value_or(RawResponse{});
  }

  telemetry::Readiness readiness_;
  telemetry::MetricsRegistry registry_;
  std::atomic<bool> quit_called_{false};
  asio::io_context io_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
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

TEST_F(HttpServerTest, AdminConfigDumpIndexAndQuit) {
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
}  // namespace meshnode::admin
