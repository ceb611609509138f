#pragma once
// The element-wise primitives of the CPU device (their contracts: backend/device.hpp): sums and
// products, the activations and their gradients, the optimizer updates. Loops run over raw
// pointers (span's operator[] is checked under _GLIBCXX_ASSERTIONS, which keeps a loop from
// vectorising); float runs GeLU and SiLU in the CPU's widest float lanes with vector_math.hpp's
// e^x and tanh, double through libm.
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "autoddl/backend/cpu/half_types.hpp"
#include "autoddl/backend/cpu/vector_math.hpp"
#include "autoddl/backend/device.hpp"

namespace autoddl {

namespace detail {
/// v where keep holds, else +0, without a branch: a data-dependent branch in an element loop
/// (ReLU's sign, dropout's mask) mispredicts on half the elements of real activations, which ran
/// ReLU 3-10x slower inside a training step than on the repeated input of a calibration rep.
template <class T>
inline T keep_if(bool keep, T v) {
  if constexpr (std::is_same_v<T, float>)
    return std::bit_cast<float>(std::bit_cast<std::uint32_t>(v) & (0u - std::uint32_t(keep)));
  else if constexpr (std::is_same_v<T, double>)
    return std::bit_cast<double>(std::bit_cast<std::uint64_t>(v) & (std::uint64_t(0) - std::uint64_t(keep)));
  else
    return keep ? v : T(0);
}

// GPT-2's GeLU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Hendrycks & Gimpel 2016)
constexpr double gelu_c = 0.7978845608028654;  // sqrt(2/pi)
constexpr double gelu_a = 0.044715;

/// y = f(x) or dx = f(x, dy) over n floats, in the widest lanes of this CPU.
template <class Op>
void float_map(const float* x, float* y, std::size_t n, Op op) {
  with_float_lanes([&]<class V>() __attribute__((always_inline)) {
    map_lanes<V>(x, y, n, [&](const V& v) __attribute__((always_inline)) { return op.template operator()<V>(v); });
  });
}
template <class Op>
void float_map(const float* x, const float* dy, float* dx, std::size_t n, Op op) {
  with_float_lanes([&]<class V>() __attribute__((always_inline)) {
    map_lanes<V>(x, dy, dx, n, [&](const V& v, const V& g) __attribute__((always_inline)) { return op.template operator()<V>(v, g); });
  });
}
/// y = f(a, b) over n floats for a generic lambda f of two lanes (y may be a or b).
template <class F>
void float_zip(const float* a, const float* b, float* y, std::size_t n, F f) {
  with_float_lanes([&]<class V>() __attribute__((always_inline)) { map_lanes<V>(a, b, y, n, f); });
}
struct gelu_lanes {
  template <class V>
  [[gnu::always_inline]] V operator()(const V& v) const {
    return 0.5f * v * (1.0f + tanh_lanes<V>(float(gelu_c) * (v + float(gelu_a) * v * v * v)));
  }
};
struct gelu_grad_lanes {
  template <class V>
  [[gnu::always_inline]] V operator()(const V& v, const V& dy) const {
    const V t = tanh_lanes<V>(float(gelu_c) * (v + float(gelu_a) * v * v * v));
    const V du = float(gelu_c) * (1.0f + float(3 * gelu_a) * v * v);
    return dy * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  }
};
struct silu_lanes {
  template <class V>
  [[gnu::always_inline]] V operator()(const V& v) const {
    return v / (1.0f + exp_lanes<V>(-v));
  }
};
struct silu_grad_lanes {
  template <class V>
  [[gnu::always_inline]] V operator()(const V& v, const V& dy) const {
    const V s = 1.0f / (1.0f + exp_lanes<V>(-v));
    return dy * s * (1.0f + v * (1.0f - s));
  }
};
}  // namespace detail

/// The CPU device's element-wise primitives (cpu_device derives from it).
struct cpu_elementwise_primitives {
  template <class T>
  void add(std::span<const T> a, std::span<const T> b, std::span<T> y) {
    if constexpr (std::is_same_v<T, float>) {
      return detail::float_zip(a.data(), b.data(), y.data(), y.size(),
                               [](const auto& u, const auto& v) __attribute__((always_inline)) { return u + v; });
    }
    const T *pa = a.data(), *pb = b.data();
    T* py = y.data();
    for (std::size_t i = 0, n = y.size(); i < n; ++i) py[i] = pa[i] + pb[i];
  }
  template <class T>
  void axpy(T alpha, std::span<const T> x, std::span<T> y) {
    if constexpr (std::is_same_v<T, float>) {
      return detail::float_zip(x.data(), y.data(), y.data(), y.size(),
                               [alpha](const auto& u, const auto& v) __attribute__((always_inline)) { return v + alpha * u; });
    }
    const T* px = x.data();
    T* py = y.data();
    for (std::size_t i = 0, n = y.size(); i < n; ++i) py[i] += alpha * px[i];
  }
  template <class T>
  void scale(T alpha, std::span<T> y) {
    if constexpr (std::is_same_v<T, float>) {
      return detail::float_zip(y.data(), y.data(), y.data(), y.size(),
                               [alpha](const auto& u, const auto&) __attribute__((always_inline)) { return u * alpha; });
    }
    T* py = y.data();
    for (std::size_t i = 0, n = y.size(); i < n; ++i) py[i] *= alpha;
  }
  template <class T>
  void mul(std::span<const T> a, std::span<const T> b, std::span<T> y) {
    if constexpr (std::is_same_v<T, float>) {
      return detail::float_zip(a.data(), b.data(), y.data(), y.size(),
                               [](const auto& u, const auto& v) __attribute__((always_inline)) { return u * v; });
    }
    const T *pa = a.data(), *pb = b.data();
    T* py = y.data();
    for (std::size_t i = 0, n = y.size(); i < n; ++i) py[i] = pa[i] * pb[i];
  }

