#pragma once
// SwiGLU experts on rows grouped by expert: rows [off_l, off_l + n_l) of X belong to local expert
// l (n_l may be 0), and each expert runs one GEMM per matrix on exactly its rows, where no grouped
// GEMM exists (the dropless layers: kernels/routed_experts.hpp, runtime/dropless_moe.hpp).
//   forward   a = X W_gate, u = X W_up (both kept), Y = (silu(a) u) W_down
//   backward  m = silu(a) u; dW_down = m^T dY; dm = dY W_down^T; du = dm silu(a);
//             da = silu'(a) (dm u); dW_gate = X^T da, dW_up = X^T du; dX = da W_gate^T + du W_up^T
// An expert without rows leaves its weight gradients 0.
#include <cstdint>
#include <span>
#include <vector>

#include "autoddl/runtime/kernels/context.hpp"

namespace autoddl {

/// The local experts' weights: W_gate, W_up [E_l, h, F] and W_down [E_l, F, h].
template <class T>
struct dropless_weights {
  std::span<const T> w_gate, w_up, w_down;
};

namespace detail {

/// The block of expert l among rows grouped by expert: rows [off, off + n) of width w.
template <class T>
std::span<T> group_block(std::span<T> v, std::int64_t off, std::int64_t n, std::int64_t w) {
  return v.subspan(std::size_t(off * w), std::size_t(n * w));
}

/// Calls f(l, offset, rows) for every local expert with rows, in order.
template <class F>
void for_each_group(const std::vector<std::int64_t>& group_rows, F&& f) {
  std::int64_t off = 0;
  for (std::size_t l = 0; l < group_rows.size(); off += group_rows[l], ++l)
    if (group_rows[l] > 0) f(l, off, group_rows[l]);
}

/// Forward of the grouped experts: a, u [rows, f] and y [rows, h] written.
template <class T, class D>
void grouped_swiglu_fwd(D& d, const std::vector<std::int64_t>& group_rows, std::int64_t h, std::int64_t f,
                        std::span<const T> x, dropless_weights<T> w, std::span<T> a, std::span<T> u, std::span<T> y) {
  const std::size_t wsize = std::size_t(h * f);
  for_each_group(group_rows, [&](std::size_t l, std::int64_t off, std::int64_t n) {
    const gemm_desc up{false, false, n, f, h, h, f, f};
    d.gemm(up, T(1), group_block(x, off, n, h), w.w_gate.subspan(l * wsize, wsize), T(0), group_block(a, off, n, f));
    d.gemm(up, T(1), group_block(x, off, n, h), w.w_up.subspan(l * wsize, wsize), T(0), group_block(u, off, n, f));
  });
  if (a.empty()) return;
  buffer_t<D, T> m = d.template alloc<T>(a.size());
  d.silu_fwd(std::span<const T>(a), d.view(m));
  d.mul(cview<T>(d, m), std::span<const T>(u), d.view(m));
  for_each_group(group_rows, [&](std::size_t l, std::int64_t off, std::int64_t n) {
    d.gemm(gemm_desc{false, false, n, h, f, f, h, h}, T(1), group_block(cview<T>(d, m), off, n, f),
           w.w_down.subspan(l * wsize, wsize), T(0), group_block(y, off, n, h));
  });
}

/// The gradients a grouped backward writes: dX [rows, h] and the local experts' dW.
template <class T>
struct grouped_grads {
  std::span<T> dx, dw_gate, dw_up, dw_down;
};

/// Backward of the grouped experts from dY [rows, h], with the forward's x, a and u.
template <class T, class D>
void grouped_swiglu_bwd(D& d, const std::vector<std::int64_t>& group_rows, std::int64_t h, std::int64_t f,
                        std::span<const T> x, std::span<const T> a, std::span<const T> u, std::span<const T> dy,
                        dropless_weights<T> w, grouped_grads<T> g) {
  if (a.empty()) return;
  const std::size_t rf = a.size(), wsize = std::size_t(h * f);
  buffer_t<D, T> s = d.template alloc<T>(rf), m = d.template alloc<T>(rf), dm = d.template alloc<T>(rf),
                 du = d.template alloc<T>(rf);
  d.silu_fwd(a, d.view(s));
  d.mul(cview<T>(d, s), u, d.view(m));
  for_each_group(group_rows, [&](std::size_t l, std::int64_t off, std::int64_t n) {  // dW_down and dm
    d.gemm(gemm_desc{true, false, f, h, n, f, h, h}, T(1), group_block(cview<T>(d, m), off, n, f), group_block(dy, off, n, h),
           T(0), g.dw_down.subspan(l * wsize, wsize));
    d.gemm(gemm_desc{false, true, n, f, h, h, h, f}, T(1), group_block(dy, off, n, h), w.w_down.subspan(l * wsize, wsize), T(0),
           group_block(d.view(dm), off, n, f));
  });
  d.mul(cview<T>(d, dm), cview<T>(d, s), d.view(du));
  d.mul(cview<T>(d, dm), u, d.view(m));
  d.silu_bwd(a, cview<T>(d, m), d.view(s));  // s becomes da
  for_each_group(group_rows, [&](std::size_t l, std::int64_t off, std::int64_t n) {  // dW_gate, dW_up and dX
    const auto xl = group_block(x, off, n, h);
    const auto dal = group_block(cview<T>(d, s), off, n, f), dul = group_block(cview<T>(d, du), off, n, f);
    const gemm_desc dw{true, false, h, f, n, h, f, f}, dx{false, true, n, h, f, f, f, h};
    d.gemm(dw, T(1), xl, dal, T(0), g.dw_gate.subspan(l * wsize, wsize));
    d.gemm(dw, T(1), xl, dul, T(0), g.dw_up.subspan(l * wsize, wsize));
    d.gemm(dx, T(1), dal, w.w_gate.subspan(l * wsize, wsize), T(0), group_block(g.dx, off, n, h));
    d.gemm(dx, T(1), dul, w.w_up.subspan(l * wsize, wsize), T(1), group_block(g.dx, off, n, h));
  });
}

}  // namespace detail
}  // namespace autoddl
