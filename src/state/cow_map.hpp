#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace meshnode::state {

/// A sorted map stored as a list of immutable chunks (sorted vectors of at most ~2×kChunk
/// entries) shared between copies: copying a CowMap copies the chunk list, not the entries, and
/// apply() rebuilds only the chunks its changes fall into. This is what lets a new StateSnapshot
/// reuse everything of the previous one that a small xDS delta does not touch (issue #12: a
/// one-pod delta on 100,000 workloads must not cost a full rebuild).
///
/// Shapes: entries unique by key, iterated in `Less` order; no chunk is empty. Lookups are two
/// binary searches. Values are stored by value; a chunk, once shared, is never modified, so
/// references from find() and iteration live as long as any map holding that chunk.
///
/// Thread-safety: const methods on a map that is no longer modified are safe from any thread
/// (the published snapshot); apply() is for the single thread building a new map.
template <class K, class V, class Less = std::less<>, std::size_t kChunk = 128>
class CowMap {
 public:
  using value_type = std::pair<K, V>;
  /// One change: a value inserts or replaces `first`; nullopt erases it (absent: no-op).
  using Change = std::pair<K, std::optional<V>>;

 private:
  struct Chunk {
    std::vector<value_type> entries;
    const value_type& at_unchecked(std::size_t i) const { return entries[i]; }
    std::size_t size() const { return entries.size(); }
  };

 public:
  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = CowMap::value_type;
    using difference_type = std::ptrdiff_t;
    using pointer = const value_type*;
    using reference = const value_type&;

    const_iterator() = default;
    reference operator*() const { return (*chunks_)[chunk_]->at_unchecked(pos_); }
    pointer operator->() const { return &**this; }
    const_iterator& operator++() {
      if (++pos_ == (*chunks_)[chunk_]->size()) {
        ++chunk_;
        pos_ = 0;
      }
      return *this;
    }
    const_iterator operator++(int) {
      auto copy = *this;
      ++*this;
      return copy;
    }
    friend bool operator==(const const_iterator& a, const const_iterator& b) {
      return a.chunk_ == b.chunk_ && a.pos_ == b.pos_;
    }

