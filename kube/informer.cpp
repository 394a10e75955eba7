#include "kube/informer.hpp"

#include <spdlog/spdlog.h>

#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>

namespace meshnode::kube {
namespace {

using base::Errc;
using base::fail;
using base::Result;
using Clock = std::chrono::steady_clock;

template <class T>
constexpr std::string_view resource_name() {
  if constexpr (std::is_same_v<T, Pod>) {
    return "pods";
  } else {
    return "namespaces";
  }
}

/// 410 Gone / Expired, as an HTTP status or inside a watch ERROR event.
bool expired(const base::Error& error) { return http_status(error) == 410; }

template <class T>
struct Change {
  enum Kind { kAdd, kUpdate, kDelete } kind;
  std::shared_ptr<const T> old;
  std::shared_ptr<const T> now;
  bool final_state_unknown = false;
};

}  // namespace

template <class T>
struct Informer<T>::Impl {
  Impl(InformerOptions<T> o, InformerHandlers<T> h, std::unique_ptr<Client> c)
      : options(std::move(o)), handlers(std::move(h)), client(std::move(c)) {}

  InformerOptions<T> options;
  InformerHandlers<T> handlers;
  std::unique_ptr<Client> client;
  InformerStats stats;
  std::mt19937 rng{std::random_device{}()};

  mutable std::mutex mutex;
  mutable std::condition_variable changed;  // any cache change, sync, or stop
  std::unordered_map<std::string, std::shared_ptr<const T>> objects;
  std::unordered_multimap<std::string, std::string> index;  // index value -> key
  std::string resource_version;
  bool synced = false;
  bool stopping = false;
  std::thread thread;

  // --- cache mutation (mutex held) ---
  void index_add(const std::string& key, const T& object) {
    if (!options.index) return;
    for (auto& value : options.index(object)) index.emplace(std::move(value), key);
  }
  void index_remove(const std::string& key, const T& object) {
    if (!options.index) return;
    for (const auto& value : options.index(object)) {
      auto [first, last] = index.equal_range(value);
      for (auto it = first; it != last; ++it) {
        if (it->second == key) {
          index.erase(it);
          break;
        }
      }
    }
  }
  void upsert(std::shared_ptr<const T> now, bool recreated_unknown, std::vector<Change<T>>& changes) {
    auto key = object_key(now->metadata);
    auto it = objects.find(key);
    if (it == objects.end()) {
      index_add(key, *now);
      changes.push_back({Change<T>::kAdd, nullptr, now});
      objects.emplace(std::move(key), std::move(now));
      return;
    }
    auto old = it->second;
    if (old->metadata.resource_version == now->metadata.resource_version && old->metadata.uid == now->metadata.uid) return;
    index_remove(key, *old);
    index_add(key, *now);
    if (old->metadata.uid != now->metadata.uid) {
      changes.push_back({Change<T>::kDelete, old, nullptr, recreated_unknown});
      changes.push_back({Change<T>::kAdd, nullptr, now});
    } else {
      changes.push_back({Change<T>::kUpdate, old, now});
    }
    it->second = std::move(now);
  }
  void erase(const std::string& key, std::shared_ptr<const T> last, bool unknown, std::vector<Change<T>>& changes) {
    auto it = objects.find(key);
    if (it != objects.end()) {
      index_remove(key, *it->second);
      if (!last) last = it->second;
      objects.erase(it);
    }
    if (last) changes.push_back({Change<T>::kDelete, std::move(last), nullptr, unknown});
  }

  std::shared_ptr<const T> prepare(T&& object) {
    if (options.transform) options.transform(object);
    return std::make_shared<const T>(std::move(object));
  }

  void notify(const std::vector<Change<T>>& changes) {
    for (const auto& c : changes) {
      switch (c.kind) {
        case Change<T>::kAdd:
          if (handlers.on_add) handlers.on_add(*c.now);
          break;
        case Change<T>::kUpdate:
          if (handlers.on_update) handlers.on_update(*c.old, *c.now);
          break;
        case Change<T>::kDelete:
          if (handlers.on_delete) handlers.on_delete(*c.old, c.final_state_unknown);
          break;
      }
    }
  }

