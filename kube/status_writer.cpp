#include "kube/status_writer.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

namespace meshnode::kube {
namespace {

/// Worth another attempt: the API server or the path to it failed, not the request.
bool retryable(const base::Error& error) {
  const int status = http_status(error);
  if (status == 0) return error.code != base::Errc::kProtocol && error.code != base::Errc::kConfig;
  return status == 429 || status >= 500;
}

}  // namespace

struct StatusWriter::Impl {
  struct Request {
    std::string namespace_;
    std::string name;
    std::string key;
    std::optional<std::string> value;
    std::uint64_t generation = 0;  // bumps when a newer value supersedes this one
  };
  using Target = std::pair<std::string, std::string>;  // (pod key, annotation key)

  Impl(StatusWriterOptions o, Done d, std::unique_ptr<Client> c)
      : options(std::move(o)), done(std::move(d)), client(std::move(c)) {}

  StatusWriterOptions options;
  Done done;
  std::unique_ptr<Client> client;

  mutable std::mutex mutex;
  std::condition_variable changed;
  std::map<Target, Request> wanted;  // the latest value per target
  std::deque<Target> order;          // targets with a queued request, oldest first
  std::size_t in_flight = 0;
  std::uint64_t generations = 0;
  bool stopping = false;
  std::thread thread;

  /// Still the latest wish for its target (mutex held)?
  bool current(const Target& target, std::uint64_t generation) const {
    auto it = wanted.find(target);
    return it != wanted.end() && it->second.generation == generation;
  }

  base::Result<void> attempt(const Request& request) {
    auto patched = client->patch_pod_status(request.namespace_, request.name, annotation_patch(request.key, request.value));
    if (!patched) return std::unexpected(patched.error());
    return {};
  }

  /// Writes one request, retrying while it stays the latest wish. nullopt when superseded.
  std::optional<base::Result<void>> write(const Target& target, const Request& request) {
    Backoff backoff(options.backoff);
    for (int tries = 1;; ++tries) {
      auto result = attempt(request);
      if (result || !retryable(result.error()) || tries >= options.max_attempts) return result;
      const auto wait = backoff.next();
      spdlog::warn("kube: status patch failed pod={} attempt={} retry_in_ms={} error=\"{}\"", target.first, tries,
                   wait.count(), result.error().message());
      std::unique_lock lock(mutex);
      changed.wait_for(lock, wait, [&] { return stopping || !current(target, request.generation); });
      if (stopping) return result;
      if (!current(target, request.generation)) return std::nullopt;
    }
  }

  void run() {
    while (true) {
      Target target;
      Request request;
      {
        std::unique_lock lock(mutex);
        changed.wait(lock, [&] { return stopping || !order.empty(); });
        if (stopping) return;
        target = order.front();
        order.pop_front();
        request = wanted.at(target);
        ++in_flight;
      }
      auto result = write(target, request);
      if (result && !*result) {
        spdlog::warn("kube: status patch gave up pod={} annotation={} error=\"{}\"", target.first, request.key,
                     result->error().message());
      }
      if (result && done) done(target.first, *result);  // before flush() can see the request finished
      {
        std::lock_guard lock(mutex);
        --in_flight;
        if (current(target, request.generation)) wanted.erase(target);
      }
      changed.notify_all();
    }
  }
};

StatusWriter::StatusWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StatusWriter::~StatusWriter() { stop(); }

base::Result<std::unique_ptr<StatusWriter>> StatusWriter::start(ClusterConfig config, StatusWriterOptions options,
                                                                Done done) {
  auto client = Client::create(std::move(config), options.http, options.encoding);
  if (!client) return std::unexpected(client.error());
  auto impl = std::make_unique<Impl>(std::move(options), std::move(done), std::move(*client));
  Impl* raw = impl.get();
  std::unique_ptr<StatusWriter> writer(new StatusWriter(std::move(impl)));
  raw->thread = std::thread([raw] { raw->run(); });
  return writer;
}

void StatusWriter::set_annotation(std::string namespace_, std::string name, std::string key,
                                  std::optional<std::string> value) {
  Impl::Target target{namespace_ + "/" + name, key};
  {
    std::lock_guard lock(impl_->mutex);
    auto [it, fresh] = impl_->wanted.try_emplace(target);
    const bool queued = !fresh && std::find(impl_->order.begin(), impl_->order.end(), target) != impl_->order.end();
    it->second = Impl::Request{std::move(namespace_), std::move(name), std::move(key), std::move(value),
                               ++impl_->generations};
    if (!queued) impl_->order.push_back(std::move(target));
  }
  impl_->changed.notify_all();
}

bool StatusWriter::flush(std::chrono::milliseconds timeout) {
  std::unique_lock lock(impl_->mutex);
  return impl_->changed.wait_for(lock, timeout, [&] { return impl_->order.empty() && impl_->in_flight == 0; });
}

std::size_t StatusWriter::pending() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->order.size() + impl_->in_flight;
}

void StatusWriter::stop() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->changed.notify_all();
  impl_->client->interrupt();
  if (impl_->thread.joinable()) impl_->thread.join();
}

const ClientStats& StatusWriter::stats() const noexcept { return impl_->client->stats(); }

}  // namespace meshnode::kube
