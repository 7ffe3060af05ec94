// fmt's out-of-line part (the formatting engine: vformat, float and integer writers, locale hooks), compiled once
// here instead of in every translation unit. core/status.h includes <fmt/format.h> in nearly every file; with
// fmt's header-only mode each of them compiled format-inl.h and its -O3 code again (docs/decisions.md, "Build
// time"). Debian ships fmt 9 as a shared library only, and the binary must run on machines without it (the GPU
// machine), so this file compiles the system header <fmt/format-inl.h> into dsinfer_core instead.
#include <fmt/format-inl.h>

// The templates that <fmt/format.h> and <fmt/core.h> declare (extern, or declared without a body) and that
// format-inl.h defines: instantiated here for the character types the library's callers may use.
FMT_BEGIN_NAMESPACE
namespace detail {
template FMT_API auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template FMT_API auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;
template FMT_API locale_ref::locale_ref(const std::locale& loc);
template FMT_API auto locale_ref::get<std::locale>() const -> std::locale;
template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<wchar_t>;
template FMT_API auto decimal_point_impl(locale_ref) -> wchar_t;
}  // namespace detail
FMT_END_NAMESPACE
