#pragma once
// Float lanes for the CPU device's element-wise and row-wise loops: GCC/Clang vector extensions
// of 4, 8 or 16 floats, so the loops vectorise at -O2 without -ffast-math, and e^x and tanh run as
// polynomials in those lanes instead of one libm call per element (glibc's tanhf and expf are
// scalar). with_float_lanes runs a loop body at the widest width the CPU has: 16 lanes under
// AVX-512, 8 under AVX2 (each compiled for its target here, chosen once per process), 4 (SSE2,
// every x86-64) otherwise. GeLU over 1 Mi floats: 15-20 ms through std::tanh, 3 ms in 4 lanes,
// 0.7 ms in 16 (one core of this project's machine kind).
// Accuracy: exp_lanes is within 2 ulp of e^x over float's normal range (Cody & Waite's range
// reduction, then Taylor's series to degree 7, whose remainder is below 6e-9 on |r| <= ln2 / 2);
// tanh_lanes within 1e-7 absolutely. Widths may round differently (AVX-512 contracts a * b + c
// into one FMA); one process always runs one width. The double loops keep libm: the
// finite-difference and serial-equivalence tests run in double.
#include <cstddef>
#include <cstdint>
#include <cstring>

// Lane types wider than the build's target would pass through memory between functions that are
// not inlined, and GCC says so for every such function (-Wpsabi, a note on the ABI, not a
// defect): every lane function here is inlined into the loop of its width, and the note is off
// from here to the end of the translation unit, where GCC emits it for template instances.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
#define AUTODDL_LANE [[gnu::always_inline]] inline

