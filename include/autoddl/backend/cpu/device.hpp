#pragma once
// cpu_device: the Device of autoddl/backend/device.hpp on the host. Buffers are std::vector<T>
// with a counting allocator (bytes_in_use is exactly what the device's buffers hold, as
// cudaMallocAsync's pool accounting is on the GPU),
// GEMMs go to CBLAS (OpenBLAS) when present (autoddl/backend/cpu/gemm.hpp), everything else is
// plain loops in the element type. Single-threaded apart from BLAS: an MPI rank per core.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>  // std::allocator (<memory> and <atomic> would bring POSIX ::link along)
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "autoddl/backend/cpu/gemm.hpp"
#include "autoddl/backend/cpu/moe.hpp"
#include "autoddl/backend/device.hpp"
#include "autoddl/error.hpp"
#include "autoddl/index.hpp"
#include "autoddl/text.hpp"

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

/// Visits every element of a shard with its row-major global index: f(local index, global index).
template <class F>
void for_each_global_index(const shard_info& s, F&& f) {
  const int r = s.local.rank();
  const std::int64_t n = s.local.elements();
  if (n == 0) return;
  std::array<std::int64_t, max_tensor_rank> stride{}, idx{};
  std::int64_t st = 1;
  for (int d = r - 1; d >= 0; --d) {
    at(stride, d) = st;
    st *= s.global[d];
  }
  std::int64_t g = 0;
  for (int d = 0; d < r; ++d) g += at(s.offset, d) * at(stride, d);
  for (std::int64_t i = 0; i < n; ++i) {
    f(i, g);
    for (int d = r - 1; d >= 0; --d) {  // odometer over the local dims
      auto du = std::size_t(d);
      if (++idx[du] < s.local[d]) {
        g += stride[du];
        break;
      }
      g -= (idx[du] - 1) * stride[du];
      idx[du] = 0;
    }
  }
}
/// cpu_device keeps row statistics in the element type: it runs float and double, for which
/// statistic_t<T> is T (a type with wider statistics needs its own loops).
template <class T>
consteval void statistics_in_element_type() {
  static_assert(std::is_same_v<statistic_t<T>, T>,
                "cpu_device computes row statistics in the element type T, so statistic_t<T> must be T; "
                "use float or double");
}
/// Throws unless `rows` rows of `cols` elements, `ld` apart, fit in `size` elements.
inline void check_rows(std::int64_t rows, std::int64_t cols, std::int64_t ld, std::size_t size, const char* what) {
  if (ld < cols || (rows - 1) * ld + cols > std::int64_t(size))
    fail<error>(std::string(what) + ": " + itos(rows) + " rows of " + itos(cols) + " elements, " + itos(ld) +
                " apart, do not fit in " + itos(std::int64_t(size)) + " elements");
}
}  // namespace detail

namespace detail {
/// Bytes held by cpu_device buffers allocated on this thread, less those freed on it (a device
/// and its buffers live on one thread: an MPI rank, or one simulated device of a test).
inline std::int64_t& cpu_buffer_bytes() {
  thread_local std::int64_t n = 0;
  return n;
}
/// std::allocator that adds what it hands out to cpu_buffer_bytes and takes back what returns.
template <class T>
struct counted_allocator {
  using value_type = T;
  counted_allocator() = default;
  template <class U>
  constexpr counted_allocator(const counted_allocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    T* p = std::allocator<T>{}.allocate(n);
    cpu_buffer_bytes() += std::int64_t(n * sizeof(T));
    return p;
  }
  void deallocate(T* p, std::size_t n) noexcept {
    cpu_buffer_bytes() -= std::int64_t(n * sizeof(T));
    std::allocator<T>{}.deallocate(p, n);
  }
  template <class U>
  friend constexpr bool operator==(const counted_allocator&, const counted_allocator<U>&) noexcept {
    return true;
  }
};
}  // namespace detail

struct cpu_device : cpu_moe_primitives {  // the mixture-of-experts primitives: backend/cpu/moe.hpp
  template <class T>
  using buffer = std::vector<T, detail::counted_allocator<T>>;

  cpu_device() {
#if defined(__GLIBC__)
    // A training step allocates the same buffer sizes every step: keep freed ones in the heap for
    // the next step rather than returning them to the kernel and faulting fresh pages in (a
    // caching allocator's effect; glibc otherwise maps every buffer over 128 KiB anew).
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
  }

