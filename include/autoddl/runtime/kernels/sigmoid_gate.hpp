#pragma once
// Kernels of sigmoid_gate (ops/moe.hpp), Qwen2-MoE's shared-expert gate, on local shards:
//   Y[r, :] = sigmoid(Z[r]) X[r, :]        Z [rows, 1], X and Y [rows, h_l]
//   dX[r, :] = sigmoid(Z[r]) dY[r, :]      dZ[r] = sigmoid'(Z[r]) (dY[r, :] . X[r, :])
// built from the Device's own primitives, so every device runs it: sigmoid(z) is the first
// column of the softmax of the row [z, 0] (e^z / (e^z + 1)), and its backward is that softmax's
// backward with the gradient [dg, 0] (p (dg - p dg) = dg p (1 - p)); the scaling and its two
// gradients are combine_rows with one column of weights, row r reading row r. Under X S(2) the
// dot product covers the local columns only: dZ is then partial, as dual(B) says.
#include <cstdint>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include "autoddl/runtime/kernels/context.hpp"

namespace autoddl::detail {

/// The softmax rows [rows, 2] of [z, 0]: column 0 is sigmoid(z).
template <class T, class D>
buffer_t<D, T> sigmoid_pairs(D& d, std::int64_t rows, std::span<const T> z) {
  buffer_t<D, T> pair = d.template alloc<T>(std::size_t(2 * rows)), probs = d.template alloc<T>(std::size_t(2 * rows));
  d.fill(d.view(pair), T{});
  d.copy_rows(rows, std::int64_t(1), z, std::int64_t(1), d.view(pair), std::int64_t(2));
  d.softmax_fwd(rows, std::int64_t(2), cview<T>(d, pair), d.view(probs));
  return probs;
}

/// Column 0 of [rows, 2] pairs as a vector of rows.
template <class T, class D>
buffer_t<D, T> first_column(D& d, std::int64_t rows, std::span<const T> pairs) {
  buffer_t<D, T> s = d.template alloc<T>(std::size_t(rows));
  d.copy_rows(rows, std::int64_t(1), pairs, std::int64_t(2), d.view(s), std::int64_t(1));
  return s;
}

/// The identity row map 0 .. rows - 1 (combine_rows' dst with one column).
template <class D>
buffer_t<D, std::int64_t> own_rows(D& d, std::int64_t rows) {
  std::vector<std::int64_t> host(static_cast<std::size_t>(rows));
  std::iota(host.begin(), host.end(), std::int64_t(0));
  buffer_t<D, std::int64_t> r = d.template alloc<std::int64_t>(host.size());
  if (!host.empty()) d.upload(std::span<const std::int64_t>(host), d.view(r));
  return r;
}

template <class T, class D>
forward_result<D, T> sigmoid_gate_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  const tensor_shape& x = c.shards.inputs[0].local;
  const std::int64_t rows = x[0] * x[1];
  const buffer_t<D, T> probs = sigmoid_pairs(d, rows, in.inputs[1]);
  const buffer_t<D, T> s = first_column(d, rows, cview<T>(d, probs));
  const buffer_t<D, std::int64_t> dst = own_rows(d, rows);
  forward_result<D, T> r;
  r.outputs.push_back(alloc_like<T>(d, c.shards.outputs[0]));
  d.combine_rows(rows, std::int64_t(1), std::as_const(d).view(dst), cview<T>(d, s), in.inputs[0], d.view(r.outputs[0]));
  return r;
}

template <class T, class D>
gradients<D, T> sigmoid_gate_bwd(D& d, const kernel_context<T>& c, const operands<T>& in, std::span<const T> dy) {
  const tensor_shape& x = c.shards.inputs[0].local;
  const std::int64_t rows = x[0] * x[1];
  const buffer_t<D, T> probs = sigmoid_pairs(d, rows, in.inputs[1]);
  const buffer_t<D, T> s = first_column(d, rows, cview<T>(d, probs));
  const buffer_t<D, std::int64_t> dst = own_rows(d, rows);
  buffer_t<D, T> ds = d.template alloc<T>(std::size_t(rows));
  gradients<D, T> g;
  g.inputs.push_back(alloc_like<T>(d, c.shards.inputs[0]));
  d.combine_rows_bwd(rows, std::int64_t(1), std::as_const(d).view(dst), cview<T>(d, s), in.inputs[0], dy, d.view(g.inputs[0]),
                     d.view(ds));
  buffer_t<D, T> dpair = d.template alloc<T>(std::size_t(2 * rows)), dlogits = d.template alloc<T>(std::size_t(2 * rows));
  d.fill(d.view(dpair), T{});
  d.copy_rows(rows, std::int64_t(1), cview<T>(d, ds), std::int64_t(1), d.view(dpair), std::int64_t(2));
  d.softmax_bwd(rows, std::int64_t(2), cview<T>(d, probs), cview<T>(d, dpair), d.view(dlogits));
  g.inputs.push_back(first_column(d, rows, cview<T>(d, dlogits)));
  return g;
}

}  // namespace autoddl::detail