namespace autoddl::detail {

using f32x4 = float __attribute__((vector_size(16)));
using i32x4 = std::int32_t __attribute__((vector_size(16)));
using f32x8 = float __attribute__((vector_size(32)));
using i32x8 = std::int32_t __attribute__((vector_size(32)));
using f32x16 = float __attribute__((vector_size(64)));
using i32x16 = std::int32_t __attribute__((vector_size(64)));

template <class V>
struct lane_traits;
template <>
struct lane_traits<f32x4> {
  using bits = i32x4;
};
template <>
struct lane_traits<f32x8> {
  using bits = i32x8;
};
template <>
struct lane_traits<f32x16> {
  using bits = i32x16;
};
template <class V>
using lane_bits = typename lane_traits<V>::bits;
template <class V>
constexpr std::size_t lane_count = sizeof(V) / sizeof(float);

template <class V>
AUTODDL_LANE V load_lanes(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
AUTODDL_LANE void store_lanes(float* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}
/// The first n (< lane_count) floats at p, zeros after them.
template <class V>
AUTODDL_LANE V load_part(const float* p, std::size_t n) {
  V v{};
  std::memcpy(&v, p, n * sizeof(float));
  return v;
}
template <class V>
AUTODDL_LANE void store_part(float* p, const V& v, std::size_t n) {
  std::memcpy(p, &v, n * sizeof(float));
}
/// Lane-wise select: where `mask` is all ones a, else b (masks come from lane comparisons).
template <class V>
AUTODDL_LANE V select_lanes(const lane_bits<V>& mask, const V& a, const V& b) {
  using I = lane_bits<V>;
  return reinterpret_cast<V>((reinterpret_cast<I>(a) & mask) | (reinterpret_cast<I>(b) & ~mask));
}
template <class V>
AUTODDL_LANE float lane_sum(const V& v) {
  float s = 0;
  for (std::size_t i = 0; i < lane_count<V>; ++i) s += v[i];
  return s;
}

/// e^x per lane: +0 below -87.33 (under float's smallest normal; -inf included), NaN stays NaN,
/// x above 88.37 is taken as 88.37 (2^127 is float's largest power of two). x = n ln2 + r with
/// ln2 split in two (Cody & Waite), so r is exact to float precision; n is read from the bits of
/// x log2(e) + 1.5 2^23 (which round it) and goes into the exponent bits.
template <class V>
AUTODDL_LANE V exp_lanes(const V& x) {
  using I = lane_bits<V>;
  const V xc = select_lanes<V>(x > 88.37f, (V{} + 88.37f), select_lanes<V>(x < -87.33f, (V{} + -87.33f), x));
  const float shifter = 12582912.0f;  // 1.5 * 2^23
  const V t = xc * 1.44269504088896341f + shifter;
  const V n = t - shifter;
  const V r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  V p = (V{} + 1.0f / 5040);
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const I exponent = (reinterpret_cast<I>(t) - reinterpret_cast<I>((V{} + shifter)) + 127) << 23;
  const V y = p * reinterpret_cast<V>(exponent);
  return select_lanes<V>(x < -87.33f, (V{} + 0.0f), select_lanes<V>(x != x, x, y));
}
/// tanh per lane: sign(u) (1 - e^(-2|u|)) / (1 + e^(-2|u|)).
template <class V>
AUTODDL_LANE V tanh_lanes(const V& u) {
  using I = lane_bits<V>;
  const I sign = reinterpret_cast<I>(u) & static_cast<std::int32_t>(0x80000000u);
  const V a = reinterpret_cast<V>(reinterpret_cast<I>(u) & 0x7fffffff);
  const V t = exp_lanes<V>(a * -2.0f);
  const V m = (1.0f - t) / (1.0f + t);
  return reinterpret_cast<V>(reinterpret_cast<I>(m) | sign);
}

/// y[i] = f(x[i]) for i < n, a lane block at a time (the tail through a zero-padded block).
template <class V, class F>
AUTODDL_LANE void map_lanes(const float* x, float* y, std::size_t n, F f) {
  constexpr std::size_t w = lane_count<V>;
  std::size_t i = 0;
  for (; i + w <= n; i += w) store_lanes<V>(y + i, f(load_lanes<V>(x + i)));
  if (i < n) store_part<V>(y + i, f(load_part<V>(x + i, n - i)), n - i);
}
/// y[i] = f(a[i], b[i]) for i < n.
template <class V, class F>
AUTODDL_LANE void map_lanes(const float* a, const float* b, float* y, std::size_t n, F f) {
  constexpr std::size_t w = lane_count<V>;
  std::size_t i = 0;
  for (; i + w <= n; i += w) store_lanes<V>(y + i, f(load_lanes<V>(a + i), load_lanes<V>(b + i)));
  if (i < n) store_part<V>(y + i, f(load_part<V>(a + i, n - i), load_part<V>(b + i, n - i)), n - i);
}
/// f(i, count) over [0, n): whole lane blocks (count = the lane count, a constant once inlined),
/// then the rest once (count below it). Loads and stores of a block go through load_n and
/// store_n, so every element, the tail's included, runs the same lane arithmetic.
template <class V, class F>
AUTODDL_LANE void for_lane_blocks(std::size_t n, F f) {
  constexpr std::size_t w = lane_count<V>;
  std::size_t i = 0;
  for (; i + w <= n; i += w) f(i, w);
  if (i < n) f(i, n - i);
}
template <class V>
AUTODDL_LANE V load_n(const float* p, std::size_t count) {
  return count == lane_count<V> ? load_lanes<V>(p) : load_part<V>(p, count);
}
template <class V>
AUTODDL_LANE void store_n(float* p, const V& v, std::size_t count) {
  if (count == lane_count<V>) store_lanes<V>(p, v);
  else store_part<V>(p, v, count);
}
/// The square root per lane, correctly rounded as sqrtf is (one lane at a time: the vector
/// extensions have no square root, and an intrinsic would not inline into the generic lambdas
/// that the lane width's target function inlines).
template <class V>
AUTODDL_LANE V sqrt_lanes(const V& v) {
  V r;
  for (std::size_t i = 0; i < lane_count<V>; ++i) r[i] = __builtin_sqrtf(v[i]);
  return r;
}
/// The largest of x[0..n) (-inf for n = 0).
template <class V>
AUTODDL_LANE float max_lanes(const float* x, std::size_t n) {
  constexpr std::size_t w = lane_count<V>;
  V m = (V{} + -__builtin_inff());
  std::size_t i = 0;
  for (; i + w <= n; i += w) {
    const V v = load_lanes<V>(x + i);
    m = select_lanes<V>(v > m, v, m);
  }
  float r = m[0];
  for (std::size_t k = 1; k < w; ++k) r = m[k] > r ? m[k] : r;
  for (; i < n; ++i) r = x[i] > r ? x[i] : r;
  return r;
}
/// y[i] = e^(x[i] - m) where y is not null; returns the sum of e^(x[i] - m).
template <class V>
AUTODDL_LANE float exp_sum_lanes(const float* x, float m, float* y, std::size_t n) {
  constexpr std::size_t w = lane_count<V>;
  V s{};
  std::size_t i = 0;
  for (; i + w <= n; i += w) {
    const V e = exp_lanes<V>(load_lanes<V>(x + i) - m);
    if (y) store_lanes<V>(y + i, e);
    s += e;
  }
  float r = lane_sum(s);
  if (i < n) {
    const V e = exp_lanes<V>(load_part<V>(x + i, n - i) - m);
    if (y) store_part<V>(y + i, e, n - i);
    for (std::size_t k = 0; k < n - i; ++k) r += e[k];
  }
  return r;
}
/// The sum of x[i] over i < n, in lane order (lane sums, then the lanes added).
template <class V>
AUTODDL_LANE float sum_lanes(const float* x, std::size_t n) {
  V s{};
  for_lane_blocks<V>(n, [&](std::size_t i, std::size_t k) __attribute__((always_inline)) { s += load_n<V>(x + i, k); });
  return lane_sum(s);
}
/// The sum of a[i] b[i] over i < n.
template <class V>
AUTODDL_LANE float dot_lanes(const float* a, const float* b, std::size_t n) {
  constexpr std::size_t w = lane_count<V>;
  V s{};
  std::size_t i = 0;
  for (; i + w <= n; i += w) s += load_lanes<V>(a + i) * load_lanes<V>(b + i);
  if (i < n) s += load_part<V>(a + i, n - i) * load_part<V>(b + i, n - i);
  return lane_sum(s);
}

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
template <class Body>
[[gnu::target("avx512f,avx512dq")]] void run_lanes16(Body& body) {  // dq: 64-bit lane products (dropout's hash)
  body.template operator()<f32x16>();
}
template <class Body>
[[gnu::target("avx2")]] void run_lanes8(Body& body) {
  body.template operator()<f32x8>();
}
/// 16, 8 or 4: the widest float lanes this CPU runs.
inline int float_lane_width() {
  static const int width = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") ? 16
                           : __builtin_cpu_supports("avx2")                                         ? 8
                                                                                                    : 4;
  return width;
}
#endif

/// body.template operator()<V>() with V the widest float lane type of this CPU (f32x16, f32x8 or
/// f32x4). The body's lane calls inline into the width's target; keep the body a lambda whose
/// loops are lane functions of this header.
template <class Body>
void with_float_lanes(Body&& body) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  const int width = float_lane_width();
  if (width == 16) return run_lanes16(body);
  if (width == 8) return run_lanes8(body);
#endif
  body.template operator()<f32x4>();
}

}  // namespace autoddl::detail

#undef AUTODDL_LANE