#pragma once
// The row-wise primitives of the CPU device (their contracts: backend/device.hpp): layernorm,
// RMSNorm, softmax and the attention mask, and softmax cross-entropy. Each row is one pass to
// its statistics and one to its outputs, over raw pointers; float takes its e^x, maxima and dot
// products in the CPU's widest float lanes (vector_math.hpp), double through libm. Row statistics and
// every sum are kept in compute_type_t<T> (float for the 16-bit types, as statistic_t is).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>

#include "autoddl/backend/cpu/half_types.hpp"
#include "autoddl/backend/cpu/vector_math.hpp"
#include "autoddl/backend/device.hpp"

namespace autoddl {

namespace detail {
/// The largest of x[0..n).
template <class T>
compute_type_t<T> row_max_of(const T* x, std::int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    float m = 0;
    with_float_lanes([&]<class V>() __attribute__((always_inline)) { m = max_lanes<V>(x, std::size_t(n)); });
    return m;
  } else {
    compute_type_t<T> m = -std::numeric_limits<T>::infinity();
    for (std::int64_t c = 0; c < n; ++c) m = std::max(m, compute_type_t<T>(x[c]));
    return m;
  }
}
/// The sum of e^(x[c] - m) over the row.
template <class T>
compute_type_t<T> row_sum_exp(const T* x, compute_type_t<T> m, std::int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    float s = 0;
    with_float_lanes([&]<class V>() __attribute__((always_inline)) { s = exp_sum_lanes<V>(x, m, nullptr, std::size_t(n)); });
    return s;
  } else {
    compute_type_t<T> s{};
    for (std::int64_t c = 0; c < n; ++c) s += std::exp(x[c] - m);
    return s;
  }
}
}  // namespace detail

