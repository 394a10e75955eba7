#include "http/http_server.hpp"

#include <fmt/format.h>

#include <array>
#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <atomic>
#include <chrono>
#include <map>
#include <optional>

#include "base/log.hpp"
#include "net/drain_scope.hpp"

namespace meshnode::http {
namespace {

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr auto kHeadTimeout = 2s;    // ztunnel's header read timeout
constexpr auto kIdleTimeout = 30s;   // between keep-alive requests
constexpr auto kWriteTimeout = 10s;  // a client that never reads its response
constexpr auto kBodyTimeout = 2s;
constexpr auto kLingerTimeout = 1s;
constexpr std::size_t kLingerMaxBytes = 64 * 1024;
constexpr std::size_t kMaxConnections = 128;
constexpr auto kUseTuple = asio::experimental::as_tuple(asio::use_awaitable);

/// One accepted connection, shared by its serving coroutine and its watchdog.
struct Connection {
  Connection(tcp::socket s, uint64_t conn_id)
      : socket(std::move(s)), timer(socket.get_executor()), id(conn_id) {}

  /// Moves the deadline; wakes the watchdog only when it must fire earlier than armed.
  void set_deadline(Clock::time_point tp) {
    deadline = tp;
    if (tp < timer.expiry()) timer.cancel();
  }
  void clear_deadline() { deadline = Clock::time_point::max(); }
  void close() {
    std::error_code ignored;
    socket.close(ignored);
    timer.cancel();
  }

  tcp::socket socket;
  asio::steady_timer timer;
  Clock::time_point deadline = Clock::time_point::max();
  bool timed_out = false;
  uint64_t id;
};

// Closes the socket once the connection's current deadline passes, which aborts the pending I/O.
asio::awaitable<void> watchdog(std::shared_ptr<Connection> c) {
  while (c->socket.is_open()) {
    c->timer.expires_at(c->deadline);
    co_await c->timer.async_wait(kUseTuple);  // woken early when the deadline moves
    if (!c->socket.is_open()) break;
    if (Clock::now() >= c->deadline) {
      c->timed_out = true;
      c->close();
    }
  }
}

asio::awaitable<bool> write_all(Connection& c, const std::string& data) {
  c.set_deadline(Clock::now() + kWriteTimeout);
  const auto bytes = asio::buffer(data);
  auto [ec, n] = co_await asio::async_write(c.socket, bytes, kUseTuple);
  c.clear_deadline();
  co_return !ec;
}

// Half-closes, then drains what the client still sends (bounded) so the kernel does not answer
// unread bytes with an RST that would destroy the response before the client reads it.
asio::awaitable<void> linger_close(Connection& c) {
  std::error_code ignored;
  c.socket.shutdown(tcp::socket::shutdown_send, ignored);
  c.set_deadline(Clock::now() + kLingerTimeout);
  std::array<char, 4096> scratch{};
  std::size_t total = 0;
  while (total < kLingerMaxBytes) {
    const auto into = asio::buffer(scratch);
    auto [ec, n] = co_await c.socket.async_read_some(into, kUseTuple);
    if (ec) break;
    total += n;
  }
  c.close();
}

asio::awaitable<void> reply_and_close(Connection& c, int status, std::string_view why) {
  HttpResponse response;
  response.status = status;
  response.body = fmt::format("{}\n", why);
  const std::string wire = serialize_response(response, false, false);
  if (co_await write_all(c, wire)) co_await linger_close(c);
  c.close();
}

// Reads and drops a Content-Length body; bytes past it stay in `buffer` (pipelining).
asio::awaitable<bool> discard_body(Connection& c, std::string& buffer, uint64_t length) {
  const auto buffered = static_cast<std::size_t>(std::min<uint64_t>(length, buffer.size()));
  buffer.erase(0, buffered);
  uint64_t remaining = length - buffered;
  c.set_deadline(Clock::now() + kBodyTimeout);
  std::array<char, 4096> chunk{};
  while (remaining > 0) {
    const auto into = asio::buffer(chunk);
    auto [ec, n] = co_await c.socket.async_read_some(into, kUseTuple);
    if (ec) co_return false;
    const auto body = static_cast<std::size_t>(std::min<uint64_t>(remaining, n));
    remaining -= body;
    buffer.append(chunk.data() + body, n - body);
  }
  c.clear_deadline();
  co_return true;
}

std::string format_endpoint(const tcp::endpoint& ep) {
  const auto addr = ep.address();
  return addr.is_v6() ? fmt::format("[{}]:{}", addr.to_string(), ep.port())
                      : fmt::format("{}:{}", addr.to_string(), ep.port());
}

}  // namespace

struct HttpServer::Impl {
  Impl(asio::io_context& context, std::string server_name, telemetry::Counter* task_failures)
      : io(context), name(std::move(server_name)), tasks("http " + name, task_failures) {}

