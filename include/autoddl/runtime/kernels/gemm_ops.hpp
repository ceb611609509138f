#pragma once
// Kernels of the GEMM family on local shards: linear (bias, transpose_w), matmul, batched matmul,
// conv2d (a device's whole-convolution calls, else im2col + one GEMM). Each computes the local product; under a
// contraction split the result is a partial sum (Y[P]), which is what the signature says.
//   linear:  Y = X W + b  (W [in,out]) or X W^T + b (transpose_w, W [out,in])
//            dX = dY W^T (or dY W), dW = X^T dY (or dY^T X), db = sum_rows dY
#include <span>

#include "autoddl/runtime/kernels/context.hpp"

namespace autoddl::detail {

template <class T, class D>
forward_result<D, T> linear_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  const bool tw = c.op.kind == op_kind::linear && c.op.attrs.transpose_w;
  const bool bias = c.op.kind == op_kind::linear && c.op.attrs.bias;
  const tensor_shape& xs = c.shards.inputs[0].local;
  const tensor_shape& ws = c.op.kind == op_kind::linear ? c.shards.params[0].local : c.shards.inputs[1].local;
  std::span<const T> w = c.op.kind == op_kind::linear ? in.params[0] : in.inputs[1];
  const std::int64_t k = last_dim(xs), m = rows_of(xs), n = tw ? ws[0] : ws[1];
  forward_result<D, T> r;
  r.outputs.push_back(alloc_for_overwrite<T>(d, std::size_t(c.shards.outputs[0].local.elements())));  // the GEMM writes it all
  std::span<T> y = d.view(r.outputs[0]);
  d.gemm(gemm_desc{false, tw, m, n, k, k, tw ? k : n, n}, T(1), in.inputs[0], w, T(0), y);
  if (bias) d.bias_add(m, n, std::int64_t(1), in.params[1], y);
  return r;
}

template <class T, class D>
gradients<D, T> linear_bwd(D& d, const kernel_context<T>& c, const operands<T>& in, std::span<const T> dy) {
  const bool lin = c.op.kind == op_kind::linear;
  const bool tw = lin && c.op.attrs.transpose_w;
  const tensor_shape& xs = c.shards.inputs[0].local;
  const shard_info& wsh = lin ? c.shards.params[0] : c.shards.inputs[1];
  std::span<const T> x = in.inputs[0], w = lin ? in.params[0] : in.inputs[1];
  const std::int64_t k = last_dim(xs), m = rows_of(xs), n = tw ? wsh.local[0] : wsh.local[1];
  gradients<D, T> g;
  if (c.wants_input_grad(0)) {
    g.inputs.push_back(alloc_for_overwrite<T>(d, std::size_t(c.shards.inputs[0].local.elements())));
    d.gemm(gemm_desc{false, !tw, m, k, n, n, tw ? k : n, k}, T(1), dy, w, T(0), d.view(g.inputs[0]));
  } else {
    g.inputs.push_back(d.template alloc<T>(0));
  }
  buffer_t<D, T> dw = alloc_for_overwrite<T>(d, std::size_t(wsh.local.elements()));
  if (!tw) d.gemm(gemm_desc{true, false, k, n, m, k, n, n}, T(1), x, dy, T(0), d.view(dw));
  else d.gemm(gemm_desc{true, false, n, k, m, n, k, k}, T(1), dy, x, T(0), d.view(dw));
  if (!lin) {
    g.inputs.push_back(std::move(dw));
    return g;
  }
  g.params.push_back(std::move(dw));
  if (c.op.attrs.bias) {
    g.params.push_back(alloc_like<T>(d, c.shards.params[1]));
    d.bias_grad(m, n, std::int64_t(1), dy, d.view(g.params[1]));
  }
  return g;
}

/// A [..., m, k] x B [..., k, n]: one strided batched GEMM over the leading dims.
template <class T, class D>
forward_result<D, T> batched_matmul_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  const tensor_shape& as = c.shards.inputs[0].local;
  const tensor_shape& bs = c.shards.inputs[1].local;
  const int r = as.rank();
  const std::int64_t m = as[r - 2], k = as[r - 1], n = bs[r - 1], batch = leading_elements(as, 2);
  forward_result<D, T> res;
  res.outputs.push_back(alloc_for_overwrite<T>(d, std::size_t(c.shards.outputs[0].local.elements())));
  d.gemm(gemm_desc{false, false, m, n, k, k, n, n, batch, m * k, k * n, m * n}, T(1), in.inputs[0], in.inputs[1], T(0),
         d.view(res.outputs[0]));
  return res;
}

template <class T, class D>
gradients<D, T> batched_matmul_bwd(D& d, const kernel_context<T>& c, const operands<T>& in, std::span<const T> dy) {
  const tensor_shape& as = c.shards.inputs[0].local;
  const tensor_shape& bs = c.shards.inputs[1].local;
  const int r = as.rank();
  const std::int64_t m = as[r - 2], k = as[r - 1], n = bs[r - 1], batch = leading_elements(as, 2);
  gradients<D, T> g;
  g.inputs.push_back(alloc_for_overwrite<T>(d, std::size_t(c.shards.inputs[0].local.elements())));
  g.inputs.push_back(alloc_for_overwrite<T>(d, std::size_t(c.shards.inputs[1].local.elements())));
  d.gemm(gemm_desc{false, true, m, k, n, n, n, k, batch, m * n, k * n, m * k}, T(1), dy, in.inputs[1], T(0),
         d.view(g.inputs[0]));
  d.gemm(gemm_desc{true, false, k, n, m, k, n, n, batch, m * k, m * n, k * n}, T(1), in.inputs[0], dy, T(0),
         d.view(g.inputs[1]));
  return g;
}

