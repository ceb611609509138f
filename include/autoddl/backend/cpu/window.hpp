#pragma once
// The window primitives of the CPU device on NCHW images (their contracts: backend/device.hpp):
// im2col and its adjoint col2im for conv2d, max-pool forward and backward. Loops run over raw
// pointers once the spans' sizes are checked (a build with _GLIBCXX_ASSERTIONS checks every
// span index, which keeps a loop from vectorising); stride-1 windows read a zero-padded copy of
// the images, and the 2x2 stride-2 pool without padding (VGG's) has a loop of its own.
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "autoddl/backend/cpu/dnnl_conv.hpp"
#include "autoddl/backend/device.hpp"
#include "autoddl/error.hpp"
#include "autoddl/text.hpp"

namespace autoddl {

/// The CPU device's window primitives (cpu_device derives from it).
struct cpu_window_primitives {
  /// A whole convolution in one call where the build has a direct kernel for it (oneDNN, float,
  /// backend/cpu/dnnl_conv.hpp): y = conv(x, w) + b (b empty: none); false, nothing written, where
  /// it has none and the caller goes through im2col and a GEMM.
  template <class T>
  bool conv_fwd_direct(const window_geom& g, std::int64_t o, std::span<const T> x, std::span<const T> w,
                       std::span<const T> b, std::span<T> y) {
    if constexpr (!std::is_same_v<T, float>) return false;
    else {
      if (!detail::dnnl_conv_wanted(g)) return false;
      check_conv(g, o, x.size(), w.size(), y.size(), "conv_fwd_direct");
      return detail::dnnl_conv_fwd(g, o, x.data(), w.data(), b.empty() ? nullptr : b.data(), y.data());
    }
  }
  /// dx of y = conv(x, w) given dy, where conv_fwd_direct runs the geometry; false otherwise.
  template <class T>
  bool conv_bwd_data_direct(const window_geom& g, std::int64_t o, std::span<const T> w, std::span<const T> dy,
                            std::span<T> dx) {
    if constexpr (!std::is_same_v<T, float>) return false;
    else {
      if (!detail::dnnl_conv_wanted(g)) return false;
      check_conv(g, o, dx.size(), w.size(), dy.size(), "conv_bwd_data_direct");
      return detail::dnnl_conv_bwd_data(g, o, w.data(), dy.data(), dx.data());
    }
  }
  /// dw (and db, unless empty) of y = conv(x, w) + b given dy, overwritten, where conv_fwd_direct
  /// runs the geometry; false otherwise.
  template <class T>
  bool conv_bwd_weights_direct(const window_geom& g, std::int64_t o, std::span<const T> x, std::span<const T> dy,
                               std::span<T> dw, std::span<T> db) {
    if constexpr (!std::is_same_v<T, float>) return false;
    else {
      if (!detail::dnnl_conv_wanted(g)) return false;
      check_conv(g, o, x.size(), dw.size(), dy.size(), "conv_bwd_weights_direct");
      return detail::dnnl_conv_bwd_weights(g, o, x.data(), dy.data(), dw.data(), db.empty() ? nullptr : db.data());
    }
  }