  static asio::awaitable<void> accept_loop(std::shared_ptr<Impl> self, tcp::acceptor* acceptor);
  static asio::awaitable<void> serve(std::shared_ptr<Impl> self, std::shared_ptr<Connection> c);
  asio::awaitable<std::optional<ParsedHead>> read_head(Connection& c, std::string& buffer, bool first);
  HttpResponse handle(const HttpRequest& request, uint64_t conn_id);
  HttpResponse not_found(const HttpRequest& request) const;
  void stop_now();

  asio::io_context& io;
  const std::string name;
  net::DrainScope tasks;
  std::map<std::string, HttpHandler> routes;
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors;
  std::map<uint64_t, std::weak_ptr<Connection>> connections;
  uint64_t next_id = 0;
  bool stopped = false;
  std::atomic<uint16_t> port{0};
};

asio::awaitable<void> HttpServer::Impl::accept_loop(std::shared_ptr<Impl> self, tcp::acceptor* acceptor) {
  asio::steady_timer backoff(self->io);
  for (;;) {
    auto [ec, socket] = co_await acceptor->async_accept(kUseTuple);
    if (self->stopped || !acceptor->is_open()) co_return;
    if (ec) {
      // EMFILE and friends: back off instead of spinning on a full fd table.
      spdlog::debug("http server={} accept failed: {}", self->name, ec.message());
      backoff.expires_after(100ms);
      co_await backoff.async_wait(kUseTuple);
      continue;
    }
    if (self->connections.size() >= kMaxConnections) {
      spdlog::debug("http server={} too many connections, closing a new one", self->name);
      continue;  // `socket` closes here
    }
    std::error_code ignored;  // responses are single writes: Nagle would only add delayed-ACK latency
    socket.set_option(tcp::no_delay(true), ignored);
    auto c = std::make_shared<Connection>(std::move(socket), ++self->next_id);
    self->connections.emplace(c->id, c);
    const std::string id = fmt::format("{} conn={}", self->name, c->id);
    self->tasks.spawn(self->io.get_executor(), watchdog(c), id + " watchdog");
    self->tasks.spawn(self->io.get_executor(), serve(self, c), id);
  }
}

asio::awaitable<std::optional<ParsedHead>> HttpServer::Impl::read_head(Connection& c, std::string& buffer,
                                                                       bool first) {
  const bool idle = !first && buffer.empty();
  c.set_deadline(Clock::now() + (idle ? Clock::duration(kIdleTimeout) : Clock::duration(kHeadTimeout)));
  std::array<char, 4096> chunk{};
  for (;;) {
    HeadParse parsed = parse_request_head(buffer);
    if (parsed.status == HeadStatus::kComplete) {
      c.clear_deadline();
      co_return std::move(parsed.head);
    }
    if (parsed.status != HeadStatus::kIncomplete) {
      const bool too_large = parsed.status == HeadStatus::kTooLarge;
      spdlog::debug("http server={} conn={} rejected request: {}", name, c.id, parsed.error);
      const int status = too_large ? 431 : 400;
      const std::string_view why = too_large ? "request header fields too large" : "bad request";
      co_await reply_and_close(c, status, why);
      co_return std::nullopt;
    }
    const auto into = asio::buffer(chunk);
    auto [ec, n] = co_await c.socket.async_read_some(into, kUseTuple);
    if (ec) {
      if (c.timed_out) spdlog::debug("http server={} conn={} request head timed out", name, c.id);
      co_return std::nullopt;
    }
    if (idle && buffer.empty()) c.set_deadline(Clock::now() + kHeadTimeout);
    buffer.append(chunk.data(), n);
  }
}

HttpResponse HttpServer::Impl::not_found(const HttpRequest& request) const {
  HttpResponse response;
  response.status = 404;
  response.body = fmt::format("not found: {}\nknown paths:\n", request.path);
  for (const auto& [path, handler] : routes) response.body += fmt::format("  {}\n", path);
  return response;
}

HttpResponse HttpServer::Impl::handle(const HttpRequest& request, uint64_t conn_id) {
  const auto it = routes.find(request.path);
  HttpResponse response;
  if (it == routes.end()) {
    response = not_found(request);
  } else {
    try {
      response = it->second(request);
    } catch (const std::exception& e) {
      spdlog::error("http server={} path={} handler threw: {}", name, request.path, e.what());
      response = HttpResponse{.status = 500, .body = "internal error\n"};
    }
  }
  spdlog::debug("http server={} conn={} method={} path={} status={}", name, conn_id, request.method,
                request.path, response.status);
  return response;
}

asio::awaitable<void> HttpServer::Impl::serve(std::shared_ptr<Impl> self, std::shared_ptr<Connection> c) {
  std::string buffer;
  for (bool first = true; !self->stopped; first = false) {
    std::optional<ParsedHead> head = co_await self->read_head(*c, buffer, first);
    if (!head) break;
    buffer.erase(0, head->head_bytes);
    if (head->has_transfer_encoding) {
      constexpr std::string_view kWhy = "request bodies with Transfer-Encoding are not supported";
      co_await reply_and_close(*c, 501, kWhy);
      break;
    }
    if (head->content_length > kMaxBodyBytes) {
      constexpr std::string_view kWhy = "request body too large";
      co_await reply_and_close(*c, 413, kWhy);
      break;
    }
    if (!co_await discard_body(*c, buffer, head->content_length) || self->stopped) break;
    HttpResponse response = self->handle(head->request, c->id);
    const bool keep_alive = head->keep_alive && !self->stopped;
    const std::string wire = serialize_response(response, keep_alive, head->request.method == "HEAD");
    const bool written = co_await write_all(*c, wire);
    if (response.after_response) response.after_response();
    if (!written) break;
    if (!keep_alive) {
      co_await linger_close(*c);
      break;
    }
  }
  c->close();
  self->connections.erase(c->id);
}

void HttpServer::Impl::stop_now() {
  if (stopped) return;
  stopped = true;
  std::error_code ignored;
  for (auto& acceptor : acceptors) acceptor->close(ignored);
  for (auto& [id, weak] : connections) {
    if (auto c = weak.lock()) c->close();
  }
  spdlog::info("http server={} stopped", name);
}

HttpServer::HttpServer(asio::io_context& io, std::string name, telemetry::Counter* task_failures)
    : impl_(std::make_shared<Impl>(io, std::move(name), task_failures)) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::route(std::string path, HttpHandler handler) {
  impl_->routes.insert_or_assign(std::move(path), std::move(handler));
}

std::vector<std::string> HttpServer::paths() const {
  std::vector<std::string> out;
  for (const auto& [path, handler] : impl_->routes) out.push_back(path);
  return out;
}

base::Result<void> HttpServer::listen(const std::string& host, std::uint16_t port) {
  if (impl_->stopped)
    return base::fail(base::Errc::kInvalidArgument, impl_->name + " server: listen after stop");
  std::string literal = host;
  if (literal.size() > 2 && literal.front() == '[' && literal.back() == ']')
    literal = literal.substr(1, literal.size() - 2);
  std::error_code ec;
  const auto address = asio::ip::make_address(literal, ec);
  if (ec)
    return base::fail(base::Errc::kInvalidArgument,
                      fmt::format("{} server: {} is not an IP literal", impl_->name, host));
  const tcp::endpoint endpoint(address, port);
  const std::string where = fmt::format("{} server listen {}", impl_->name, format_endpoint(endpoint));
  auto acceptor = std::make_unique<tcp::acceptor>(impl_->io);
  if (acceptor->open(endpoint.protocol(), ec); ec) return base::fail(base::Errc::kIo, where + ": socket", ec);
  if (acceptor->set_option(tcp::acceptor::reuse_address(true), ec); ec)
    return base::fail(base::Errc::kIo, where + ": SO_REUSEADDR", ec);
  if (acceptor->bind(endpoint, ec); ec) return base::fail(base::Errc::kIo, where + ": bind", ec);
  if (acceptor->listen(asio::socket_base::max_listen_connections, ec); ec)
    return base::fail(base::Errc::kIo, where + ": listen", ec);
  const auto bound = acceptor->local_endpoint(ec);
  if (ec) return base::fail(base::Errc::kIo, where + ": getsockname", ec);
  uint16_t expected = 0;
  impl_->port.compare_exchange_strong(expected, bound.port());
  spdlog::info("http server={} listening on {}", impl_->name, format_endpoint(bound));
  impl_->tasks.spawn(impl_->io.get_executor(), Impl::accept_loop(impl_, acceptor.get()), impl_->name + " accept loop");
  impl_->acceptors.push_back(std::move(acceptor));
  return {};
}

std::uint16_t HttpServer::port() const { return impl_->port.load(); }

void HttpServer::stop() {
  asio::dispatch(impl_->io.get_executor(), [self = impl_] { self->stop_now(); });
}

}  // namespace meshnode::http