  template <class T>
  void relu_fwd(std::span<const T> x, std::span<T> y) {
    if constexpr (std::is_same_v<T, float>) {  // NaN and -0 give +0, as keep_if does
      return detail::float_zip(x.data(), x.data(), y.data(), y.size(), []<class V>(const V& u, const V&) __attribute__((always_inline)) {
        return detail::select_lanes<V>(u > 0.0f, u, V{});
      });
    }
    const T* px = x.data();
    T* py = y.data();
    for (std::size_t i = 0, n = y.size(); i < n; ++i) py[i] = detail::keep_if(px[i] > T(0), px[i]);
  }
  template <class T>
  void relu_bwd(std::span<const T> x, std::span<const T> dy, std::span<T> dx) {
    if constexpr (std::is_same_v<T, float>) {
      return detail::float_zip(x.data(), dy.data(), dx.data(), dx.size(), []<class V>(const V& u, const V& g) __attribute__((always_inline)) {
        return detail::select_lanes<V>(u > 0.0f, g, V{});
      });
    }
    const T *px = x.data(), *pd = dy.data();
    T* pdx = dx.data();
    for (std::size_t i = 0, n = dx.size(); i < n; ++i) pdx[i] = detail::keep_if(px[i] > T(0), pd[i]);
  }

  template <class T>
  void gelu_fwd(std::span<const T> x, std::span<T> y) {
    if constexpr (std::is_same_v<T, float>) {
      detail::float_map(x.data(), y.data(), y.size(), detail::gelu_lanes{});
    } else {
      const T* px = x.data();
      T* py = y.data();
      for (std::size_t i = 0, n = y.size(); i < n; ++i) {
        const compute_type_t<T> v = px[i];
        py[i] = T(0.5) * v * (T(1) + std::tanh(T(detail::gelu_c) * (v + T(detail::gelu_a) * v * v * v)));
      }
    }
  }
  template <class T>
  void gelu_bwd(std::span<const T> x, std::span<const T> dy, std::span<T> dx) {
    if constexpr (std::is_same_v<T, float>) {
      detail::float_map(x.data(), dy.data(), dx.data(), dx.size(), detail::gelu_grad_lanes{});
    } else {
      const T *px = x.data(), *pd = dy.data();
      T* pdx = dx.data();
      for (std::size_t i = 0, n = dx.size(); i < n; ++i) {
        const compute_type_t<T> v = px[i];
        const compute_type_t<T> t = std::tanh(T(detail::gelu_c) * (v + T(detail::gelu_a) * v * v * v));
        const compute_type_t<T> du = T(detail::gelu_c) * (T(1) + T(3 * detail::gelu_a) * v * v);
        pdx[i] = pd[i] * (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * du);
      }
    }
  }

