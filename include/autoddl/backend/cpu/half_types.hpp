#pragma once
// Two 16-bit storage types for the CPU device, bf16 (8 exponent bits, 7 mantissa bits) and
// fp16 (IEEE 754 binary16: 5 and 10), with the GPU's rounding points: a value is stored in 16
// bits and computed in float. Conversion from float rounds to nearest, ties to even (the
// hardware's cvt.rn), keeps subnormals, sends a value past the largest finite one to infinity
// and keeps NaN a (quiet) NaN; conversion to float is exact. Arithmetic on them is float
// arithmetic (the implicit conversion to float), so `a * b + c` rounds once, where the result is
// stored; compound assignment rounds after each step, as a store does. Example: bf16(1.00390625f)
// (1 + 2^-8, halfway between 1 and 1 + 2^-7) is 1, ties to the even mantissa.
#include <bit>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "autoddl/backend/device.hpp"

namespace autoddl {

namespace detail {
/// float -> bf16 bits, to nearest, ties to even; NaN stays NaN (quiet bit set).
constexpr std::uint16_t bfloat16_bits_of(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((x >> 16) | 0x0040u);
  return std::uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
constexpr float float_of_bfloat16_bits(std::uint16_t h) { return std::bit_cast<float>(std::uint32_t(h) << 16); }

/// Rounds m / 2^s to the nearest integer, ties to even (s >= 1).
constexpr std::uint32_t shift_right_to_even(std::uint32_t m, int s) {
  const std::uint32_t q = m >> s, r = m & ((1u << s) - 1u), tie = 1u << (s - 1);
  return q + std::uint32_t(r > tie || (r == tie && (q & 1u)));
}
/// float -> binary16 bits, to nearest, ties to even: past 65,520 (the midpoint above 65,504)
/// to infinity, below 2^-14 to a subnormal (a multiple of 2^-24) or zero.
constexpr std::uint16_t float16_bits_of(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f), a = x & 0x7fffffffu;
  const auto sign = std::uint16_t((x >> 16) & 0x8000u);
  if (a > 0x7f800000u) return std::uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN, made quiet
  if (a >= 0x477ff000u) return std::uint16_t(sign | 0x7c00u);                        // >= 65,520, and inf
  const int e = int(a >> 23);
  const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
  if (e < 113) {  // below 2^-14: units of 2^-24 are m / 2^(126 - e)
    const int s = 126 - e;
    return s > 24 ? sign : std::uint16_t(sign | shift_right_to_even(m, s));
  }
  // normal: a carry out of the mantissa moves into the exponent, as it should
  return std::uint16_t(sign | ((std::uint32_t(e - 112) << 10) + shift_right_to_even(m, 13) - 0x400u));
}
constexpr float float_of_float16_bits(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {  // zero or subnormal: m * 2^-24, exact in float
    const float v = float(m) * 0x1p-24f;
    return sign ? -v : v;
  }
  if (e == 31) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));
  return std::bit_cast<float>(sign | ((e + 112) << 23) | (m << 13));
}

/// d rounded to float toward zero, with the last mantissa bit set where that lost anything
/// (round to odd: a second rounding to fewer bits is then as if d were rounded once).
constexpr float float_to_odd(double d) {
  const float f = float(d);
  if (d != d || double(f) == d) return f;
  std::uint32_t b = std::bit_cast<std::uint32_t>(f);
  if ((b & 0x7fffffffu) != 0 && (d < 0 ? double(f) < d : double(f) > d)) --b;  // rounded away from zero: step back
  return std::bit_cast<float>(b | 1u);
}

/// A 16-bit float stored as `bits`, converted by the two functions (float arithmetic in between).
template <std::uint16_t (*Encode)(float), float (*Decode)(std::uint16_t)>
struct storage16 {
  std::uint16_t bits = 0;
  constexpr storage16() = default;
  constexpr storage16(float f) : bits(Encode(f)) {}  // NOLINT: a store rounds, as on the GPU
  /// From double or an integer: rounded to float by rounding to odd (float_to_odd), then to 16 bits
  /// to nearest, which is the correctly rounded result (float keeps more than 2 extra bits).
  template <class A>
    requires(std::is_arithmetic_v<A> && !std::is_same_v<A, float>)
  constexpr storage16(A a) : bits(Encode(float_to_odd(double(a)))) {}
  constexpr operator float() const { return Decode(bits); }  // NOLINT: exact
  static constexpr storage16 from_bits(std::uint16_t b) {
    storage16 s;
    s.bits = b;
    return s;
  }
  constexpr storage16& operator+=(float v) { return *this = storage16(float(*this) + v); }
  constexpr storage16& operator-=(float v) { return *this = storage16(float(*this) - v); }
  constexpr storage16& operator*=(float v) { return *this = storage16(float(*this) * v); }
  constexpr storage16& operator/=(float v) { return *this = storage16(float(*this) / v); }
  constexpr storage16 operator-() const { return from_bits(std::uint16_t(bits ^ 0x8000u)); }
};
}  // namespace detail

/// bf16 storage: float's exponent range, 8 significant bits (a relative step of 2^-8).
using bf16 = detail::storage16<detail::bfloat16_bits_of, detail::float_of_bfloat16_bits>;
/// IEEE binary16 storage: largest finite 65,504, 11 significant bits, subnormals down to 2^-24.
using fp16 = detail::storage16<detail::float16_bits_of, detail::float_of_float16_bits>;

/// Whether T is one of the 16-bit storage types above.
template <class T>
inline constexpr bool is_half_float_v = std::is_same_v<T, bf16> || std::is_same_v<T, fp16>;

/// Row statistics of the 16-bit types are float, as on the GPU (cuda/types.cuh).
template <>
struct statistic_type<bf16> {
  using type = float;
};
template <>
struct statistic_type<fp16> {
  using type = float;
};

/// The type a CPU kernel computes and accumulates T in: float for the 16-bit types, T otherwise.
template <class T>
using compute_type_t = std::conditional_t<is_half_float_v<T>, float, T>;

}  // namespace autoddl

template <std::uint16_t (*E)(float), float (*D)(std::uint16_t)>
class std::numeric_limits<autoddl::detail::storage16<E, D>> {
  using S = autoddl::detail::storage16<E, D>;
  static constexpr bool is_bf = std::is_same_v<S, autoddl::bf16>;  // (comparing the function pointers is not a constant under the sanitizers)

 public:
  static constexpr bool is_specialized = true, is_signed = true, is_integer = false, is_exact = false;
  static constexpr bool has_infinity = true, has_quiet_NaN = true;
  static constexpr int digits = is_bf ? 8 : 11;
  static constexpr S infinity() { return S::from_bits(is_bf ? 0x7f80 : 0x7c00); }
  static constexpr S quiet_NaN() { return S::from_bits(is_bf ? 0x7fc0 : 0x7e00); }
  static constexpr S max() { return S::from_bits(is_bf ? 0x7f7f : 0x7bff); }
  static constexpr S lowest() { return -max(); }
  static constexpr S min() { return S::from_bits(is_bf ? 0x0080 : 0x0400); }  // smallest normal
  static constexpr S denorm_min() { return S::from_bits(1); }
  static constexpr S epsilon() { return S::from_bits(is_bf ? 0x3c00 : 0x1400); }  // 2^-7, 2^-10
};