   private:
    friend class CowMap;
    const_iterator(const std::vector<std::shared_ptr<const Chunk>>* chunks, std::size_t chunk,
                   std::size_t pos)
        : chunks_(chunks), chunk_(chunk), pos_(pos) {}
    const std::vector<std::shared_ptr<const Chunk>>* chunks_ = nullptr;
    std::size_t chunk_ = 0;
    std::size_t pos_ = 0;
  };

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] const_iterator begin() const noexcept { return {&chunks_, 0, 0}; }
  [[nodiscard]] const_iterator end() const noexcept { return {&chunks_, chunks_.size(), 0}; }
  /// Chunks in the map (for tests: how much a change rebuilt).
  [[nodiscard]] std::size_t chunk_count() const noexcept { return chunks_.size(); }
  /// Whether chunk `i` of this map is the same object as chunk `j` of `other` (tests: sharing).
  [[nodiscard]] bool shares_chunk_for_test(const CowMap& other, std::size_t i, std::size_t j) const {
    return chunks_.at(i) == other.chunks_.at(j);
  }

  /// The entry with key equivalent to `key`; nullptr if none.
  template <class Key>
  [[nodiscard]] const value_type* find(const Key& key) const {
    if (chunks_.empty()) return nullptr;
    const Chunk& c = *chunks_[chunk_for(key)];
    auto it = std::lower_bound(c.entries.begin(), c.entries.end(), key,
                               [](const value_type& e, const Key& k) { return Less{}(e.first, k); });
    if (it == c.entries.end() || Less{}(key, it->first)) return nullptr;
    return &*it;
  }

  /// Applies `changes`, which must be sorted by key and unique. Moves the values out of them.
  /// Cost: the entries of the chunks the changes fall into, plus the chunk list.
  void apply(std::span<Change> changes) {
    if (changes.empty()) return;
    std::vector<std::shared_ptr<const Chunk>> out;
    out.reserve(chunks_.size() + changes.size() / kChunk + 1);
    std::size_t next = 0;  // first change not yet applied
    const std::size_t n = std::max<std::size_t>(chunks_.size(), 1);
    for (std::size_t i = 0; i < n; ++i) {
      // Chunk i takes every change below the first key of chunk i + 1 (the last takes the rest).
      std::size_t until = changes.size();
      if (i + 1 < chunks_.size()) {
        const K& bound = chunks_[i + 1]->entries.front().first;
        until = static_cast<std::size_t>(
            std::lower_bound(changes.begin() + static_cast<std::ptrdiff_t>(next), changes.end(), bound,
                             [](const Change& c, const K& b) { return Less{}(c.first, b); }) -
            changes.begin());
      }
      const Chunk* old = i < chunks_.size() ? chunks_[i].get() : nullptr;
      if (until == next) {
        if (old != nullptr) out.push_back(chunks_[i]);
        continue;
      }
      merge(old, changes.subspan(next, until - next), out);
      next = until;
    }
    chunks_ = std::move(out);
  }

 private:
  template <class Key>
  std::size_t chunk_for(const Key& key) const {
    // The last chunk whose first key is not above `key`; chunk 0 for keys below everything.
    auto it = std::upper_bound(chunks_.begin() + 1, chunks_.end(), key,
                               [](const Key& k, const std::shared_ptr<const Chunk>& c) {
                                 return Less{}(k, c->entries.front().first);
                               });
    return static_cast<std::size_t>(it - chunks_.begin()) - 1;
  }

  // Merges `changes` into the entries of `old` (may be null) and appends the result to `out`,
  // split into chunks of about kChunk entries when it grew past 2×kChunk.
  void merge(const Chunk* old, std::span<Change> changes, std::vector<std::shared_ptr<const Chunk>>& out) {
    if (old == nullptr) {  // the first build: the changes are the entries
      std::size_t kept = 0;
      for (Change& c : changes) {
        if (!c.second) continue;
        if (&changes[kept] != &c) changes[kept] = std::move(c);  // never self-move (vector members)
        ++kept;
      }
      for (std::size_t begin = 0; begin < kept; begin += kChunk) {
        auto chunk = std::make_shared<Chunk>();
        std::size_t end = std::min(kept, begin + kChunk);
        chunk->entries.reserve(end - begin);
        for (std::size_t i = begin; i < end; ++i)
          chunk->entries.emplace_back(std::move(changes[i].first), std::move(*changes[i].second));
        out.push_back(std::move(chunk));
      }
      size_ += kept;
      return;
    }
    std::vector<value_type> merged;
    std::size_t old_size = old->entries.size();
    merged.reserve(old_size + changes.size());
    std::size_t a = 0;
    for (Change& c : changes) {
      while (a < old_size && Less{}(old->entries[a].first, c.first)) merged.push_back(old->entries[a++]);
      bool replaces = a < old_size && !Less{}(c.first, old->entries[a].first);
      if (replaces) {
        ++a;
        --size_;
      }
      if (c.second) {
        merged.emplace_back(std::move(c.first), std::move(*c.second));
        ++size_;
      }
    }
    while (a < old_size) merged.push_back(old->entries[a++]);
    if (merged.empty()) return;
    if (merged.size() <= 2 * kChunk) {
      auto chunk = std::make_shared<Chunk>();
      chunk->entries = std::move(merged);
      out.push_back(std::move(chunk));
      return;
    }
    std::size_t pieces = (merged.size() + kChunk - 1) / kChunk;
    std::size_t per = (merged.size() + pieces - 1) / pieces;
    for (std::size_t begin = 0; begin < merged.size(); begin += per) {
      auto chunk = std::make_shared<Chunk>();
      std::size_t end = std::min(merged.size(), begin + per);
      chunk->entries.assign(std::make_move_iterator(merged.begin() + static_cast<std::ptrdiff_t>(begin)),
                            std::make_move_iterator(merged.begin() + static_cast<std::ptrdiff_t>(end)));
      out.push_back(std::move(chunk));
    }
  }

  std::vector<std::shared_ptr<const Chunk>> chunks_;
  std::size_t size_ = 0;
};

}  // namespace meshnode::state