  // ---- memory -------------------------------------------------------------------------------
  template <class T>
  buffer<T> alloc(std::size_t n) { return buffer<T>(n, T{}); }
  template <class T>
  std::span<T> view(buffer<T>& b) { return {b.data(), b.size()}; }
  template <class T>
  std::span<const T> view(const buffer<T>& b) const { return {b.data(), b.size()}; }
  template <class T>
  void upload(std::span<const T> host, std::span<T> dst) { std::copy(host.begin(), host.end(), dst.begin()); }
  template <class T>
  void download(std::span<const T> src, std::span<T> host) { std::copy(src.begin(), src.end(), host.begin()); }
  template <class T>
  void copy(std::span<const T> src, std::span<T> dst) { std::copy(src.begin(), src.end(), dst.begin()); }
  template <class T>
  void copy_rows(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::int64_t ldx, std::span<T> y,
                 std::int64_t ldy) {
    if (rows <= 0 || cols <= 0) return;
    detail::check_rows(rows, cols, ldx, x.size(), "copy_rows: x");
    detail::check_rows(rows, cols, ldy, y.size(), "copy_rows: y");
    for (std::int64_t r = 0; r < rows; ++r) std::copy_n(x.data() + r * ldx, cols, y.data() + r * ldy);
  }
  template <class T>
  bool all_finite(std::span<const T> x) const {
    // sum of x * 0 is 0 unless some x is NaN or Inf: one branch-free pass
    T acc{};
    for (const T& v : x) acc += v * T(0);
    return acc == T(0);
  }
  void synchronize() const {}
  /// The bytes the cpu_device buffers of this thread hold now (counted by their allocator; host
  /// vectors beside them, kernel contexts and schedules, are not device memory).
  std::int64_t bytes_in_use() const { return detail::cpu_buffer_bytes(); }
  template <class T>
  void fill(std::span<T> y, T v) { std::fill(y.begin(), y.end(), v); }

