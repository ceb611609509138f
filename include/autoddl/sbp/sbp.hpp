#pragma once
// SBP of a tensor on one mesh axis: S(d) split along tensor dim d, B broadcast, P partial sum.
//
// One vocabulary, two binding times: the runtime value `sbp` and the compile-time
// values `split<D>`, `broadcast`, `partial<sum>` share one API; a compile-time value converts
// implicitly to the runtime one (lossless), never the other way round.
//   S(0) == split<0>{}   to_string(B) == "B"   parse_sbp("S(1)") == S(1)
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>

#include "autoddl/text.hpp"
#include "autoddl/error.hpp"

namespace autoddl {

/// The largest tensor rank the notation addresses (S(0) .. S(7)).
inline constexpr int max_tensor_rank = 8;

enum class sbp_kind : std::uint8_t { split, broadcast, partial };

/// The reduction of a partial value; only sum exists today (`P` means `partial<sum>`).
struct sum {};

/// Runtime SBP value. Structural, so it can also be a template argument.
struct sbp {
  sbp_kind kind = sbp_kind::broadcast;
  std::int8_t dim = -1;  ///< the split tensor dim when kind == split, else -1

  constexpr bool is_split() const { return kind == sbp_kind::split; }
  constexpr bool is_broadcast() const { return kind == sbp_kind::broadcast; }
  constexpr bool is_partial() const { return kind == sbp_kind::partial; }
  /// @pre is_split()
  constexpr int split_dim() const { return dim; }
  friend constexpr bool operator==(sbp, sbp) = default;
};

/// S(d): split along tensor dim d. @pre 0 <= d < max_tensor_rank
constexpr sbp S(int d) {
  if (d < 0 || d >= max_tensor_rank)
    detail::fail<parse_error>("split dim " + detail::itos(d) + " is out of range: S(d) takes 0 <= d < " +
                              detail::itos(max_tensor_rank));
  return sbp{sbp_kind::split, static_cast<std::int8_t>(d)};
}
inline constexpr sbp B{sbp_kind::broadcast, -1};
inline constexpr sbp P{sbp_kind::partial, -1};

// ---- compile-time values -------------------------------------------------------------------
template <int D>
struct split {
  static_assert(D >= 0 && D < max_tensor_rank, "autoddl: split<D> needs 0 <= D < max_tensor_rank");
  static constexpr sbp value{sbp_kind::split, static_cast<std::int8_t>(D)};
  constexpr operator sbp() const { return value; }  // lossless: implicit
  static constexpr bool is_split() { return true; }
  static constexpr bool is_broadcast() { return false; }
  static constexpr bool is_partial() { return false; }
  static constexpr int split_dim() { return D; }
};
struct broadcast {
  static constexpr sbp value = B;
  constexpr operator sbp() const { return value; }
  static constexpr bool is_split() { return false; }
  static constexpr bool is_broadcast() { return true; }
  static constexpr bool is_partial() { return false; }
};
template <class Op = sum>
struct partial {
  static_assert(std::same_as<Op, sum>, "autoddl: partial<Op> supports Op = sum only");
  static constexpr sbp value = P;
  constexpr operator sbp() const { return value; }
  static constexpr bool is_split() { return false; }
  static constexpr bool is_broadcast() { return false; }
  static constexpr bool is_partial() { return true; }
};

/// A compile-time SBP value: a type whose `value` is the runtime sbp it stands for.
template <class T>
concept StaticSbp = requires {
  { T::value } -> std::convertible_to<sbp>;
} && std::convertible_to<T, sbp>;

/// Anything that is an SBP value, known now or later.
template <class T>
concept SbpValue = std::same_as<std::remove_cvref_t<T>, sbp> || StaticSbp<std::remove_cvref_t<T>>;

/// The runtime value of any SBP value (identity for `sbp`).
template <SbpValue T>
constexpr sbp to_sbp(const T& v) { return static_cast<sbp>(v); }

// ---- text notation ------------------------------------------------------------------------
constexpr std::string to_string(sbp v) {
  switch (v.kind) {
    case sbp_kind::split: return "S(" + detail::itos(v.dim) + ")";
    case sbp_kind::broadcast: return "B";
    case sbp_kind::partial: return "P";
  }
  return "?";
}
template <StaticSbp T>
constexpr std::string to_string(T v) { return to_string(to_sbp(v)); }

namespace detail {
/// Parses one SBP at the cursor ("S(d)", "B", "P"); fails with the position.
constexpr sbp parse_sbp_at(cursor& c) {
  c.skip_space();
  char ch = c.peek();
  if (ch == 'B') { ++c.i; return B; }
  if (ch == 'P') { ++c.i; return P; }
  if (ch == 'S') {
    ++c.i;
    if (!c.eat('(')) fail<parse_error>("expected '(' after S " + c.where() + "; write S(d), e.g. S(0)");
    std::int64_t d = c.number();
    if (d < 0) fail<parse_error>("expected a tensor dim after 'S(' " + c.where() + "; write S(d), e.g. S(0)");
    if (d >= max_tensor_rank)
      fail<parse_error>("split dim " + itos(d) + " is out of range " + c.where() + ": S(d) takes d < " +
                        itos(max_tensor_rank));
    if (!c.eat(')')) fail<parse_error>("expected ')' " + c.where() + "; write S(d), e.g. S(0)");
    return S(int(d));
  }
  fail<parse_error>("expected S(d), B or P " + c.where());
}
}  // namespace detail

/// Parses "S(d)", "B" or "P" (surrounding blanks allowed). Throws parse_error otherwise.
constexpr sbp parse_sbp(std::string_view s) {
  detail::cursor c{s};
  sbp v = detail::parse_sbp_at(c);
  c.skip_space();
  if (!c.done()) detail::fail<parse_error>("unexpected text after an SBP " + c.where());
  return v;
}

}  // namespace autoddl