  /// col [C k k, N oh ow]: row (c, ki, kj) holds x[n, c, i stride - padding + ki, j stride -
  /// padding + kj] at column (n, i, j), zeros where that falls in the padding.
  template <class T>
  void im2col(const window_geom& g, std::span<const T> x, std::span<T> col) {
    check_size(g.n * g.c * g.h * g.w, x.size(), "im2col: x");
    check_size(g.col_rows() * g.col_cols(), col.size(), "im2col: col");
    if (g.stride == 1) return im2col_stride1(g, x.data(), col.data());
    const std::int64_t oh = g.out_h(), ow = g.out_w(), ncols = g.col_cols();
    for (std::int64_t c = 0; c < g.c; ++c)
      for (int ki = 0; ki < g.kernel; ++ki)
        for (int kj = 0; kj < g.kernel; ++kj) {
          T* row = col.data() + ((c * g.kernel + ki) * g.kernel + kj) * ncols;
          for (std::int64_t n = 0; n < g.n; ++n)
            window_plane(g, ki, kj, x.data() + (n * g.c + c) * g.h * g.w, row + n * oh * ow);
        }
  }
  /// The adjoint of im2col: every column entry added back to the input element it was read from.
  template <class T>
  void col2im(const window_geom& g, std::span<const T> col, std::span<T> dx) {
    check_size(g.col_rows() * g.col_cols(), col.size(), "col2im: col");
    check_size(g.n * g.c * g.h * g.w, dx.size(), "col2im: dx");
    if (g.stride == 1) return col2im_stride1(g, col.data(), dx.data());
    std::fill(dx.begin(), dx.end(), T{});
    const std::int64_t oh = g.out_h(), ow = g.out_w(), ncols = g.col_cols();
    T* pdx = dx.data();
    for (std::int64_t c = 0; c < g.c; ++c)
      for (int ki = 0; ki < g.kernel; ++ki)
        for (int kj = 0; kj < g.kernel; ++kj) {
          const T* row = col.data() + ((c * g.kernel + ki) * g.kernel + kj) * ncols;
          const auto [j0, j1] = inside_window(g, kj, ow);
          for (std::int64_t n = 0; n < g.n; ++n)
            for (std::int64_t i = 0; i < oh; ++i) {
              const std::int64_t h = i * g.stride - g.padding + ki;
              if (h < 0 || h >= g.h) continue;
              const T* src = row + (n * oh + i) * ow;
              T* out = pdx + ((n * g.c + c) * g.h + h) * g.w;
              for (std::int64_t j = j0; j < j1; ++j) out[j * g.stride - g.padding + kj] += src[j];
            }
        }
  }
  template <class T>
  void max_pool_fwd(const window_geom& g, std::span<const T> x, std::span<T> y) {
    check_size(g.n * g.c * g.h * g.w, x.size(), "max_pool_fwd: x");
    check_size(g.n * g.c * g.out_h() * g.out_w(), y.size(), "max_pool_fwd: y");
    T* py = y.data();
    pool_visit(g, x.data(), [py](std::int64_t out, std::int64_t, T best) { py[out] = best; });
  }
  template <class T>
  void max_pool_bwd(const window_geom& g, std::span<const T> x, std::span<const T> dy, std::span<T> dx) {
    check_size(g.n * g.c * g.h * g.w, x.size(), "max_pool_bwd: x");
    check_size(g.n * g.c * g.out_h() * g.out_w(), dy.size(), "max_pool_bwd: dy");
    check_size(g.n * g.c * g.h * g.w, dx.size(), "max_pool_bwd: dx");
    std::fill(dx.begin(), dx.end(), T{});
    const T* pdy = dy.data();
    T* pdx = dx.data();
    pool_visit(g, x.data(), [pdy, pdx](std::int64_t out, std::int64_t arg, T) { pdx[arg] += pdy[out]; });
  }

