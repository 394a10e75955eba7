#pragma once

// A blocking HTTP/1.1 test client and a server fixture for the HttpServer unit tests (http/ and
// admin/ routes).
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
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "base/unique_fd.hpp"
#include "http/http_server.hpp"

namespace meshnode::http::testing_client {

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

/// An HttpServer on 127.0.0.1:<ephemeral> run by its own thread; subclasses add the routes.
class ServerFixture : public ::testing::Test {
 protected:
  virtual void add_routes(HttpServer& server) = 0;

  void SetUp() override {
    server_ = std::make_unique<HttpServer>(io_, "test");
    add_routes(*server_);
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

  asio::io_context io_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
};

}  // namespace meshnode::http::testing_client
