#include "agent/event_server.hpp"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "base/unique_fd.hpp"

namespace meshnode::agent {
namespace {

using namespace std::chrono_literals;

// Sends `raw` (optionally half-closing), returns everything the server wrote before closing.
std::string round_trip(const std::string& path, const std::string& raw, bool half_close = false) {
  base::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return "connect failed";
  (void)!::send(fd.get(), raw.data(), raw.size(), MSG_NOSIGNAL);
  if (half_close) ::shutdown(fd.get(), SHUT_WR);
  std::string out;
  char buf[4096];
  pollfd p{fd.get(), POLLIN, 0};
  while (::poll(&p, 1, 5000) > 0) {
    const ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

std::string post(const std::string& target, const std::string& body) {
  return "POST " + target + " HTTP/1.1\r\nHost: unix\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

class EventServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = std::filesystem::temp_directory_path() / ("mn-ev-" + std::to_string(rd()));
    path_ = (dir_ / "sub" / "pluginevent.sock").string();
    EventServerLimits limits;
    limits.io_timeout = 300ms;
    auto server = EventServer::start(
        path_,
        [this](const EventRequest& r) {
          seen_ = r;
          return EventResponse{200, "{\"ok\":true}", "application/json"};
        },
        limits);
    ASSERT_TRUE(server) << server.error().message();
    server_ = std::move(*server);
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
  std::string path_;
  EventRequest seen_;
  std::unique_ptr<EventServer> server_;
};

TEST_F(EventServerTest, ServesOneRequestPerConnectionWithTheBody) {
  const std::string reply = round_trip(path_, post("/cmdadd?x=1", "{\"a\":1}"));
  EXPECT_TRUE(reply.starts_with("HTTP/1.1 200 OK\r\n")) << reply;
  EXPECT_NE(reply.find("Connection: close\r\n"), std::string::npos) << reply;
  EXPECT_TRUE(reply.ends_with("\r\n\r\n{\"ok\":true}")) << reply;
  EXPECT_EQ(seen_.method, "POST");
  EXPECT_EQ(seen_.path, "/cmdadd");
  EXPECT_EQ(seen_.body, "{\"a\":1}");
}

TEST_F(EventServerTest, SocketAndDirectoryModes) {
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u);
  ASSERT_EQ(::stat((dir_ / "sub").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0750u);
}

// Table: a bad request → the status the server answers with, before any handler runs.
TEST_F(EventServerTest, BoundedAndStrict) {
  struct Case {
    std::string raw;
    const char* status_line;
  };
  const Case cases[] = {
      {"GARBAGE\x01\r\n\r\n", "HTTP/1.1 400 "},
      {"POST /cmdadd HTTP/1.1\r\nX: " + std::string(9000, 'a') + "\r\n\r\n", "HTTP/1.1 431 "},
      {"POST /cmdadd HTTP/1.1\r\nContent-Length: 70000\r\n\r\n", "HTTP/1.1 413 "},
      {"POST /cmdadd HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "HTTP/1.1 501 "},
  };
  for (const Case& c : cases) {
    const std::string reply = round_trip(path_, c.raw);
    EXPECT_TRUE(reply.starts_with(c.status_line)) << c.status_line << " got: " << reply.substr(0, 40);
  }
  EXPECT_TRUE(seen_.path.empty()) << "no handler ran";
}

TEST_F(EventServerTest, TruncatedOrSlowRequestsAreClosedWithoutAnswer) {
  EXPECT_EQ(round_trip(path_, "POST /cmdadd HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc", /*half_close=*/true), "");
  EXPECT_EQ(round_trip(path_, "POST /cmdadd HTTP/1.1\r\n"), "");  // never finished: io_timeout
  // The server is still serving afterwards.
  EXPECT_TRUE(round_trip(path_, post("/cmdadd", "{}")).starts_with("HTTP/1.1 200 "));
}

}  // namespace
}  // namespace meshnode::agent