 private:
  static void check_conv(const window_geom& g, std::int64_t o, std::size_t x, std::size_t w, std::size_t y, const char* what) {
    check_size(g.n * g.c * g.h * g.w, x, (std::string(what) + ": x").c_str());
    check_size(o * g.c * g.kernel * g.kernel, w, (std::string(what) + ": w").c_str());
    check_size(g.n * o * g.out_h() * g.out_w(), y, (std::string(what) + ": y").c_str());
  }
  static void check_size(std::int64_t want, std::size_t have, const char* what) {
    if (std::int64_t(have) < want)
      detail::fail<error>(std::string(what) + " holds " + detail::itos(std::int64_t(have)) +
                          " elements where the window needs " + detail::itos(want));
  }
  /// One image's plane of im2col row (ki, kj), out[i, j] = in[i stride - padding + ki, j stride -
  /// padding + kj] or 0 outside the image, row by row.
  template <class T>
  static void window_plane(const window_geom& g, int ki, int kj, const T* in, T* out) {
    const std::int64_t oh = g.out_h(), ow = g.out_w();
    const auto [j0, j1] = inside_window(g, kj, ow);
    for (std::int64_t i = 0; i < oh; ++i, out += ow) {
      const std::int64_t h = i * g.stride - g.padding + ki;
      if (h < 0 || h >= g.h) {
        std::fill(out, out + ow, T{});
        continue;
      }
      const T* src = in + h * g.w - g.padding + kj;
      std::fill(out, out + j0, T{});
      for (std::int64_t j = j0; j < j1; ++j) out[j] = src[j * g.stride];
      std::fill(out + j1, out + ow, T{});
    }
  }
  /// f(width) with width() a compile-time constant for the image widths VGG's stages have (2..32),
  /// so the row loops unroll; other widths get a run-time width().
  template <class F>
  static void with_width(std::int64_t w, F&& f) {
    switch (w) {
      case 2: return f(std::integral_constant<std::int64_t, 2>{});
      case 4: return f(std::integral_constant<std::int64_t, 4>{});
      case 8: return f(std::integral_constant<std::int64_t, 8>{});
      case 16: return f(std::integral_constant<std::int64_t, 16>{});
      case 32: return f(std::integral_constant<std::int64_t, 32>{});
      default: return f([w] { return w; });
    }
  }
  /// im2col at stride 1 through a zero-padded copy of x [N, C, h + 2 padding, w + 2 padding]: every
  /// output row is then a run of the padded row, with no bounds to test (images of 2x2..32x32
  /// have rows too short for per-row bounds and fills to pay off).
  template <class T>
  static void im2col_stride1(const window_geom& g, const T* x, T* col) {
    const std::int64_t hp = g.h + 2 * g.padding, wp = g.w + 2 * g.padding, oh = g.out_h(), ow = g.out_w();
    std::vector<T> xp(std::size_t(g.n * g.c * hp * wp), T{});
    for (std::int64_t nc = 0; nc < g.n * g.c; ++nc)
      for (std::int64_t i = 0; i < g.h; ++i) {
        const T* src = x + (nc * g.h + i) * g.w;
        T* dst = xp.data() + (nc * hp + i + g.padding) * wp + g.padding;
        for (std::int64_t j = 0; j < g.w; ++j) dst[j] = src[j];
      }
    T* out = col;
    for (std::int64_t c = 0; c < g.c; ++c)
      for (int ki = 0; ki < g.kernel; ++ki)
        for (int kj = 0; kj < g.kernel; ++kj)
          for (std::int64_t n = 0; n < g.n; ++n, out += oh * ow)
            with_width(ow, [&](auto width) {
              const T* src = xp.data() + ((n * g.c + c) * hp + ki) * wp + kj;
              for (std::int64_t i = 0; i < oh; ++i)
                for (std::int64_t j = 0; j < width(); ++j) out[i * width() + j] = src[i * wp + j];
            });
  }
  /// col2im at stride 1: the runs im2col_stride1 reads, added into a zero-padded dx, whose interior
  /// is then dx.
  template <class T>
  static void col2im_stride1(const window_geom& g, const T* col, T* dx) {
    const std::int64_t hp = g.h + 2 * g.padding, wp = g.w + 2 * g.padding, oh = g.out_h(), ow = g.out_w();
    std::vector<T> dxp(std::size_t(g.n * g.c * hp * wp), T{});
    const T* in = col;
    for (std::int64_t c = 0; c < g.c; ++c)
      for (int ki = 0; ki < g.kernel; ++ki)
        for (int kj = 0; kj < g.kernel; ++kj)
          for (std::int64_t n = 0; n < g.n; ++n, in += oh * ow)
            with_width(ow, [&](auto width) {
              T* dst = dxp.data() + ((n * g.c + c) * hp + ki) * wp + kj;
              for (std::int64_t i = 0; i < oh; ++i)
                for (std::int64_t j = 0; j < width(); ++j) dst[i * wp + j] += in[i * width() + j];
            });
    for (std::int64_t nc = 0; nc < g.n * g.c; ++nc)
      for (std::int64_t i = 0; i < g.h; ++i) {
        const T* src = dxp.data() + (nc * hp + i + g.padding) * wp + g.padding;
        T* dst = dx + (nc * g.h + i) * g.w;
        for (std::int64_t j = 0; j < g.w; ++j) dst[j] = src[j];
      }
  }
  /// The output columns [j0, j1) whose window column kj falls inside the image: 0 <= j stride -
  /// padding + kj < w.
  static std::pair<std::int64_t, std::int64_t> inside_window(const window_geom& g, int kj, std::int64_t ow) {
    std::int64_t j0 = 0, j1 = ow;
    while (j0 < ow && j0 * g.stride - g.padding + kj < 0) ++j0;
    while (j1 > j0 && (j1 - 1) * g.stride - g.padding + kj >= g.w) --j1;
    return {j0, j1};
  }
  /// f(output index, input index of the window's first maximum in row-major window order, that
  /// maximum); padding never wins.
  template <class T, class F>
  static void pool_visit(const window_geom& g, const T* px, F&& f) {
    const std::int64_t oh = g.out_h(), ow = g.out_w();
    if (g.padding == 0 && g.kernel == 2 && g.stride == 2) {  // VGG's pool: (0,0) (0,1) (1,0) (1,1)
      for (std::int64_t nc = 0; nc < g.n * g.c; ++nc)
        for (std::int64_t i = 0; i < oh; ++i) {
          const std::int64_t r0 = (nc * g.h + 2 * i) * g.w, r1 = r0 + g.w, out = (nc * oh + i) * ow;
          for (std::int64_t j = 0; j < ow; ++j) {
            std::int64_t arg = r0 + 2 * j;
            T best = px[arg];
            for (const std::int64_t pos : {r0 + 2 * j + 1, r1 + 2 * j, r1 + 2 * j + 1}) {
              const bool more = px[pos] > best;  // selects, not a branch: after a ReLU, which wins is a coin toss
              best = more ? px[pos] : best;
              arg = more ? pos : arg;
            }
            f(out + j, arg, best);
          }
        }
      return;
    }
    pool_visit_general(g, px, f);
  }
  template <class T, class F>
  static void pool_visit_general(const window_geom& g, const T* px, F& f) {
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
              if (arg < 0 || px[pos] > px[arg]) arg = pos;
            }
          if (arg >= 0) f((nc * oh + i) * ow + j, arg, px[arg]);
        }
  }
};

}  // namespace autoddl