  /// Makes the cache equal to a fresh list, reporting the differences.
  void replace(std::vector<T> items, std::string list_version) {
    std::vector<std::shared_ptr<const T>> prepared;
    prepared.reserve(items.size());
    for (auto& item : items) prepared.push_back(prepare(std::move(item)));
    std::vector<Change<T>> changes;
    {
      std::lock_guard lock(mutex);
      std::unordered_set<std::string> seen;
      seen.reserve(prepared.size());
      for (auto& object : prepared) {
        seen.insert(object_key(object->metadata));
        upsert(std::move(object), /*recreated_unknown=*/true, changes);
      }
      std::vector<std::string> gone;
      for (const auto& [key, object] : objects) {
        if (!seen.contains(key)) gone.push_back(key);
      }
      for (const auto& key : gone) erase(key, nullptr, /*unknown=*/true, changes);
      resource_version = std::move(list_version);
      synced = true;
    }
    changed.notify_all();
    notify(changes);
  }

  void apply(WatchEvent<T>& event) {
    stats.events.fetch_add(1, std::memory_order_relaxed);
    std::vector<Change<T>> changes;
    {
      std::lock_guard lock(mutex);
      resource_version = event.object.metadata.resource_version;
      if (event.type == EventType::kBookmark) {
        stats.bookmarks.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      auto object = prepare(std::move(event.object));
      if (event.type == EventType::kDeleted) {
        erase(object_key(object->metadata), object, false, changes);
      } else {
        upsert(std::move(object), /*recreated_unknown=*/true, changes);
      }
    }
    changed.notify_all();
    notify(changes);
  }

  // --- the list/watch loop (informer thread) ---
  [[nodiscard]] bool is_stopping() const {
    std::lock_guard lock(mutex);
    return stopping;
  }

  /// Sleeps `d` unless stopped first; returns false when stopping.
  bool pause(std::chrono::milliseconds d) {
    std::unique_lock lock(mutex);
    changed.wait_for(lock, d, [&] { return stopping; });
    return !stopping;
  }

  Result<void> list_all(std::string version) {
    ListOptions o{options.label_selector, options.field_selector, version, "", options.page_size, ""};
    std::vector<T> items;
    while (true) {
      auto page = client->template list<T>(o);
      if (!page) {
        if (!o.continue_token.empty() && expired(page.error())) {
          // The continue token outlived the API server's history: list everything at once
          // (client-go's pager does the same).
          spdlog::info("kube: continue token expired, listing without paging resource={}", resource_name<T>());
          o = ListOptions{options.label_selector, options.field_selector, "", "", 0, ""};
          items.clear();
          continue;
        }
        return std::unexpected(page.error());
      }
      if (items.empty()) {
        items = std::move(page->items);
      } else {
        std::move(page->items.begin(), page->items.end(), std::back_inserter(items));
      }
      if (page->metadata.continue_token.empty()) {
        stats.lists.fetch_add(1, std::memory_order_relaxed);
        const auto count = items.size();
        replace(std::move(items), page->metadata.resource_version);
        spdlog::info("kube: listed resource={} objects={} resource_version={} encoding={}", resource_name<T>(), count,
                     page->metadata.resource_version, to_string(client->encoding()));
        return {};
      }
      o.continue_token = page->metadata.continue_token;
      o.resource_version.clear();  // the continue token carries the list's version
    }
  }

  /// One watch from the current resource version. A watch that ends within a second having
  /// delivered nothing is an error (client-go's "very short watch"): it keeps a server that closes
  /// at once from turning the loop into a busy one.
  Result<WatchTally> watch_once() {
    std::uniform_int_distribution<long long> spread(options.min_watch_timeout.count(),
                                                    std::max(options.min_watch_timeout, options.max_watch_timeout).count());
    WatchOptions o{options.label_selector, options.field_selector, "", true, std::chrono::seconds(spread(rng))};
    {
      std::lock_guard lock(mutex);
      o.resource_version = resource_version;
    }
    stats.watches.fetch_add(1, std::memory_order_relaxed);
    const auto started = Clock::now();
    auto tally = client->template watch<T>(o, [this](WatchEvent<T>& event) {
      apply(event);
      return true;
    });
    if (tally) {
      if (tally->events == 0 && Clock::now() - started < std::chrono::seconds(1)) {
        return fail(Errc::kProtocol, "very short watch: the server closed it at once without events");
      }
    }
    return tally;
  }

  void run() {
    Backoff backoff(options.backoff);
    bool need_list = true;
    bool first_list = true;
    int expired_in_a_row = 0;
    while (!is_stopping()) {
      if (need_list) {
        // First list from the watch cache ("0"); after expiry the most recent state ("").
        auto listed = list_all(first_list ? "0" : "");
        if (!listed) {
          if (is_stopping()) break;
          stats.errors.fetch_add(1, std::memory_order_relaxed);
          const auto wait = backoff.next();
          spdlog::warn("kube: list failed resource={} retry_in_ms={} error=\"{}\"", resource_name<T>(), wait.count(),
                       listed.error().message());
          if (!pause(wait)) break;
          continue;
        }
        need_list = false;
        first_list = false;
      }
      auto watched = watch_once();
      if (is_stopping()) break;
      if (watched) {
        if (watched->events > 0) expired_in_a_row = 0;
        continue;  // ended by timeoutSeconds or the server: resume from the last version
      }
      if (expired(watched.error())) {
        stats.relists.fetch_add(1, std::memory_order_relaxed);
        need_list = true;
        spdlog::info("kube: resource version expired, listing again resource={} error=\"{}\"", resource_name<T>(),
                     watched.error().context);
        // Relist at once the first time; a server that expires every watch gets the backoff.
        if (++expired_in_a_row > 1 && !pause(backoff.next())) break;
        continue;
      }
      stats.errors.fetch_add(1, std::memory_order_relaxed);
      const auto wait = backoff.next();
      spdlog::warn("kube: watch failed resource={} resource_version={} retry_in_ms={} error=\"{}\"", resource_name<T>(),
                   resource_version_copy(), wait.count(), watched.error().message());
      if (!pause(wait)) break;
    }
  }

  std::string resource_version_copy() const {
    std::lock_guard lock(mutex);
    return resource_version;
  }
};

template <class T>
Informer<T>::Informer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

template <class T>
Informer<T>::~Informer() {
  stop();
}

template <class T>
Result<std::unique_ptr<Informer<T>>> Informer<T>::start(ClusterConfig config, InformerOptions<T> options,
                                                        InformerHandlers<T> handlers) {
  auto client = Client::create(std::move(config), options.http, options.encoding);
  if (!client) return std::unexpected(client.error());
  auto impl = std::make_unique<Impl>(std::move(options), std::move(handlers), std::move(*client));
  Impl* raw = impl.get();
  std::unique_ptr<Informer<T>> informer(new Informer<T>(std::move(impl)));
  raw->thread = std::thread([raw] { raw->run(); });
  return informer;
}

template <class T>
void Informer<T>::stop() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->changed.notify_all();
  impl_->client->interrupt();
  if (impl_->thread.joinable()) impl_->thread.join();
}

template <class T>
std::shared_ptr<const T> Informer<T>::get(std::string_view key) const {
  std::lock_guard lock(impl_->mutex);
  auto it = impl_->objects.find(std::string(key));
  return it == impl_->objects.end() ? nullptr : it->second;
}

template <class T>
std::vector<std::shared_ptr<const T>> Informer<T>::list() const {
  std::lock_guard lock(impl_->mutex);
  std::vector<std::shared_ptr<const T>> out;
  out.reserve(impl_->objects.size());
  for (const auto& [key, object] : impl_->objects) out.push_back(object);
  return out;
}

template <class T>
std::vector<std::shared_ptr<const T>> Informer<T>::by_index(std::string_view value) const {
  std::lock_guard lock(impl_->mutex);
  std::vector<std::shared_ptr<const T>> out;
  auto [first, last] = impl_->index.equal_range(std::string(value));
  for (auto it = first; it != last; ++it) {
    if (auto object = impl_->objects.find(it->second); object != impl_->objects.end()) out.push_back(object->second);
  }
  return out;
}

template <class T>
std::size_t Informer<T>::size() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->objects.size();
}