  // ---- BLAS-like ------------------------------------------------------------------------------
  template <class T>
  void gemm(const gemm_desc& g, T alpha, std::span<const T> a, std::span<const T> b, T beta, std::span<T> c) {
    detail::cpu_gemm(g, alpha, a, b, beta, c);
  }
  template <class T>
  void add(std::span<const T> a, std::span<const T> b, std::span<T> y) {
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = a[i] + b[i];
  }
  template <class T>
  void axpy(T alpha, std::span<const T> x, std::span<T> y) {
    for (std::size_t i = 0; i < y.size(); ++i) y[i] += alpha * x[i];
  }
  template <class T>
  void scale(T alpha, std::span<T> y) {
    for (T& v : y) v *= alpha;
  }
  template <class T>
  void permute_0213(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d, std::span<const T> x,
                    std::span<T> y) {
    for (std::int64_t i = 0; i < a; ++i)
      for (std::int64_t j = 0; j < b; ++j)
        for (std::int64_t k = 0; k < c; ++k) {
          const T* src = x.data() + ((i * b + j) * c + k) * d;
          T* dst = y.data() + ((i * c + k) * b + j) * d;
          std::copy(src, src + d, dst);
        }
  }
  template <class T>
  void bias_add(std::int64_t outer, std::int64_t channels, std::int64_t inner, std::span<const T> b, std::span<T> y) {
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t c = 0; c < channels; ++c) {
        T* p = y.data() + (o * channels + c) * inner;
        for (std::int64_t i = 0; i < inner; ++i) p[i] += at(b, c);
      }
  }
  template <class T>
  void bias_grad(std::int64_t outer, std::int64_t channels, std::int64_t inner, std::span<const T> dy, std::span<T> db) {
    std::fill(db.begin(), db.end(), T{});
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t c = 0; c < channels; ++c) {
        const T* p = dy.data() + (o * channels + c) * inner;
        T acc{};
        for (std::int64_t i = 0; i < inner; ++i) acc += p[i];
        at(db, c) += acc;
      }
  }

  // ---- activations --------------------------------------------------------------------------
  template <class T>
  void relu_fwd(std::span<const T> x, std::span<T> y) {
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = detail::keep_if(x[i] > T(0), x[i]);
  }
  template <class T>
  void relu_bwd(std::span<const T> x, std::span<const T> dy, std::span<T> dx) {
    for (std::size_t i = 0; i < dx.size(); ++i) dx[i] = detail::keep_if(x[i] > T(0), dy[i]);
  }
  // GPT-2's GeLU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Hendrycks & Gimpel 2016)
  static constexpr double gelu_c = 0.7978845608028654;  // sqrt(2/pi)
  template <class T>
  void gelu_fwd(std::span<const T> x, std::span<T> y) {
    for (std::size_t i = 0; i < y.size(); ++i) {
      const T v = x[i];
      y[i] = T(0.5) * v * (T(1) + std::tanh(T(gelu_c) * (v + T(0.044715) * v * v * v)));
    }
  }
  template <class T>
  void gelu_bwd(std::span<const T> x, std::span<const T> dy, std::span<T> dx) {
    for (std::size_t i = 0; i < dx.size(); ++i) {
      const T v = x[i];
      const T t = std::tanh(T(gelu_c) * (v + T(0.044715) * v * v * v));
      const T du = T(gelu_c) * (T(1) + T(3 * 0.044715) * v * v);
      dx[i] = dy[i] * (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * du);
    }
  }

  template <class T>
  void silu_fwd(std::span<const T> x, std::span<T> y) {
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = x[i] / (T(1) + std::exp(-x[i]));
  }
  template <class T>
  void silu_bwd(std::span<const T> x, std::span<const T> dy, std::span<T> dx) {
    for (std::size_t i = 0; i < dx.size(); ++i) {
      const T s = T(1) / (T(1) + std::exp(-x[i]));
      dx[i] = dy[i] * s * (T(1) + x[i] * (T(1) - s));
    }
  }
  template <class T>
  void mul(std::span<const T> a, std::span<const T> b, std::span<T> y) {
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = a[i] * b[i];
  }
  /// Rotary embedding of x [b, s, heads, d] whose sequence index j is position pos0 + j: within
  /// each head, element i < d/2 and element i + d/2 turn by pos * theta^(-2i/d) (back where
  /// `inverse`). The angles are taken in double for every T.
  template <class T>
  void rotary(std::int64_t b, std::int64_t s, std::int64_t heads, std::int64_t d, std::int64_t pos0, double theta,
              bool inverse, std::span<const T> x, std::span<T> y) {
    const std::int64_t half = d / 2;
    for (std::int64_t j = 0; j < s; ++j)
      for (std::int64_t i = 0; i < half; ++i) {
        const double angle = double(pos0 + j) * std::pow(theta, -2.0 * double(i) / double(d));
        const T c = T(std::cos(angle)), sn = T(inverse ? -std::sin(angle) : std::sin(angle));
        for (std::int64_t n = 0; n < b; ++n)
          for (std::int64_t h = 0; h < heads; ++h) {
            const std::int64_t o = ((n * s + j) * heads + h) * d;
            const T lo = x[std::size_t(o + i)], hi = x[std::size_t(o + i + half)];
            y[std::size_t(o + i)] = lo * c - hi * sn;
            y[std::size_t(o + i + half)] = hi * c + lo * sn;
          }
      }
  }

  // ---- row-wise -----------------------------------------------------------------------------
  /// RMSNorm of rows x cols: y = x rstd gamma, rstd = 1 / sqrt(mean(x^2) + eps), kept per row.
  template <class T>
  void rmsnorm_fwd(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<const T> gamma, double eps,
                   std::span<T> y, std::span<statistic_t<T>> rstd) {
    detail::statistics_in_element_type<T>();
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* xr = x.data() + r * cols;
      T ms{};
      for (std::int64_t c = 0; c < cols; ++c) ms += xr[c] * xr[c];
      const T rs = T(1) / std::sqrt(ms / T(cols) + T(eps));
      for (std::int64_t c = 0; c < cols; ++c) at(y, r * cols + c) = xr[c] * rs * at(gamma, c);
      at(rstd, r) = rs;
    }
  }
  /// dx = rstd (g - x rstd^2 mean(g x)), g = dy gamma; dgamma = sum over rows of dy x rstd.
  template <class T>
  void rmsnorm_bwd(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<const T> gamma,
                   std::span<const statistic_t<T>> rstd, std::span<const T> dy, std::span<T> dx, std::span<T> dgamma) {
    detail::statistics_in_element_type<T>();
    std::fill(dgamma.begin(), dgamma.end(), T{});
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* xr = x.data() + r * cols;
      const T* dyr = dy.data() + r * cols;
      const T rs = at(rstd, r);
      T gx{};
      for (std::int64_t c = 0; c < cols; ++c) {
        gx += dyr[c] * at(gamma, c) * xr[c];
        at(dgamma, c) += dyr[c] * xr[c] * rs;
      }
      gx /= T(cols);
      for (std::int64_t c = 0; c < cols; ++c) at(dx, r * cols + c) = rs * (dyr[c] * at(gamma, c) - xr[c] * rs * rs * gx);
    }
  }

  static constexpr double layernorm_eps = 1e-5;
  template <class T>
  void layernorm_fwd(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<const T> gamma,
                     std::span<const T> beta, std::span<T> y, std::span<statistic_t<T>> mean,
                     std::span<statistic_t<T>> rstd) {
    detail::statistics_in_element_type<T>();
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* xr = x.data() + r * cols;
      T* yr = y.data() + r * cols;
      T mu{};
      for (std::int64_t c = 0; c < cols; ++c) mu += xr[c];
      mu /= T(cols);
      T var{};
      for (std::int64_t c = 0; c < cols; ++c) var += (xr[c] - mu) * (xr[c] - mu);
      var /= T(cols);
      const T rs = T(1) / std::sqrt(var + T(layernorm_eps));
      for (std::int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mu) * rs * at(gamma, c) + at(beta, c);
      at(mean, r) = mu;
      at(rstd, r) = rs;
    }
  }
  template <class T>
  void layernorm_bwd(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<const T> gamma,
                     std::span<const statistic_t<T>> mean, std::span<const statistic_t<T>> rstd,
                     std::span<const T> dy, std::span<T> dx, std::span<T> dgamma, std::span<T> dbeta) {
    detail::statistics_in_element_type<T>();
    std::fill(dgamma.begin(), dgamma.end(), T{});
    std::fill(dbeta.begin(), dbeta.end(), T{});
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* xr = x.data() + r * cols;
      const T* dyr = dy.data() + r * cols;
      T* dxr = dx.data() + r * cols;
      const T mu = at(mean, r), rs = at(rstd, r);
      T s1{}, s2{};  // mean of dxhat and of dxhat * xhat
      for (std::int64_t c = 0; c < cols; ++c) {
        const T xh = (xr[c] - mu) * rs, g = dyr[c] * at(gamma, c);
        s1 += g;
        s2 += g * xh;
        at(dgamma, c) += dyr[c] * xh;
        at(dbeta, c) += dyr[c];
      }
      s1 /= T(cols);
      s2 /= T(cols);
      for (std::int64_t c = 0; c < cols; ++c) {
        const T xh = (xr[c] - mu) * rs;
        dxr[c] = rs * (dyr[c] * at(gamma, c) - s1 - xh * s2);
      }
    }
  }
  template <class T>
  void softmax_fwd(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<T> y) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* xr = x.data() + r * cols;
      T* yr = y.data() + r * cols;
      T m = -std::numeric_limits<T>::infinity();
      for (std::int64_t c = 0; c < cols; ++c) m = std::max(m, xr[c]);
      T s{};
      for (std::int64_t c = 0; c < cols; ++c) s += (yr[c] = std::exp(xr[c] - m));
      for (std::int64_t c = 0; c < cols; ++c) yr[c] /= s;
    }
  }
  template <class T>
  void softmax_bwd(std::int64_t rows, std::int64_t cols, std::span<const T> y, std::span<const T> dy, std::span<T> dx) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* yr = y.data() + r * cols;
      const T* dyr = dy.data() + r * cols;
      T* dxr = dx.data() + r * cols;
      T dot{};
      for (std::int64_t c = 0; c < cols; ++c) dot += yr[c] * dyr[c];
      for (std::int64_t c = 0; c < cols; ++c) dxr[c] = yr[c] * (dyr[c] - dot);
    }
  }
  template <class T>
  void scale_causal_mask(std::int64_t groups, std::int64_t sq, std::int64_t sk, T scale, std::int64_t q_offset,
                         bool causal, std::span<T> s) {
    const T neg = -std::numeric_limits<T>::infinity();
    for (std::int64_t g = 0; g < groups; ++g)
      for (std::int64_t q = 0; q < sq; ++q) {
        T* row = s.data() + (g * sq + q) * sk;
        for (std::int64_t k = 0; k < sk; ++k) row[k] = causal && k > q_offset + q ? neg : row[k] * scale;
      }
  }

  // ---- embedding ----------------------------------------------------------------------------
  template <class T>
  void gather_rows(std::span<const std::int64_t> ids, std::int64_t lo, std::span<const T> table, std::span<T> y) {
    if (ids.empty()) return;
    const std::int64_t cols = std::int64_t(y.size() / ids.size());
    const std::int64_t held = cols ? std::int64_t(table.size()) / cols : 0;
    for (std::size_t t = 0; t < ids.size(); ++t) {
      T* dst = y.data() + std::int64_t(t) * cols;
      const std::int64_t row = ids[t] - lo;
      if (row >= 0 && row < held) std::copy(table.data() + row * cols, table.data() + (row + 1) * cols, dst);
      else std::fill(dst, dst + cols, T{});
    }
  }
  template <class T>
  void scatter_add_rows(std::span<const std::int64_t> ids, std::int64_t lo, std::span<const T> dy, std::span<T> dtable) {
    if (ids.empty()) return;
    const std::int64_t cols = std::int64_t(dy.size() / ids.size());
    const std::int64_t held = cols ? std::int64_t(dtable.size()) / cols : 0;
    for (std::size_t t = 0; t < ids.size(); ++t) {
      const std::int64_t row = ids[t] - lo;
      if (row < 0 || row >= held) continue;
      const T* src = dy.data() + std::int64_t(t) * cols;
      T* dst = dtable.data() + row * cols;
      for (std::int64_t c = 0; c < cols; ++c) dst[c] += src[c];
    }
  }

  // ---- windows (NCHW) -----------------------------------------------------------------------
  template <class T>
  void im2col(const window_geom& g, std::span<const T> x, std::span<T> col) {
    const std::int64_t oh = g.out_h(), ow = g.out_w(), ncols = g.col_cols();
    for (std::int64_t c = 0; c < g.c; ++c)
      for (int ki = 0; ki < g.kernel; ++ki)
        for (int kj = 0; kj < g.kernel; ++kj) {
          T* row = col.data() + ((c * g.kernel + ki) * g.kernel + kj) * ncols;
          for (std::int64_t n = 0; n < g.n; ++n)
            for (std::int64_t i = 0; i < oh; ++i)
              for (std::int64_t j = 0; j < ow; ++j) {
                const std::int64_t h = i * g.stride - g.padding + ki, w = j * g.stride - g.padding + kj;
                row[(n * oh + i) * ow + j] =
                    h >= 0 && h < g.h && w >= 0 && w < g.w ? at(x, ((n * g.c + c) * g.h + h) * g.w + w) : T{};
              }
        }
  }
  template <class T>
  void col2im(const window_geom& g, std::span<const T> col, std::span<T> dx) {
    std::fill(dx.begin(), dx.end(), T{});
    const std::int64_t oh = g.out_h(), ow = g.out_w(), ncols = g.col_cols();
    for (std::int64_t c = 0; c < g.c; ++c)
      for (int ki = 0; ki < g.kernel; ++ki)
        for (int kj = 0; kj < g.kernel; ++kj) {
          const T* row = col.data() + ((c * g.kernel + ki) * g.kernel + kj) * ncols;
          for (std::int64_t n = 0; n < g.n; ++n)
            for (std::int64_t i = 0; i < oh; ++i)
              for (std::int64_t j = 0; j < ow; ++j) {
                const std::int64_t h = i * g.stride - g.padding + ki, w = j * g.stride - g.padding + kj;
                if (h >= 0 && h < g.h && w >= 0 && w < g.w)
                  at(dx, ((n * g.c + c) * g.h + h) * g.w + w) += row[(n * oh + i) * ow + j];
              }
        }
  }
  template <class T>
  void max_pool_fwd(const window_geom& g, std::span<const T> x, std::span<T> y) {
    pool_visit(g, x, [&](std::int64_t out, std::int64_t arg) { at(y, out) = at(x, arg); });
  }
  template <class T>
  void max_pool_bwd(const window_geom& g, std::span<const T> x, std::span<const T> dy, std::span<T> dx) {
    std::fill(dx.begin(), dx.end(), T{});
    pool_visit(g, x, [&](std::int64_t out, std::int64_t arg) { at(dx, arg) += at(dy, out); });
  }

  // ---- dropout ------------------------------------------------------------------------------
  template <class T>
  void dropout(const dropout_key& key, const shard_info& s, std::span<const T> x, std::span<T> y) {
    const T keep_scale = T(1.0 / (1.0 - key.p));
    detail::for_each_global_index(s, [&](std::int64_t i, std::int64_t g) {
      auto u = std::size_t(i);
      y[u] = detail::keep_if(dropout_keep(key.seed, key.op_id, std::uint64_t(g), key.p), x[u] * keep_scale);
    });
  }

  // ---- softmax cross-entropy ------------------------------------------------------------------
  template <class T>
  void row_max(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<statistic_t<T>> m) {
    detail::statistics_in_element_type<T>();
    for (std::int64_t r = 0; r < rows; ++r) {
      T v = -std::numeric_limits<T>::infinity();
      for (std::int64_t c = 0; c < cols; ++c) v = std::max(v, at(x, r * cols + c));
      at(m, r) = v;
    }
  }
  template <class T>
  void xent_stats(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<const std::int64_t> labels,
                  std::int64_t lo, std::span<const statistic_t<T>> m, std::span<statistic_t<T>> stats) {
    detail::statistics_in_element_type<T>();
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* xr = x.data() + r * cols;
      T s{};
      for (std::int64_t c = 0; c < cols; ++c) s += std::exp(xr[c] - at(m, r));
      const std::int64_t t = at(labels, r) - lo;
      at(stats, r) = s;
      at(stats, rows + r) = t >= 0 && t < cols ? xr[t] : T(0);
    }
  }
  template <class T>
  void xent_loss(std::int64_t rows, std::span<const statistic_t<T>> m, std::span<const statistic_t<T>> stats, T scale,
                 std::span<T> out) {
    detail::statistics_in_element_type<T>();
    T acc{};
    for (std::int64_t r = 0; r < rows; ++r)
      acc += std::log(at(stats, r)) + at(m, r) - at(stats, rows + r);
    out[0] = scale * acc;
  }
  template <class T>
  void xent_bwd(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<const std::int64_t> labels,
                std::int64_t lo, std::span<const statistic_t<T>> m, std::span<const statistic_t<T>> stats,
                std::span<const T> dloss, T scale, std::span<T> dx) {
    detail::statistics_in_element_type<T>();
    const T f = scale * dloss[0];
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* xr = x.data() + r * cols;
      T* dr = dx.data() + r * cols;
      const T inv = T(1) / at(stats, r);
      for (std::int64_t c = 0; c < cols; ++c) dr[c] = f * std::exp(xr[c] - at(m, r)) * inv;
      const std::int64_t t = at(labels, r) - lo;
      if (t >= 0 && t < cols) dr[t] -= f;
    }
  }

  // ---- optimizers ---------------------------------------------------------------------------
  template <class T>
  void sgd_momentum(const optimizer_step& o, std::span<const T> g, std::span<T> vel, std::span<T> p) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      vel[i] = T(o.momentum) * vel[i] + g[i] + T(o.weight_decay) * p[i];
      p[i] -= T(o.lr) * vel[i];
    }
  }
  template <class T>
  void adam(const optimizer_step& o, std::span<const T> g, std::span<T> m, std::span<T> v, std::span<T> p) {
    const double c1 = 1.0 - std::pow(o.beta1, double(o.step)), c2 = 1.0 - std::pow(o.beta2, double(o.step));
    for (std::size_t i = 0; i < p.size(); ++i) {
      const T gi = g[i] + T(o.weight_decay) * p[i];
      m[i] = T(o.beta1) * m[i] + T(1 - o.beta1) * gi;
      v[i] = T(o.beta2) * v[i] + T(1 - o.beta2) * gi * gi;
      p[i] -= T(o.lr) * (m[i] / T(c1)) / (std::sqrt(v[i] / T(c2)) + T(o.eps));
    }
  }

 private:
  /// f(output index, input index of the window's first maximum); padding never wins.
  template <class T, class F>
  static void pool_visit(const window_geom& g, std::span<const T> x, F&& f) {
    const std::int64_t oh = g.out_h(), ow = g.out_w();
    for (std::int64_t nc = 0; nc < g.n * g.c; ++nc)
      for (std::int64_t i = 0; i < oh; ++i)
        for (std::int64_t j = 0; j < ow; ++j) {
          std::int64_t arg = -1;
          for (int ki = 0; ki < g.kernel; ++ki)
            for (int kj = 0; kj < g.kernel; ++kj) {
              const std::int64_t h = i * g.stride - g.padding + ki, w = j * g.stride - g.padding + kj;
              if (h < 0 || h >= g.h || w < 0 || w >= g.w) continue;
              const std::int64_t pos = (nc * g.h + h) * g.w + w;
              if (arg < 0 || at(x, pos) > at(x, arg)) arg = pos;
            }
          if (arg >= 0) f((nc * oh + i) * ow + j, arg);
        }
  }
};

static_assert(Device<cpu_device>, "cpu_device must model autoddl::Device");

}  // namespace autoddl
