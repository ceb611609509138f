#pragma once
// Kernels of the element-wise and row-wise ops on local shards: relu, gelu, silu, dropout, add,
// mul, swiglu, reshape, max-pool, layernorm, rmsnorm, softmax, rotary. None of them ever sees P in its
// nonlinear input (f(a) + f(b) != f(a + b)); row-wise ops see whole rows (the last dim is never split, or, for
// a grouped rmsnorm, split in whole groups).
// Dropout keys its mask by (seed, op id, global element index), so a B copy on every device
// draws the same mask and any layout draws the serial mask.
#include <span>
#include <utility>

#include "autoddl/runtime/kernels/context.hpp"

namespace autoddl::detail {

/// A forward result holding Y, allocated for `write` to overwrite whole.
template <class T, class D, class Write>
forward_result<D, T> overwritten_output(D& d, const kernel_context<T>& c, Write write) {
  forward_result<D, T> r;
  r.outputs.push_back(alloc_for_overwrite<T>(d, std::size_t(c.shards.outputs[0].local.elements())));
  write(d.view(r.outputs[0]));
  return r;
}

/// Appends the gradient of the next input (g.inputs.size()) to g, for the caller to overwrite whole.
template <class T, class D>
std::span<T> overwritten_input_grad(D& d, const kernel_context<T>& c, gradients<D, T>& g) {
  const std::size_t i = g.inputs.size();
  g.inputs.push_back(alloc_for_overwrite<T>(d, std::size_t(c.shards.inputs[i].local.elements())));
  return d.view(g.inputs[i]);
}

// relu reads its output Y in backward (Y > 0 exactly where X > 0, so dX is the same bits); gelu,
// silu and max-pool their input X.
template <class T, class D>
forward_result<D, T> relu_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  return overwritten_output(d, c, [&](std::span<T> y) { d.relu_fwd(in.inputs[0], y); });
}
template <class T, class D>
gradients<D, T> relu_bwd(D& d, const kernel_context<T>& c, const forward_result<D, T>& f, std::span<const T> dy) {
  gradients<D, T> g;
  d.relu_bwd(cview<T>(d, f.outputs[0]), dy, overwritten_input_grad(d, c, g));
  return g;
}

template <class T, class D>
forward_result<D, T> gelu_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  return overwritten_output(d, c, [&](std::span<T> y) { d.gelu_fwd(in.inputs[0], y); });
}
template <class T, class D>
gradients<D, T> gelu_bwd(D& d, const kernel_context<T>& c, const operands<T>& in, std::span<const T> dy) {
  gradients<D, T> g;
  d.gelu_bwd(in.inputs[0], dy, overwritten_input_grad(d, c, g));
  return g;
}

template <class T, class D>
forward_result<D, T> silu_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  return overwritten_output(d, c, [&](std::span<T> y) { d.silu_fwd(in.inputs[0], y); });
}
template <class T, class D>
gradients<D, T> silu_bwd(D& d, const kernel_context<T>& c, const operands<T>& in, std::span<const T> dy) {
  gradients<D, T> g;
  d.silu_bwd(in.inputs[0], dy, overwritten_input_grad(d, c, g));
  return g;
}

template <class T, class D>
forward_result<D, T> max_pool_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  return overwritten_output(d, c, [&](std::span<T> y) { d.max_pool_fwd(local_window(c), in.inputs[0], y); });
}
template <class T, class D>
gradients<D, T> max_pool_bwd(D& d, const kernel_context<T>& c, const operands<T>& in, std::span<const T> dy) {
  gradients<D, T> g;
  d.max_pool_bwd(local_window(c), in.inputs[0], dy, overwritten_input_grad(d, c, g));
  return g;
}

/// Dropout of x into y, keyed by (seed, op id, global element index); the identity outside
/// training or at p = 0. The backward applies the same mask to dY (it rekeys it, reading nothing).
template <class T, class D>
void drop(D& d, const kernel_context<T>& c, std::span<const T> x, std::span<T> y) {
  if (c.training && c.op.attrs.dropout > 0) d.dropout(dropout_key{c.seed, c.op_id, c.op.attrs.dropout}, c.shards.outputs[0], x, y);
  else d.copy(x, y);
}
template <class T, class D>
forward_result<D, T> dropout_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  return overwritten_output(d, c, [&](std::span<T> y) { drop(d, c, in.inputs[0], y); });
}
template <class T, class D>
gradients<D, T> dropout_bwd(D& d, const kernel_context<T>& c, std::span<const T> dy) {
  gradients<D, T> g;
  drop(d, c, dy, overwritten_input_grad(d, c, g));
  return g;
}

