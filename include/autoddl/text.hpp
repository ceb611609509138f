#pragma once
// constexpr text helpers shared by every folder: the printers and parsers of the notation, and
// the text arguments of compile-time diagnostics (each folder's detail/diagnostics.hpp).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace autoddl::detail {

/// Decimal text of v, usable in constant expressions (std::to_string is not constexpr).
constexpr std::string itos(std::int64_t v) {
  if (v == 0) return "0";
  bool neg = v < 0;
  std::uint64_t u = neg ? std::uint64_t(-(v + 1)) + 1 : std::uint64_t(v);
  std::string r;
  while (u) { r.insert(r.begin(), char('0' + u % 10)); u /= 10; }
  if (neg) r.insert(r.begin(), '-');
  return r;
}

/// A value given by a user as a message echoes it: the text itself, or its first `most`
/// characters and "..." when longer, so a 10 MB value makes a message of one line.
/// Example: excerpt(std::string(1000, '9'), 8) == "99999999...".
constexpr std::string excerpt(std::string_view s, std::size_t most = 80) {
  if (s.size() <= most) return std::string(s);
  return std::string(s.substr(0, most)) + "...";
}

/// A left-to-right reader over text with one-character look-ahead; used by every parser so
/// they report the same kind of message ("expected ... at position k of '...'").
struct cursor {
  std::string_view s;
  std::size_t i = 0;

  constexpr bool done() const { return i >= s.size(); }
  constexpr char peek() const { return done() ? '\0' : s[i]; }
  constexpr void skip_space() { while (!done() && (s[i] == ' ' || s[i] == '\t')) ++i; }
  constexpr bool eat(char c) {
    skip_space();
    if (peek() == c) { ++i; return true; }
    return false;
  }
  constexpr std::string where() const {
    return "at position " + itos(std::int64_t(i)) + " of '" + std::string(s) + "'";
  }
  /// Reads a non-negative decimal integer; returns -1 when none is there.
  constexpr std::int64_t number() {
    skip_space();
    if (done() || s[i] < '0' || s[i] > '9') return -1;
    std::int64_t v = 0;
    while (!done() && s[i] >= '0' && s[i] <= '9') {
      v = v * 10 + (s[i] - '0');
      if (v > (std::int64_t(1) << 40)) return -1;
      ++i;
    }
    return v;
  }
};

/// A fixed-capacity string usable as a template argument, so layouts can be written
/// `layout_v<"[S(0),B]@2x4">` and named in compiler diagnostics as `text{"[S(0),B]@2x4"}`.
struct text {
  static constexpr std::size_t capacity = 48;
  char s[capacity]{};
  constexpr text() = default;
  template <std::size_t N>
  constexpr text(const char (&a)[N]) {  // NOLINT: implicit from a literal on purpose
    static_assert(N <= capacity, "autoddl: text literal longer than 47 characters");
    for (std::size_t k = 0; k + 1 < N; ++k) s[k] = a[k];  // the rest stays zero
  }
  constexpr explicit text(std::string_view v) {
    for (std::size_t k = 0; k < v.size() && k + 1 < capacity; ++k) s[k] = v[k];
  }
  constexpr std::string_view view() const {
    std::size_t n = 0;
    while (n < capacity && s[n]) ++n;
    return {s, n};
  }
  friend constexpr bool operator==(const text&, const text&) = default;
};

/// A dependent false for the static_assert of a diagnostic class template: it fires only when
/// the template is instantiated, naming its text arguments in the compiler's message.
template <auto...>
inline constexpr bool never = false;

}  // namespace autoddl::detail
