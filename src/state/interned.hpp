#pragma once

#include <atomic>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace meshnode::state {

/// An immutable string shared by every holder of the same value: one 8-byte handle to a
/// reference-counted entry in a process-wide pool. For the low-cardinality fields of a workload
/// (namespace, service account, trust domain, node, network, cluster, revision, locality, service
/// keys): 100,000 workloads in 100 namespaces hold 100 namespace strings, not 100,000 (xDS apply
/// benchmark, issue #12).
///
/// Reads like a `const std::string`: converts implicitly to `const std::string&` and
/// `std::string_view`, compares with strings by value, concatenates with `+`. Construction from
/// `const char*` / `std::string_view` is implicit; from a `std::string` it goes through
/// assignment (`x = str`) or `InternedString(std::string_view(str))` — deliberately not a direct
/// implicit constructor, so that `cond ? a_std_string : an_interned` stays unambiguous.
/// Two handles of equal value point at the same entry, so `==` between handles is a pointer
/// compare. The empty string needs no pool entry.
///
/// Thread-safe: interning takes one of 16 pool mutexes; copies are an atomic increment; the last
/// holder releases the entry.
class InternedStringBatch;

class InternedString {
 public:
  struct Entry;

  InternedString() noexcept = default;
  InternedString(std::string_view value) : entry_(intern(value)) {}  // NOLINT(google-explicit-constructor)
  InternedString(const char* value) : InternedString(std::string_view(value)) {}  // NOLINT
  InternedString(const InternedString& other) noexcept : entry_(other.entry_) { retain(entry_); }
  InternedString(InternedString&& other) noexcept : entry_(other.entry_) { other.entry_ = nullptr; }
  ~InternedString() { release(entry_); }
  InternedString& operator=(const InternedString& other) noexcept;
  InternedString& operator=(InternedString&& other) noexcept;
  InternedString& operator=(std::string_view value) { return *this = InternedString(value); }
  InternedString& operator=(const char* value) { return *this = InternedString(value); }

  [[nodiscard]] const std::string& str() const noexcept;
  operator const std::string&() const noexcept { return str(); }  // NOLINT(google-explicit-constructor)
  operator std::string_view() const noexcept { return str(); }    // NOLINT(google-explicit-constructor)

  [[nodiscard]] bool empty() const noexcept { return entry_ == nullptr; }
  [[nodiscard]] std::size_t size() const noexcept { return str().size(); }
  [[nodiscard]] const char* c_str() const noexcept { return str().c_str(); }
  [[nodiscard]] const char* data() const noexcept { return str().data(); }
  [[nodiscard]] std::string_view view() const noexcept { return str(); }

  friend bool operator==(const InternedString& a, const InternedString& b) noexcept {
    return a.entry_ == b.entry_;  // one entry per value
  }
  friend bool operator==(const InternedString& a, std::string_view b) noexcept { return a.view() == b; }
  friend bool operator==(const InternedString& a, const char* b) noexcept { return a.view() == b; }
  friend bool operator==(const InternedString& a, const std::string& b) noexcept { return a.view() == b; }
  friend std::strong_ordering operator<=>(const InternedString& a, const InternedString& b) noexcept {
    return a.entry_ == b.entry_ ? std::strong_ordering::equal : a.view() <=> b.view();
  }
  friend std::strong_ordering operator<=>(const InternedString& a, std::string_view b) noexcept {
    return a.view() <=> b;
  }
  friend std::strong_ordering operator<=>(const InternedString& a, const char* b) noexcept {
    return a.view() <=> std::string_view(b);
  }
  friend std::strong_ordering operator<=>(const InternedString& a, const std::string& b) noexcept {
    return a.view() <=> std::string_view(b);
  }
  friend std::string operator+(const InternedString& a, std::string_view b) { return concat(a.view(), b); }
  friend std::string operator+(std::string_view a, const InternedString& b) { return concat(a, b.view()); }
  friend std::string operator+(const InternedString& a, const char* b) { return concat(a.view(), b); }
  friend std::string operator+(const char* a, const InternedString& b) { return concat(a, b.view()); }
  friend std::string operator+(const InternedString& a, const std::string& b) { return concat(a.view(), b); }
  friend std::string operator+(const std::string& a, const InternedString& b) { return concat(a, b.view()); }
  friend std::string operator+(std::string&& a, const InternedString& b) { return std::move(a.append(b.view())); }
  friend std::ostream& operator<<(std::ostream& os, const InternedString& s);