/// add reads neither input in backward: dA = dB = dY.
template <class T, class D>
forward_result<D, T> add_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  return overwritten_output(d, c, [&](std::span<T> y) { d.add(in.inputs[0], in.inputs[1], y); });
}
template <class T, class D>
gradients<D, T> add_bwd(D& d, const kernel_context<T>& c, std::span<const T> dy) {
  gradients<D, T> g;
  d.copy(dy, overwritten_input_grad(d, c, g));
  d.copy(dy, overwritten_input_grad(d, c, g));
  return g;
}

/// mul reads both factors: dA = dY B, dB = dY A (where A is P and B is B, dA is B and dB the
/// partial dY A, as dual layouts say).
template <class T, class D>
forward_result<D, T> mul_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  return overwritten_output(d, c, [&](std::span<T> y) { d.mul(in.inputs[0], in.inputs[1], y); });
}
template <class T, class D>
gradients<D, T> mul_bwd(D& d, const kernel_context<T>& c, const operands<T>& in, std::span<const T> dy) {
  gradients<D, T> g;
  d.mul(dy, in.inputs[1], overwritten_input_grad(d, c, g));
  d.mul(dy, in.inputs[0], overwritten_input_grad(d, c, g));
  return g;
}

/// swiglu: Y = silu(G) U in one op, which keeps G and U (what the two ops silu and mul would keep
/// besides silu(G)). Backward: s = silu(G) again, dU = dY s, dG = silu'(G) (dY U); s's buffer
/// takes dY U. Under G B and U P, dG = silu'(G) (dY U) with dY B: the partial dY U makes dG a
/// partial sum, as the dual layouts say.
template <class T, class D>
forward_result<D, T> swiglu_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  return overwritten_output(d, c, [&](std::span<T> y) {
    d.silu_fwd(in.inputs[0], y);
    d.mul(std::span<const T>(y), in.inputs[1], y);
  });
}
template <class T, class D>
gradients<D, T> swiglu_bwd(D& d, const kernel_context<T>& c, const operands<T>& in, std::span<const T> dy) {
  gradients<D, T> g;
  const std::span<T> dg = overwritten_input_grad(d, c, g), du = overwritten_input_grad(d, c, g);
  buffer_t<D, T> s = alloc_for_overwrite<T>(d, dg.size());
  d.silu_fwd(in.inputs[0], d.view(s));
  d.mul(dy, cview<T>(d, s), du);
  d.mul(dy, in.inputs[1], d.view(s));
  d.silu_bwd(in.inputs[0], cview<T>(d, s), dg);
  return g;
}

/// reshape moves no element: the local block keeps its memory order (ops/reshape.hpp admits only
/// layouts where it does), so Y is a copy of X and dX a copy of dY.
template <class T, class D>
forward_result<D, T> reshape_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  return overwritten_output(d, c, [&](std::span<T> y) { d.copy(in.inputs[0], y); });
}
template <class T, class D>
gradients<D, T> reshape_bwd(D& d, const kernel_context<T>& c, std::span<const T> dy) {
  gradients<D, T> g;
  d.copy(dy, overwritten_input_grad(d, c, g));
  return g;
}

/// layernorm over the last dim; keeps mean and rstd per row (statistics, in statistic_t<T>).
template <class T, class D>
forward_result<D, T> layernorm_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  const tensor_shape& xs = c.shards.inputs[0].local;
  const std::int64_t rows = rows_of(xs), cols = last_dim(xs);
  forward_result<D, T> r;
  r.outputs.push_back(alloc_like<T>(d, c.shards.outputs[0]));
  r.statistics.push_back(d.template alloc<statistic_t<T>>(std::size_t(rows)));  // mean
  r.statistics.push_back(d.template alloc<statistic_t<T>>(std::size_t(rows)));  // rstd
  d.layernorm_fwd(rows, cols, in.inputs[0], in.params[0], in.params[1], d.view(r.outputs[0]), d.view(r.statistics[0]),
                  d.view(r.statistics[1]));
  return r;
}

template <class T, class D>
gradients<D, T> layernorm_bwd(D& d, const kernel_context<T>& c, const operands<T>& in, const forward_result<D, T>& f,
                              std::span<const T> dy) {
  const tensor_shape& xs = c.shards.inputs[0].local;
  const std::int64_t rows = rows_of(xs), cols = last_dim(xs);
  gradients<D, T> g;
  g.inputs.push_back(alloc_like<T>(d, c.shards.inputs[0]));
  g.params.push_back(alloc_like<T>(d, c.shards.params[0]));
  g.params.push_back(alloc_like<T>(d, c.shards.params[1]));
  d.layernorm_bwd(rows, cols, in.inputs[0], in.params[0], cview<statistic_t<T>>(d, f.statistics[0]),
                  cview<statistic_t<T>>(d, f.statistics[1]), dy, d.view(g.inputs[0]), d.view(g.params[0]),
                  d.view(g.params[1]));
  return g;
}

