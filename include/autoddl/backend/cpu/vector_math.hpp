#pragma once
// Four floats at a time for the CPU device's element-wise and row-wise loops: GCC/Clang vector
// extensions (one SSE register, which every x86-64 has; 16 bytes pass in registers under the
// base ABI, where 32 would not without AVX), so the loops vectorise at -O2 without -ffast-math and without target flags, and e^x and tanh run as
// polynomials in those lanes instead of one libm call per element (glibc's tanhf and expf are
// scalar: GeLU over 1 Mi floats took 24 ms through std::tanh, 1.4 ms here).
// Accuracy: exp4 is within 2 ulp of e^x over float's normal range (Cody & Waite's range
// reduction, then Taylor's series to degree 7, whose remainder is below 6e-9 on |r| <= ln2 / 2);
// tanh4 within 1e-7 absolutely. The double loops keep libm: the finite-difference and
// serial-equivalence tests run in double, and double is not what a step's throughput is about.
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace autoddl::detail {

using f32x4 = float __attribute__((vector_size(16)));
using i32x4 = std::int32_t __attribute__((vector_size(16)));

inline f32x4 splat4(float v) { return f32x4{} + v; }
inline f32x4 load4(const float* p) {
  f32x4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store4(float* p, f32x4 v) { std::memcpy(p, &v, sizeof v); }
/// The first n (< 4) floats at p, zeros after them.
inline f32x4 load_part4(const float* p, std::size_t n) {
  f32x4 v{};
  std::memcpy(&v, p, n * sizeof(float));
  return v;
}
inline void store_part4(float* p, f32x4 v, std::size_t n) { std::memcpy(p, &v, n * sizeof(float)); }

/// Lane-wise select: where `mask` is all ones a, else b (masks come from lane comparisons).
inline f32x4 select4(i32x4 mask, f32x4 a, f32x4 b) {
  return reinterpret_cast<f32x4>((reinterpret_cast<i32x4>(a) & mask) | (reinterpret_cast<i32x4>(b) & ~mask));
}
inline f32x4 min4(f32x4 a, f32x4 b) { return select4(a < b, a, b); }
inline f32x4 max4(f32x4 a, f32x4 b) { return select4(a > b, a, b); }
inline float sum4(f32x4 v) {
  float s = 0;
  for (int i = 0; i < 4; ++i) s += v[i];
  return s;
}
inline float hmax4(f32x4 v) {
  float m = v[0];
  for (int i = 1; i < 4; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

/// e^x per lane: +0 below -87.33 (under float's smallest normal; -inf included), NaN stays NaN,
/// x above 88.37 is taken as 88.37 (2^127 is float's largest power of two). x = n ln2 + r with ln2 split in two (Cody & Waite), so r is exact
/// to float precision; 2^n goes into the exponent bits.
inline f32x4 exp4(f32x4 x) {
  const f32x4 xc = min4(max4(x, splat4(-87.33f)), splat4(88.37f));
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const f32x4 n = (xc * 1.44269504088896341f + shifter) - shifter;
  const f32x4 r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  f32x4 p = splat4(1.0f / 5040);
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const i32x4 bits = (__builtin_convertvector(n, i32x4) + 127) << 23;
  const f32x4 y = p * reinterpret_cast<f32x4>(bits);
  const f32x4 nan_kept = select4(x != x, x, y);
  return select4(x < -87.33f, splat4(0.0f), nan_kept);
}

/// tanh per lane: sign(u) (1 - e^(-2|u|)) / (1 + e^(-2|u|)).
inline f32x4 tanh4(f32x4 u) {
  const i32x4 sign = reinterpret_cast<i32x4>(u) & static_cast<std::int32_t>(0x80000000u);
  const f32x4 a = reinterpret_cast<f32x4>(reinterpret_cast<i32x4>(u) & 0x7fffffff);
  const f32x4 t = exp4(a * -2.0f);
  const f32x4 m = (1.0f - t) / (1.0f + t);
  return reinterpret_cast<f32x4>(reinterpret_cast<i32x4>(m) | sign);
}

/// y[i] = f(x[i]) for i < n, four at a time (the tail through a zero-padded block).
template <class F>
void map4(const float* x, float* y, std::size_t n, F f) {
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) store4(y + i, f(load4(x + i)));
  if (i < n) store_part4(y + i, f(load_part4(x + i, n - i)), n - i);
}
/// y[i] = f(a[i], b[i]) for i < n.
template <class F>
void map4(const float* a, const float* b, float* y, std::size_t n, F f) {
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) store4(y + i, f(load4(a + i), load4(b + i)));
  if (i < n) store_part4(y + i, f(load_part4(a + i, n - i), load_part4(b + i, n - i)), n - i);
}

/// The largest of x[0..n) (-inf for n = 0).
inline float row_max4(const float* x, std::size_t n) {
  f32x4 m = splat4(-__builtin_inff());
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) m = max4(m, load4(x + i));
  float r = hmax4(m);
  for (; i < n; ++i) r = x[i] > r ? x[i] : r;
  return r;
}
/// y[i] = e^(x[i] - m); returns the sum of the y[i].
inline float exp_sum4(const float* x, float m, float* y, std::size_t n) {
  f32x4 s{};
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const f32x4 e = exp4(load4(x + i) - m);
    store4(y + i, e);
    s += e;
  }
  if (i < n) {
    const f32x4 e = exp4(load_part4(x + i, n - i) - m);
    store_part4(y + i, e, n - i);
    for (std::size_t k = 0; k < n - i; ++k) s[k] += e[k];
  }
  return sum4(s);
}
/// The sum of e^(x[i] - m) over i < n.
inline float sum_exp4(const float* x, float m, std::size_t n) {
  f32x4 s{};
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) s += exp4(load4(x + i) - m);
  float r = sum4(s);
  if (i < n) {
    const f32x4 e = exp4(load_part4(x + i, n - i) - m);
    for (std::size_t k = 0; k < n - i; ++k) r += e[k];
  }
  return r;
}
/// The sum of a[i] b[i] over i < n.
inline float dot4(const float* a, const float* b, std::size_t n) {
  f32x4 s{};
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) s += load4(a + i) * load4(b + i);
  if (i < n) s += load_part4(a + i, n - i) * load_part4(b + i, n - i);
  return sum4(s);
}

}  // namespace autoddl::detail
