#pragma once
// cpu_device: the Device of autoddl/backend/device.hpp on the host. Buffers are std::vector<T>
// with a counting allocator (bytes_in_use is exactly what the device's buffers hold, as
// cudaMallocAsync's pool accounting is on the GPU),
// GEMMs go to CBLAS (OpenBLAS) when present (autoddl/backend/cpu/gemm.hpp), everything else is
// plain loops in the element type. Besides float and double it runs bf16 and fp16
// (half_types.hpp): stored in 16 bits, computed and summed in float, rounded where stored. Single-threaded apart from BLAS: an MPI rank per core.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>  // std::allocator (<memory> and <atomic> would bring POSIX ::link along)
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "autoddl/backend/cpu/attention.hpp"
#include "autoddl/backend/cpu/elementwise.hpp"
#include "autoddl/backend/cpu/gemm.hpp"
#include "autoddl/backend/cpu/half_types.hpp"
#include "autoddl/backend/cpu/moe.hpp"
#include "autoddl/backend/cpu/rowwise.hpp"
#include "autoddl/backend/cpu/window.hpp"
#include "autoddl/backend/device.hpp"
#include "autoddl/error.hpp"
#include "autoddl/index.hpp"
#include "autoddl/text.hpp"

namespace autoddl {

namespace detail {
/// Visits a shard's local blocks of its last dim, whose elements are contiguous in both the local
/// block and the row-major global tensor: f(local index, global index, elements) per block.
template <class F>
void for_each_global_row(const shard_info& s, F&& f) {
  const int r = s.local.rank();
  if (s.local.elements() == 0) return;
  if (r == 0) return f(std::int64_t(0), std::int64_t(0), std::int64_t(1));
  std::array<std::int64_t, max_tensor_rank> stride{}, idx{};
  std::int64_t st = 1;
  for (int d = r - 1; d >= 0; --d) {
    at(stride, d) = st;
    st *= s.global[d];
  }
  std::int64_t g = 0;
  for (int d = 0; d < r; ++d) g += at(s.offset, d) * at(stride, d);
  const std::int64_t len = s.local[r - 1], rows = s.local.elements() / len;
  for (std::int64_t i = 0; i < rows; ++i) {
    f(i * len, g, len);
    for (int d = r - 2; d >= 0; --d) {  // odometer over the local dims but the last
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
/// Visits every element of a shard with its row-major global index: f(local index, global index).
template <class F>
void for_each_global_index(const shard_info& s, F&& f) {
  for_each_global_row(s, [&](std::int64_t i, std::int64_t g, std::int64_t n) {
    for (std::int64_t k = 0; k < n; ++k) f(i + k, g + k);
  });
}

/// 64-bit integer lanes as many as the float lanes V has.
template <class V>
struct index_lanes;
template <>
struct index_lanes<f32x4> {
  using type = std::uint64_t __attribute__((vector_size(32)));
  using signed_type = std::int64_t __attribute__((vector_size(32)));
};
template <>
struct index_lanes<f32x8> {
  using type = std::uint64_t __attribute__((vector_size(64)));
  using signed_type = std::int64_t __attribute__((vector_size(64)));
};
template <>
struct index_lanes<f32x16> {
  using type = std::uint64_t __attribute__((vector_size(128)));
  using signed_type = std::int64_t __attribute__((vector_size(128)));
};
/// keep(first + j) for every lane j, as a lane mask (all ones where kept): the same integer
/// arithmetic as dropout_mask::keep, lane by lane, so the same elements are kept.
template <class V>
[[gnu::always_inline]] inline lane_bits<V> keep_lanes(const dropout_mask& m, std::uint64_t first) {
  using U = typename index_lanes<V>::type;
  using I = typename index_lanes<V>::signed_type;
  U z{};
  for (std::size_t j = 0; j < lane_count<V>; ++j) z[j] = j;  // a constant
  z = (z + first) ^ m.base;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  // (z >> 11) >= threshold, both below 2^53: their difference's top bit is clear exactly where it
  // holds, and (top bit - 1) is then all ones (GCC leaves a vector comparison of 64-bit lanes to
  // scalar code; this arithmetic stays in the lanes)
  const U keep = (((z >> 11) - m.threshold) >> 63) - 1;
  return reinterpret_cast<lane_bits<V>>(__builtin_convertvector(reinterpret_cast<I>(keep), lane_bits<V>));
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
/// The most cpu_buffer_bytes has been on this thread since the last reset_peak_bytes_in_use.
inline std::int64_t& cpu_buffer_peak() {
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
    cpu_buffer_peak() = std::max(cpu_buffer_peak(), cpu_buffer_bytes());
    return p;
  }
  void deallocate(T* p, std::size_t n) noexcept {
    cpu_buffer_bytes() -= std::int64_t(n * sizeof(T));
    std::allocator<T>{}.deallocate(p, n);
  }
  /// Default-initialises (no value for an arithmetic T): cpu_device::alloc zeroes a new buffer in
  /// one pass, which a vector's element-by-element value-initialisation through an allocator is not.
  template <class U>
  void construct(U* p) noexcept(noexcept(::new (static_cast<void*>(p)) U)) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... A>
  void construct(U* p, A&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(args)...);
  }
  template <class U>
  friend constexpr bool operator==(const counted_allocator&, const counted_allocator<U>&) noexcept {
    return true;
  }
};
}  // namespace detail

// The element-wise, row-wise, window, mixture-of-experts and fused attention primitives:
// backend/cpu/elementwise.hpp, rowwise.hpp, window.hpp, moe.hpp and attention.hpp.
struct cpu_device : cpu_elementwise_primitives, cpu_rowwise_primitives, cpu_window_primitives, cpu_moe_primitives,
                    cpu_attention_primitives {
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
  buffer<T> alloc(std::size_t n) {
    buffer<T> b(n);  // default-initialised by counted_allocator::construct, then zeroed in one pass
    std::fill(b.begin(), b.end(), T{});
    return b;
  }
  /// n elements of unspecified value, for a kernel that writes every one before it reads any
  /// (runtime/kernels/context.hpp, alloc_for_overwrite).
  template <class T>
  buffer<T> alloc_for_overwrite(std::size_t n) { return buffer<T>(n); }
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
  /// y[i] = x[i] in y's element type: rounded to nearest even into a 16-bit type, exact out of one.
  template <class From, class To>
  void convert(std::span<const From> x, std::span<To> y) {
    std::transform(x.begin(), x.end(), y.begin(), [](const From& v) { return To(v); });
  }
  template <class T>
  bool all_finite(std::span<const T> x) const {
    // sum of x * 0 is 0 unless some x is NaN or Inf: one branch-free pass
    compute_type_t<T> acc{};
    for (const T& v : x) acc += v * T(0);
    return acc == T(0);
  }
  void synchronize() const {}
  /// The bytes the cpu_device buffers of this thread hold now (counted by their allocator; host
  /// vectors beside them, kernel contexts and schedules, are not device memory).
  std::int64_t bytes_in_use() const { return detail::cpu_buffer_bytes(); }
  /// The most bytes_in_use has been since the last reset_peak_bytes_in_use (allocations inside a
  /// primitive or a kernel included, which sampling bytes_in_use between calls misses).
  std::int64_t peak_bytes_in_use() const { return detail::cpu_buffer_peak(); }
  void reset_peak_bytes_in_use() { detail::cpu_buffer_peak() = detail::cpu_buffer_bytes(); }
  template <class T>
  void fill(std::span<T> y, T v) { std::fill(y.begin(), y.end(), v); }

  // ---- BLAS-like ------------------------------------------------------------------------------
  template <class T>
  void gemm(const gemm_desc& g, T alpha, std::span<const T> a, std::span<const T> b, T beta, std::span<T> c) {
    detail::cpu_gemm(g, alpha, a, b, beta, c);
  }
  template <class T>
  void permute_0213(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d, std::span<const T> x,
                    std::span<T> y) {
    for (std::int64_t i = 0; i < a; ++i)
      for (std::int64_t j = 0; j < b; ++j)
        for (std::int64_t k = 0; k < c; ++k) {
          const T* src = x.data() + ((i * b + j) * c + k) * d;
          T* dst = y.data() + ((i * c + k) * b + j) * d;
          if (d >= 16) std::memcpy(dst, src, std::size_t(d) * sizeof(T));  // a call pays from a cache line on
          else for (std::int64_t e = 0; e < d; ++e) dst[e] = src[e];    // d is often 2..64
        }
  }
  /// y[o, c, i] += b[c]; float runs in the CPU's widest lanes.
  template <class T>
  void bias_add(std::int64_t outer, std::int64_t channels, std::int64_t inner, std::span<const T> b, std::span<T> y) {
    const T* pb = b.data();
    if constexpr (std::is_same_v<T, float>) {
      return detail::with_float_lanes([&]<class V>() __attribute__((always_inline)) {
        for (std::int64_t o = 0; o < outer; ++o) {
          float* row = y.data() + o * channels * inner;
          if (inner == 1) {  // a linear's rows
            detail::map_lanes<V>(row, pb, row, std::size_t(channels),
                                 [](const V& u, const V& v) __attribute__((always_inline)) { return u + v; });
            continue;
          }
          for (std::int64_t c = 0; c < channels; ++c) {
            const float bc = pb[c];
            detail::map_lanes<V>(row + c * inner, row + c * inner, std::size_t(inner),
                                 [bc](const V& u) __attribute__((always_inline)) { return u + bc; });
          }
        }
      });
    }
    for (std::int64_t o = 0; o < outer; ++o) {
      T* row = y.data() + o * channels * inner;
      if (inner == 1) {  // a linear's rows
        for (std::int64_t c = 0; c < channels; ++c) row[c] += pb[c];
        continue;
      }
      for (std::int64_t c = 0; c < channels; ++c) {
        T* p = row + c * inner;
        const compute_type_t<T> bc = pb[c];
        for (std::int64_t i = 0; i < inner; ++i) p[i] += bc;
      }
    }
  }
  /// db[c] = the sum of dy[o, c, i] over o and i; float sums each (o, c) run in lanes.
  template <class T>
  void bias_grad(std::int64_t outer, std::int64_t channels, std::int64_t inner, std::span<const T> dy, std::span<T> db) {
    std::fill(db.begin(), db.end(), T{});
    T* pdb = db.data();
    if constexpr (std::is_same_v<T, float>) {
      return detail::with_float_lanes([&]<class V>() __attribute__((always_inline)) {
        for (std::int64_t o = 0; o < outer; ++o) {
          const float* row = dy.data() + o * channels * inner;
          if (inner == 1) {  // a linear's rows
            detail::map_lanes<V>(pdb, row, pdb, std::size_t(channels),
                                 [](const V& u, const V& v) __attribute__((always_inline)) { return u + v; });
            continue;
          }
          for (std::int64_t c = 0; c < channels; ++c) pdb[c] += detail::sum_lanes<V>(row + c * inner, std::size_t(inner));
        }
      });
    }
    for (std::int64_t o = 0; o < outer; ++o) {
      const T* row = dy.data() + o * channels * inner;
      if (inner == 1) {  // a linear's rows
        for (std::int64_t c = 0; c < channels; ++c) pdb[c] += row[c];
        continue;
      }
      for (std::int64_t c = 0; c < channels; ++c) {
        const T* p = row + c * inner;
        compute_type_t<T> acc{};
        for (std::int64_t i = 0; i < inner; ++i) acc += p[i];
        pdb[c] += acc;
      }
    }
  }

  // ---- rotary ---------------------------------------------------------------------------------
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
        const compute_type_t<T> c = T(std::cos(angle)), sn = T(inverse ? -std::sin(angle) : std::sin(angle));
        for (std::int64_t n = 0; n < b; ++n)
          for (std::int64_t h = 0; h < heads; ++h) {
            const std::int64_t o = ((n * s + j) * heads + h) * d;
            const compute_type_t<T> lo = x[std::size_t(o + i)], hi = x[std::size_t(o + i + half)];
            y[std::size_t(o + i)] = lo * c - hi * sn;
            y[std::size_t(o + i + half)] = hi * c + lo * sn;
          }
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

  // ---- dropout ------------------------------------------------------------------------------
  template <class T>
  void dropout(const dropout_key& key, const shard_info& s, std::span<const T> x, std::span<T> y) {
    const compute_type_t<T> keep_scale = T(1.0 / (1.0 - key.p));
    const detail::dropout_mask mask(key);
    const T* px = x.data();
    T* py = y.data();
    if constexpr (std::is_same_v<T, float>) {  // the hash and the select in lanes, one row at a time
      return detail::for_each_global_row(s, [&](std::int64_t i, std::int64_t g, std::int64_t n) {
        detail::with_float_lanes([&]<class V>() __attribute__((always_inline)) {
          detail::for_lane_blocks<V>(std::size_t(n), [&](std::size_t k, std::size_t cnt) __attribute__((always_inline)) {
            const V v = detail::load_n<V>(px + i + std::int64_t(k), cnt) * keep_scale;
            const auto keep = detail::keep_lanes<V>(mask, std::uint64_t(g) + k);
            detail::store_n<V>(py + i + std::int64_t(k), detail::select_lanes<V>(keep, v, V{}), cnt);
          });
        });
      });
    }
    detail::for_each_global_row(s, [&](std::int64_t i, std::int64_t g, std::int64_t n) {
      for (std::int64_t k = 0; k < n; ++k)
        py[i + k] = detail::keep_if(mask.keep(std::uint64_t(g + k)), px[i + k] * keep_scale);
    });
  }
};

static_assert(Device<cpu_device>, "cpu_device must model autoddl::Device");
static_assert(DeviceFor<cpu_device, bf16> && DeviceFor<cpu_device, fp16>,
              "cpu_device must run every primitive in the 16-bit storage types");

}  // namespace autoddl
