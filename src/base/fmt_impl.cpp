// fmt's non-template code and the template instantiations its headers declare but do not define
// for us (fmt 9.1, <fmt/format.h>: dragonbox::to_decimal, locale_ref, thousands_sep_impl,
// decimal_point_impl), compiled once into meshnode (meshnode::fmt, cmake/deps.cmake) instead of
// linking Debian's libfmt.so.
//
// Why: with fmt and spdlog (src/base/spdlog_impl.cpp) compiled in, meshnode-proxy's only shared
// libraries are libc, libm and libgcc_s, so its optimized build links libstdc++ statically as well
// (cmake/link-static-deps.sh): each shared library costs the process its relocated data pages and
// the fault-around pages of its code, whether or not it uses them (issue 15, proxy RSS).
#include <fmt/format.h>
// Without FMT_HEADER_ONLY, format-inl.h defines fmt's functions with external linkage (FMT_FUNC).
#include <fmt/format-inl.h>

#include <locale>

#if FMT_VERSION / 10000 != 9
#error "fmt_impl.cpp instantiates fmt 9's out-of-line templates; check them against this fmt version"
#endif

FMT_BEGIN_NAMESPACE
namespace detail {

template FMT_API auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template FMT_API auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;

template FMT_API locale_ref::locale_ref(const std::locale& loc);
template FMT_API auto locale_ref::get<std::locale>() const -> std::locale;

template FMT_API auto thousands_sep_impl<char>(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto thousands_sep_impl<wchar_t>(locale_ref) -> thousands_sep_result<wchar_t>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
template FMT_API auto decimal_point_impl(locale_ref) -> wchar_t;

}  // namespace detail
FMT_END_NAMESPACE