/// conv2d: col [C k k, N oh ow] = im2col(X); Y' [O, N oh ow] = W col; Y = Y' as [N, O, oh ow] + b.
template <class T, class D>
forward_result<D, T> conv2d_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  const window_geom g = local_window(c);
  const std::int64_t o = c.shards.params[0].local[0], ckk = g.col_rows(), cols = g.col_cols();
  const std::int64_t ohw = g.out_h() * g.out_w();
  forward_result<D, T> r;
  r.outputs.push_back(alloc_for_overwrite<T>(d, std::size_t(c.shards.outputs[0].local.elements())));
  if constexpr (requires { d.template conv_fwd_direct<T>(g, o, in.inputs[0], in.params[0], in.inputs[0], d.view(r.outputs[0])); }) {
    const std::span<const T> bias = c.op.attrs.bias ? in.params[1] : std::span<const T>{};
    if (d.template conv_fwd_direct<T>(g, o, in.inputs[0], in.params[0], bias, d.view(r.outputs[0]))) return r;
  }
  buffer_t<D, T> col = alloc_for_overwrite<T>(d, std::size_t(ckk * cols));
  d.im2col(g, in.inputs[0], d.view(col));
  buffer_t<D, T> yt = alloc_for_overwrite<T>(d, std::size_t(o * cols));
  d.gemm(gemm_desc{false, false, o, cols, ckk, ckk, cols, cols}, T(1), in.params[0], cview<T>(d, col), T(0), d.view(yt));
  d.permute_0213(std::int64_t(1), o, g.n, ohw, cview<T>(d, yt), d.view(r.outputs[0]));
  if (c.op.attrs.bias) d.bias_add(g.n, o, ohw, in.params[1], d.view(r.outputs[0]));
  return r;
}

/// conv2d's backward in whole-convolution calls where the device has them for this geometry
/// (cpu_device: oneDNN, backend/cpu/dnnl_conv.hpp); false where it has none.
template <class T, class D>
bool conv2d_bwd_direct(D& d, const kernel_context<T>& c, const operands<T>& in, std::span<const T> dy, const window_geom& g,
                       gradients<D, T>& r) {
  if constexpr (requires(std::span<T> m) { d.template conv_bwd_weights_direct<T>(g, 1, dy, dy, m, m); }) {
    const std::int64_t o = c.shards.params[0].local[0];
    r.params.push_back(alloc_for_overwrite<T>(d, std::size_t(c.shards.params[0].local.elements())));
    if (c.op.attrs.bias) r.params.push_back(alloc_for_overwrite<T>(d, std::size_t(c.shards.params[1].local.elements())));
    const std::span<T> db = c.op.attrs.bias ? d.view(r.params[1]) : std::span<T>{};
    if (!d.template conv_bwd_weights_direct<T>(g, o, in.inputs[0], dy, d.view(r.params[0]), db)) return false;
    if (!c.wants_input_grad(0)) {
      r.inputs.push_back(d.template alloc<T>(0));
      return true;
    }
    r.inputs.push_back(alloc_for_overwrite<T>(d, std::size_t(c.shards.inputs[0].local.elements())));
    return d.template conv_bwd_data_direct<T>(g, o, in.params[0], dy, d.view(r.inputs[0]));
  } else {
    (void)d, (void)c, (void)in, (void)dy, (void)g, (void)r;
    return false;
  }
}

/// dY' = dY as [O, N oh ow]; dW = dY' col^T; dcol = W^T dY'; dX = col2im(dcol); db = sum dY.
template <class T, class D>
gradients<D, T> conv2d_bwd(D& d, const kernel_context<T>& c, const operands<T>& in, std::span<const T> dy) {
  const window_geom g = local_window(c);
  if (gradients<D, T> r; conv2d_bwd_direct(d, c, in, dy, g, r)) return r;
  const std::int64_t o = c.shards.params[0].local[0], ckk = g.col_rows(), cols = g.col_cols();
  const std::int64_t ohw = g.out_h() * g.out_w();
  buffer_t<D, T> dyt = alloc_for_overwrite<T>(d, std::size_t(o * cols));
  d.permute_0213(std::int64_t(1), g.n, o, ohw, dy, d.view(dyt));
  buffer_t<D, T> col = alloc_for_overwrite<T>(d, std::size_t(ckk * cols));
  d.im2col(g, in.inputs[0], d.view(col));
  gradients<D, T> r;
  r.params.push_back(alloc_for_overwrite<T>(d, std::size_t(c.shards.params[0].local.elements())));  // beta 0: written whole
  d.gemm(gemm_desc{false, true, o, ckk, cols, cols, cols, ckk}, T(1), cview<T>(d, dyt), cview<T>(d, col), T(0),
         d.view(r.params[0]));
  if (c.wants_input_grad(0)) {
    d.gemm(gemm_desc{true, false, ckk, cols, o, ckk, cols, cols}, T(1), in.params[0], cview<T>(d, dyt), T(0), d.view(col));
    r.inputs.push_back(alloc_for_overwrite<T>(d, std::size_t(c.shards.inputs[0].local.elements())));
    d.col2im(g, cview<T>(d, col), d.view(r.inputs[0]));
  } else {
    r.inputs.push_back(d.template alloc<T>(0));
  }
  if (c.op.attrs.bias) {
    r.params.push_back(alloc_like<T>(d, c.shards.params[1]));
    d.bias_grad(std::int64_t(1), o, cols, cview<T>(d, dyt), d.view(r.params[1]));  // dY' [O, N oh ow]: one run per channel
  }
  return r;
}

}  // namespace autoddl::detail