  /// As InternedString(value), through a per-thread cache (4,096 slots by hash) in front of the
  /// pool: a hit costs a hash and a compare instead of a pool lock. For bulk conversion, where
  /// the same few values repeat (the xDS apply path). A thread keeps up to 4,096 values alive.
  [[nodiscard]] static InternedString cached(std::string_view value);

  /// As InternedString(value), for process-lifetime constants (a Workload's defaults): the entry
  /// is never freed and copies skip the reference count, so threads converting many workloads do
  /// not contend on one counter. Call once per value, before the value is shared.
  [[nodiscard]] static InternedString immortal(std::string_view value);

  /// Entries currently in the pool (for tests: released values leave it).
  [[nodiscard]] static std::size_t pool_size_for_test();

 private:
  friend class InternedStringBatch;
  static Entry* intern(std::string_view value);
  static Entry* intern(std::string_view value, std::size_t hash);
  static void retain(Entry* e) noexcept;
  static void release(Entry* e) noexcept;
  // Drops `n` references at once (the last one frees the entry, as release()).
  static void release_n(Entry* e, std::uint32_t n) noexcept;
  static void retain_n(Entry* e, std::uint32_t n) noexcept;
  static std::string concat(std::string_view a, std::string_view b);

  Entry* entry_ = nullptr;  // nullptr = ""
};

/// Interns the values of one bulk conversion (one xDS response, on one decode thread): every
/// distinct value takes the pool lock once, later ones cost a lookup in this object's own table,
/// and references are taken from the entry 64 at a time (no atomic per handle, no cache line
/// shared with the other decode threads on every copy). Handles it returns are ordinary
/// InternedStrings and may outlive it; the references it reserved but did not hand out are
/// returned when it is destroyed. Not thread-safe: one per thread.
class InternedStringBatch {
 public:
  InternedStringBatch() = default;
  InternedStringBatch(const InternedStringBatch&) = delete;
  InternedStringBatch& operator=(const InternedStringBatch&) = delete;
  ~InternedStringBatch();

  /// As InternedString(value).
  [[nodiscard]] InternedString get(std::string_view value);
  /// As get(value), for one of up to kSites fields the caller converts again and again (`site`
  /// names the field): a value equal to the one last returned for that site skips the lookup.
  static constexpr std::size_t kSites = 16;
  [[nodiscard]] InternedString get(std::string_view value, std::size_t site);

  /// Distinct values seen (for tests).
  [[nodiscard]] std::size_t size() const noexcept { return used_; }

 private:
  struct Slot {
    InternedString::Entry* entry = nullptr;
    std::size_t hash = 0;
    std::uint32_t spare = 0;  // references held for handles not handed out yet; >= 1 while in use
  };
  void grow();
  InternedString hand_out(Slot& s);
  std::size_t find_or_add(std::string_view value);  // the slot of `value` (not empty)

  std::vector<Slot> slots_;
  std::size_t last_[kSites] = {};  // per site: the slot it returned last  // open addressing, linear probing, power-of-two size
  std::size_t used_ = 0;
};

}  // namespace meshnode::state

template <>
struct std::hash<meshnode::state::InternedString> {
  std::size_t operator()(const meshnode::state::InternedString& s) const noexcept {
    return std::hash<std::string_view>{}(s.view());
  }
};
