#pragma once
// Shared by the CUDA tests: element conversions, host <-> device vectors, tolerances.
// Inputs are drawn in double, rounded to T, and the CPU reference runs in double on the
// rounded values, so the comparison measures only the device's arithmetic in T.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <type_traits>
#include <vector>

#include "autoddl/backend/cuda.cuh"

namespace cudatest {
using autoddl::cuda::cuda_buffer;
using autoddl::cuda::cuda_device;

template <class T>
T from_double(double x) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(float(x));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(float(x));
  else return T(x);
}
template <class T>
double to_double(T x) {
  if constexpr (std::is_same_v<T, __half>) return double(__half2float(x));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return double(__bfloat162float(x));
  else return double(x);
}
/// Relative tolerance of a primitive's result in T (against double on T-rounded inputs).
template <class T>
constexpr double tol() {
  if constexpr (std::is_same_v<T, double>) return 1e-12;
  else if constexpr (std::is_same_v<T, float>) return 1e-5;
  else if constexpr (std::is_same_v<T, __half>) return 1e-2;
  else return 2e-2;  // bfloat16: 8 significant bits, one rounding is already 4e-3
}
template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, double>) return "double";
  else if constexpr (std::is_same_v<T, float>) return "float";
  else if constexpr (std::is_same_v<T, __half>) return "half";
  else return "bfloat16";
}

inline std::vector<double> rnd(std::size_t n, std::uint64_t seed, double lo = -1, double hi = 1) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = u(g);
  return v;
}
/// v rounded to T and back: the values the device actually sees.
template <class T>
std::vector<double> rounded(std::vector<double> v) {
  for (double& x : v) x = to_double(from_double<T>(x));
  return v;
}
/// max |a - b| / max(1, max |b|); 1e300 when the sizes differ or a value is not finite.
inline double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return 1e300;
  double d = 0, s = 1;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isfinite(b[i]) != std::isfinite(a[i])) return 1e300;
    if (!std::isfinite(b[i])) {
      if (a[i] != b[i]) return 1e300;  // both infinite: same sign
      continue;
    }
    d = std::max(d, std::abs(a[i] - b[i]));
    s = std::max(s, std::abs(b[i]));
  }
  return d / s;
}

inline std::span<const double> cs(const std::vector<double>& v) { return {v.data(), v.size()}; }
inline std::span<double> ms(std::vector<double>& v) { return {v.data(), v.size()}; }

/// A device vector of T made from doubles; get() reads it back as doubles.
template <class T>
struct dvec {
  cuda_device* dev;
  cuda_buffer<T> b;
  dvec(cuda_device& d, const std::vector<double>& v) : dev(&d), b(d.alloc<T>(v.size())) {
    std::vector<T> h(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) h[i] = from_double<T>(v[i]);
    d.upload(std::span<const T>(h), d.view(b));
  }
  std::span<const T> c() const { return dev->view(b); }
  std::span<T> m() { return dev->view(b); }
  std::vector<double> get() const {
    std::vector<T> h(b.size());
    dev->download(c(), std::span<T>(h));
    std::vector<double> r(h.size());
    for (std::size_t i = 0; i < h.size(); ++i) r[i] = to_double(h[i]);
    return r;
  }
};

/// Index vectors on the device.
struct ivec {
  cuda_device* dev;
  cuda_buffer<std::int64_t> b;
  ivec(cuda_device& d, const std::vector<std::int64_t>& v) : dev(&d), b(d.alloc<std::int64_t>(v.size())) {
    d.upload(std::span<const std::int64_t>(v), d.view(b));
  }
  std::span<const std::int64_t> c() const { return dev->view(b); }
};

}  // namespace cudatest
