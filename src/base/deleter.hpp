#pragma once

namespace meshnode::base {

/// Calls a C library's `*_free` function as a `unique_ptr` deleter, e.g.
/// `std::unique_ptr<SSL_CTX, Deleter<&SSL_CTX_free>>`. Stateless, so the pointer stays one word.
template <auto Fn>
struct Deleter {
  template <class T>
  void operator()(T* p) const {
    Fn(p);
  }
};

}  // namespace meshnode::base