template <class T>
bool Informer<T>::synced() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->synced;
}

template <class T>
bool Informer<T>::wait_for_sync(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(impl_->mutex);
  return impl_->changed.wait_for(lock, timeout, [&] { return impl_->synced || impl_->stopping; }) && impl_->synced;
}

template <class T>
std::shared_ptr<const T> Informer<T>::wait_for(std::string_view key, std::chrono::milliseconds timeout,
                                               const std::function<bool(const T&)>& ready) const {
  const std::string k(key);
  std::shared_ptr<const T> found;
  std::unique_lock lock(impl_->mutex);
  impl_->changed.wait_for(lock, timeout, [&] {
    auto it = impl_->objects.find(k);
    if (it != impl_->objects.end() && (!ready || ready(*it->second))) found = it->second;
    return found != nullptr || impl_->stopping;
  });
  return found;
}

template <class T>
std::string Informer<T>::resource_version() const {
  return impl_->resource_version_copy();
}

template <class T>
const InformerStats& Informer<T>::stats() const noexcept {
  return impl_->stats;
}

template <class T>
std::uint64_t Informer<T>::bad_objects() const noexcept {
  return impl_->client->stats().bad_objects.load(std::memory_order_relaxed);
}

template class Informer<Pod>;
template class Informer<Namespace>;

}  // namespace meshnode::kube
