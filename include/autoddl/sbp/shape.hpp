#pragma once
// Global (logical) tensor shapes, text form "[12,64]". A dim of a static shape may be dynamic
// (`dyn`), as with std::extents: static_shape<dyn, 64> knows its columns now, its rows later.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "autoddl/index.hpp"
#include "autoddl/sbp/sbp.hpp"

namespace autoddl {

inline constexpr std::int64_t dyn = -1;

struct tensor_shape {
  std::array<std::int64_t, max_tensor_rank> dims{};
  std::int8_t n = 0;

  constexpr tensor_shape() = default;
  constexpr tensor_shape(std::initializer_list<std::int64_t> l) {
    for (std::int64_t v : l) push_back(v);
  }
  constexpr void push_back(std::int64_t v) {
    if (n >= max_tensor_rank)
      detail::fail<layout_error>("a tensor has at most " + detail::itos(max_tensor_rank) + " dims");
    if (v < 0 && v != dyn) detail::fail<layout_error>("a tensor dim cannot be negative, got " + detail::itos(v));
    at(dims, n++) = v;
  }
  constexpr int rank() const { return n; }
  constexpr std::int64_t operator[](int i) const { return at(dims, i); }
  constexpr std::int64_t& operator[](int i) { return at(dims, i); }
  constexpr const std::int64_t* begin() const { return dims.data(); }
  constexpr const std::int64_t* end() const { return dims.data() + n; }
  constexpr bool is_static() const {
    for (auto v : *this) if (v == dyn) return false;
    return true;
  }
  /// Number of elements. @pre is_static()
  constexpr std::int64_t elements() const {
    std::int64_t r = 1;
    for (auto v : *this) r *= v;
    return r;
  }
  friend constexpr bool operator==(const tensor_shape& a, const tensor_shape& b) {
    if (a.n != b.n) return false;
    for (int i = 0; i < a.n; ++i) if (a[i] != b[i]) return false;
    return true;
  }
};

/// Compile-time shape, each dim a number or `dyn`: static_shape<128, 64>::value.
template <std::int64_t... E>
struct static_shape {
  static_assert(sizeof...(E) <= std::size_t(max_tensor_rank), "autoddl: a tensor has at most 8 dims");
  static_assert(((E >= 0 || E == dyn) && ...), "autoddl: a tensor dim is a count >= 0 or dyn");
  static constexpr tensor_shape value{E...};
};

constexpr std::string to_string(const tensor_shape& s) {
  std::string r = "[";
  for (int i = 0; i < s.rank(); ++i) {
    if (i) r += ",";
    // (no `c ? std::string : std::string` here: g++ 12 rejects it in constant expressions)
    if (s[i] == dyn) r += "?";
    else r += detail::itos(s[i]);
  }
  return r + "]";
}

}  // namespace autoddl