/// The rows and columns an rmsnorm normalises on this device: each of its local groups (heads
/// of the last dim, or the whole dim) is a row.
template <class T>
std::pair<std::int64_t, std::int64_t> rmsnorm_rows(const kernel_context<T>& c) {
  const tensor_shape& xs = c.shards.inputs[0].local;
  const std::int64_t cols = c.shards.inputs[0].global[xs.rank() - 1] / c.op.attrs.heads;
  return {xs.elements() / cols, cols};
}

/// rmsnorm over the last dim (or each of its groups); keeps 1/rms per row (in statistic_t<T>).
template <class T, class D>
forward_result<D, T> rmsnorm_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  const auto [rows, cols] = rmsnorm_rows(c);
  forward_result<D, T> r;
  r.outputs.push_back(alloc_like<T>(d, c.shards.outputs[0]));
  r.statistics.push_back(d.template alloc<statistic_t<T>>(std::size_t(rows)));  // rstd
  d.rmsnorm_fwd(rows, cols, in.inputs[0], in.params[0], c.op.attrs.eps, d.view(r.outputs[0]), d.view(r.statistics[0]));
  return r;
}

template <class T, class D>
gradients<D, T> rmsnorm_bwd(D& d, const kernel_context<T>& c, const operands<T>& in, const forward_result<D, T>& f,
                            std::span<const T> dy) {
  const auto [rows, cols] = rmsnorm_rows(c);
  gradients<D, T> g;
  g.inputs.push_back(alloc_like<T>(d, c.shards.inputs[0]));
  g.params.push_back(alloc_like<T>(d, c.shards.params[0]));
  d.rmsnorm_bwd(rows, cols, in.inputs[0], in.params[0], cview<statistic_t<T>>(d, f.statistics[0]), dy, d.view(g.inputs[0]),
                d.view(g.params[0]));
  return g;
}

/// rotary of X [b, s, heads * d]: this device's heads, at the global positions it holds (its
/// shard's sequence offset); backward turns dY back (a rotation's transpose is its inverse).
/// In a permuted token order (kernel_context::order) each run of consecutive positions of each
/// sequence is rotated on its own.
template <class T, class D>
void rotate(D& d, const kernel_context<T>& c, bool inverse, std::span<const T> x, std::span<T> y) {
  const shard_info& s = c.shards.inputs[0];
  const std::int64_t dh = s.global[2] / c.op.attrs.heads, heads = s.local[2] / dh, rows = s.local[1];
  const std::vector<token_run> runs = local_runs(c.order, s);
  if (runs.size() == 1) return d.rotary(s.local[0], rows, heads, dh, runs[0].position, c.op.attrs.rope_theta, inverse, x, y);
  for (std::int64_t n = 0; n < s.local[0]; ++n)
    for (const token_run& r : runs) {
      const auto at = std::size_t((n * rows + r.row) * s.local[2]), len = std::size_t(r.length * s.local[2]);
      d.rotary(1, r.length, heads, dh, r.position, c.op.attrs.rope_theta, inverse, x.subspan(at, len), y.subspan(at, len));
    }
}

template <class T, class D>
forward_result<D, T> rotary_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  forward_result<D, T> r;
  r.outputs.push_back(alloc_like<T>(d, c.shards.outputs[0]));
  rotate(d, c, false, in.inputs[0], d.view(r.outputs[0]));
  return r;
}

template <class T, class D>
gradients<D, T> rotary_bwd(D& d, const kernel_context<T>& c, std::span<const T> dy) {
  gradients<D, T> g;
  g.inputs.push_back(alloc_like<T>(d, c.shards.inputs[0]));
  rotate(d, c, true, dy, d.view(g.inputs[0]));
  return g;
}

/// softmax over the last dim; backward reads the forward's output.
template <class T, class D>
forward_result<D, T> softmax_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  const tensor_shape& xs = c.shards.inputs[0].local;
  forward_result<D, T> r;
  r.outputs.push_back(alloc_like<T>(d, c.shards.outputs[0]));
  d.softmax_fwd(rows_of(xs), last_dim(xs), in.inputs[0], d.view(r.outputs[0]));
  return r;
}

template <class T, class D>
gradients<D, T> softmax_bwd(D& d, const kernel_context<T>& c, const forward_result<D, T>& f, std::span<const T> dy) {
  const tensor_shape& xs = c.shards.inputs[0].local;
  gradients<D, T> g;
  g.inputs.push_back(alloc_like<T>(d, c.shards.inputs[0]));
  d.softmax_bwd(rows_of(xs), last_dim(xs), cview<T>(d, f.outputs[0]), dy, d.view(g.inputs[0]));
  return g;
}

}  // namespace autoddl::detail