  template <class T>
  void silu_fwd(std::span<const T> x, std::span<T> y) {
    if constexpr (std::is_same_v<T, float>) {
      detail::float_map(x.data(), y.data(), y.size(), detail::silu_lanes{});
    } else {
      const T* px = x.data();
      T* py = y.data();
      for (std::size_t i = 0, n = y.size(); i < n; ++i) py[i] = px[i] / (T(1) + std::exp(-px[i]));
    }
  }
  template <class T>
  void silu_bwd(std::span<const T> x, std::span<const T> dy, std::span<T> dx) {
    if constexpr (std::is_same_v<T, float>) {
      detail::float_map(x.data(), dy.data(), dx.data(), dx.size(), detail::silu_grad_lanes{});
    } else {
      const T *px = x.data(), *pd = dy.data();
      T* pdx = dx.data();
      for (std::size_t i = 0, n = dx.size(); i < n; ++i) {
        const compute_type_t<T> s = T(1) / (T(1) + std::exp(-px[i]));
        pdx[i] = pd[i] * s * (T(1) + px[i] * (T(1) - s));
      }
    }
  }

  // ---- optimizers ---------------------------------------------------------------------------
  template <class T>
  void sgd_momentum(const optimizer_step& o, std::span<const T> g, std::span<T> vel, std::span<T> p) {
    const compute_type_t<T> mom = T(o.momentum), wd = T(o.weight_decay), lr = T(o.lr);
    const T* pg = g.data();
    T *pv = vel.data(), *pp = p.data();
    if constexpr (std::is_same_v<T, float>) {  // one pass over the three arrays in float lanes
      return detail::with_float_lanes([&]<class V>() __attribute__((always_inline)) {
        detail::for_lane_blocks<V>(p.size(), [&](std::size_t i, std::size_t k) __attribute__((always_inline)) {
          const V w = detail::load_n<V>(pp + i, k);
          const V v = mom * detail::load_n<V>(pv + i, k) + detail::load_n<V>(pg + i, k) + wd * w;
          detail::store_n<V>(pv + i, v, k);
          detail::store_n<V>(pp + i, w - lr * v, k);
        });
      });
    }
    for (std::size_t i = 0, n = p.size(); i < n; ++i) {
      pv[i] = mom * pv[i] + pg[i] + wd * pp[i];
      pp[i] -= lr * pv[i];
    }
  }
  template <class T>
  void adam(const optimizer_step& o, std::span<const T> g, std::span<T> m, std::span<T> v, std::span<T> p) {
    const double c1 = 1.0 - std::pow(o.beta1, double(o.step)), c2 = 1.0 - std::pow(o.beta2, double(o.step));
    const compute_type_t<T> b1 = T(o.beta1), b2 = T(o.beta2), rest1 = T(1 - o.beta1), rest2 = T(1 - o.beta2);
    const compute_type_t<T> wd = T(o.weight_decay), lr = T(o.lr), eps = T(o.eps);
    const T* pg = g.data();
    T *pm = m.data(), *pv = v.data(), *pp = p.data();
    if constexpr (std::is_same_v<T, float>) {  // one pass over the four arrays in float lanes
      const float c1f = float(c1), c2f = float(c2);
      return detail::with_float_lanes([&]<class V>() __attribute__((always_inline)) {
        detail::for_lane_blocks<V>(p.size(), [&](std::size_t i, std::size_t k) __attribute__((always_inline)) {
          const V w = detail::load_n<V>(pp + i, k);
          const V gi = detail::load_n<V>(pg + i, k) + wd * w;
          const V mi = b1 * detail::load_n<V>(pm + i, k) + rest1 * gi;
          const V vi = b2 * detail::load_n<V>(pv + i, k) + rest2 * gi * gi;
          detail::store_n<V>(pm + i, mi, k);
          detail::store_n<V>(pv + i, vi, k);
          detail::store_n<V>(pp + i, w - lr * (mi / c1f) / (detail::sqrt_lanes<V>(vi / c2f) + eps), k);
        });
      });
    }
    for (std::size_t i = 0, n = p.size(); i < n; ++i) {
      const compute_type_t<T> gi = pg[i] + wd * pp[i];
      pm[i] = b1 * pm[i] + rest1 * gi;
      pv[i] = b2 * pv[i] + rest2 * gi * gi;
      pp[i] -= lr * (pm[i] / T(c1)) / (std::sqrt(pv[i] / T(c2)) + eps);
    }
  }
};

}  // namespace autoddl