/// The CPU device's row-wise primitives (cpu_device derives from it).
struct cpu_rowwise_primitives {
  /// RMSNorm of rows x cols: y = x rstd gamma, rstd = 1 / sqrt(mean(x^2) + eps), kept per row.
  template <class T>
  void rmsnorm_fwd(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<const T> gamma, double eps,
                   std::span<T> y, std::span<statistic_t<T>> rstd) {
    const T* g = gamma.data();
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* xr = x.data() + r * cols;
      T* yr = y.data() + r * cols;
      compute_type_t<T> ms{};
      for (std::int64_t c = 0; c < cols; ++c) ms += xr[c] * xr[c];
      const compute_type_t<T> rs = T(1) / std::sqrt(ms / T(cols) + T(eps));
      for (std::int64_t c = 0; c < cols; ++c) yr[c] = xr[c] * rs * g[c];
      at(rstd, r) = rs;
    }
  }
  /// dx = rstd (g - x rstd^2 mean(g x)), g = dy gamma; dgamma = sum over rows of dy x rstd.
  template <class T>
  void rmsnorm_bwd(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<const T> gamma,
                   std::span<const statistic_t<T>> rstd, std::span<const T> dy, std::span<T> dx, std::span<T> dgamma) {
    std::fill(dgamma.begin(), dgamma.end(), T{});
    const T* g = gamma.data();
    T* dg = dgamma.data();
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* xr = x.data() + r * cols;
      const T* dyr = dy.data() + r * cols;
      T* dxr = dx.data() + r * cols;
      const compute_type_t<T> rs = at(rstd, r);
      compute_type_t<T> gx{};
      for (std::int64_t c = 0; c < cols; ++c) {
        gx += dyr[c] * g[c] * xr[c];
        dg[c] += dyr[c] * xr[c] * rs;
      }
      gx /= T(cols);
      for (std::int64_t c = 0; c < cols; ++c) dxr[c] = rs * (dyr[c] * g[c] - xr[c] * rs * rs * gx);
    }
  }

  static constexpr double layernorm_eps = 1e-5;
  template <class T>
  void layernorm_fwd(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<const T> gamma,
                     std::span<const T> beta, std::span<T> y, std::span<statistic_t<T>> mean,
                     std::span<statistic_t<T>> rstd) {
    const T *g = gamma.data(), *b = beta.data();
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* xr = x.data() + r * cols;
      T* yr = y.data() + r * cols;
      compute_type_t<T> mu{};
      for (std::int64_t c = 0; c < cols; ++c) mu += xr[c];
      mu /= T(cols);
      compute_type_t<T> var{};
      for (std::int64_t c = 0; c < cols; ++c) var += (xr[c] - mu) * (xr[c] - mu);
      var /= T(cols);
      const compute_type_t<T> rs = T(1) / std::sqrt(var + T(layernorm_eps));
      for (std::int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mu) * rs * g[c] + b[c];
      at(mean, r) = mu;
      at(rstd, r) = rs;
    }
  }
  template <class T>
  void layernorm_bwd(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<const T> gamma,
                     std::span<const statistic_t<T>> mean, std::span<const statistic_t<T>> rstd,
                     std::span<const T> dy, std::span<T> dx, std::span<T> dgamma, std::span<T> dbeta) {
    std::fill(dgamma.begin(), dgamma.end(), T{});
    std::fill(dbeta.begin(), dbeta.end(), T{});
    const T* gm = gamma.data();
    T *dg = dgamma.data(), *db = dbeta.data();
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* xr = x.data() + r * cols;
      const T* dyr = dy.data() + r * cols;
      T* dxr = dx.data() + r * cols;
      const compute_type_t<T> mu = at(mean, r), rs = at(rstd, r);
      compute_type_t<T> s1{}, s2{};  // mean of dxhat and of dxhat * xhat
      for (std::int64_t c = 0; c < cols; ++c) {
        const compute_type_t<T> xh = (xr[c] - mu) * rs, g = dyr[c] * gm[c];
        s1 += g;
        s2 += g * xh;
        dg[c] += dyr[c] * xh;
        db[c] += dyr[c];
      }
      s1 /= T(cols);
      s2 /= T(cols);
      for (std::int64_t c = 0; c < cols; ++c) {
        const compute_type_t<T> xh = (xr[c] - mu) * rs;
        dxr[c] = rs * (dyr[c] * gm[c] - s1 - xh * s2);
      }
    }
  }

  template <class T>
  void softmax_fwd(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<T> y) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* xr = x.data() + r * cols;
      T* yr = y.data() + r * cols;
      const compute_type_t<T> m = detail::row_max_of(xr, cols);
      compute_type_t<T> s{};
      if constexpr (std::is_same_v<T, float>)
        detail::with_float_lanes([&]<class V>() __attribute__((always_inline)) {
          s = detail::exp_sum_lanes<V>(xr, m, yr, std::size_t(cols));
        });
      else
        for (std::int64_t c = 0; c < cols; ++c) s += (yr[c] = std::exp(xr[c] - m));
      const compute_type_t<T> inv = T(1) / s;
      for (std::int64_t c = 0; c < cols; ++c) yr[c] *= inv;
    }
  }
  template <class T>
  void softmax_bwd(std::int64_t rows, std::int64_t cols, std::span<const T> y, std::span<const T> dy, std::span<T> dx) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* yr = y.data() + r * cols;
      const T* dyr = dy.data() + r * cols;
      T* dxr = dx.data() + r * cols;
      compute_type_t<T> dot{};
      if constexpr (std::is_same_v<T, float>)
        detail::with_float_lanes([&]<class V>() __attribute__((always_inline)) {
          dot = detail::dot_lanes<V>(yr, dyr, std::size_t(cols));
        });
      else
        for (std::int64_t c = 0; c < cols; ++c) dot += yr[c] * dyr[c];
      for (std::int64_t c = 0; c < cols; ++c) dxr[c] = yr[c] * (dyr[c] - dot);
    }
  }
  /// Scores scaled, and -inf where a query at global position q_offset + q would see a later key.
  template <class T>
  void scale_causal_mask(std::int64_t groups, std::int64_t sq, std::int64_t sk, T scale, std::int64_t q_offset,
                         bool causal, std::span<T> s) {
    const compute_type_t<T> neg = -std::numeric_limits<T>::infinity();
    for (std::int64_t g = 0; g < groups; ++g)
      for (std::int64_t q = 0; q < sq; ++q) {
        T* row = s.data() + (g * sq + q) * sk;
        const std::int64_t seen = causal ? std::clamp<std::int64_t>(q_offset + q + 1, 0, sk) : sk;
        if (scale != T(1))
          for (std::int64_t k = 0; k < seen; ++k) row[k] *= scale;
        std::fill(row + seen, row + sk, neg);
      }
  }

  // ---- softmax cross-entropy ------------------------------------------------------------------
  template <class T>
  void row_max(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<statistic_t<T>> m) {
    for (std::int64_t r = 0; r < rows; ++r) at(m, r) = detail::row_max_of(x.data() + r * cols, cols);
  }
  template <class T>
  void xent_stats(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<const std::int64_t> labels,
                  std::int64_t lo, std::span<const statistic_t<T>> m, std::span<statistic_t<T>> stats) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* xr = x.data() + r * cols;
      const std::int64_t t = at(labels, r) - lo;
      at(stats, r) = detail::row_sum_exp(xr, at(m, r), cols);
      at(stats, rows + r) = t >= 0 && t < cols ? xr[t] : T(0);
    }
  }
  /// The loss from the row statistics alone, in their type S (statistic_t of the logits' type).
  template <class S>
  void xent_loss(std::int64_t rows, std::span<const S> m, std::span<const S> stats, std::type_identity_t<S> scale,
                 std::span<S> out) {
    S acc{};
    for (std::int64_t r = 0; r < rows; ++r) acc += std::log(at(stats, r)) + at(m, r) - at(stats, rows + r);
    out[0] = scale * acc;
  }
  template <class T>
  void xent_bwd(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<const std::int64_t> labels,
                std::int64_t lo, std::span<const statistic_t<T>> m, std::span<const statistic_t<T>> stats,
                std::span<const T> dloss, statistic_t<T> scale, std::span<T> dx) {
    const compute_type_t<T> f = scale * dloss[0];
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* xr = x.data() + r * cols;
      T* dr = dx.data() + r * cols;
      const compute_type_t<T> mr = at(m, r), w = f / at(stats, r);
      if constexpr (std::is_same_v<T, float>)
        detail::with_float_lanes([&]<class V>() __attribute__((always_inline)) {
          detail::map_lanes<V>(xr, dr, std::size_t(cols),
                               [mr, w](const V& v) __attribute__((always_inline)) { return w * detail::exp_lanes<V>(v - mr); });
        });
      else
        for (std::int64_t c = 0; c < cols; ++c) dr[c] = w * std::exp(xr[c] - mr);
      const std::int64_t t = at(labels, r) - lo;
      if (t >= 0 && t < cols) dr[t] -= f;
    }
  }
};

}  // namespace autoddl
