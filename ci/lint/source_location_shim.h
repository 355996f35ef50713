// Force-included by the lint leg of ci/matrix (clang-tidy-14) into every file it checks.
// NB: libstdc++ 12 defines std::source_location only when the compiler has
// __builtin_source_location, which Clang gained in version 15; clang-tidy-14 would otherwise
// stop at every use with "no type named 'source_location' in namespace 'std'". This stand-in
// has the same interface, built from the older __builtin_FILE/LINE/COLUMN/FUNCTION.
#pragma once
#if defined(__clang__) && defined(__has_builtin)
#if !__has_builtin(__builtin_source_location)
#include <cstdint>
namespace std {
struct source_location {
  static constexpr source_location current(const char* file = __builtin_FILE(),
                                           const char* function = __builtin_FUNCTION(),
                                           uint_least32_t line = __builtin_LINE(),
                                           uint_least32_t column = __builtin_COLUMN()) noexcept {
    source_location loc;
    loc.file_ = file;
    loc.function_ = function;
    loc.line_ = line;
    loc.column_ = column;
    return loc;
  }
  constexpr source_location() noexcept = default;
  constexpr uint_least32_t line() const noexcept { return line_; }
  constexpr uint_least32_t column() const noexcept { return column_; }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr const char* function_name() const noexcept { return function_; }

 private:
  const char* file_ = "";
  const char* function_ = "";
  uint_least32_t line_ = 0;
  uint_least32_t column_ = 0;
};
}  // namespace std
#endif
#endif
