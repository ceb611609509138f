#pragma once
// Kernels of the element-wise and row-wise ops on local shards: relu, gelu, dropout, add,
// reshape, max-pool, layernorm, softmax. None of them ever sees P in its nonlinear input
// (DESIGN.md); row-wise ops see whole rows (the last dim is never split).
// Dropout keys its mask by (seed, op id, global element index), so a B copy on every device
// draws the same mask and any layout draws the serial mask.
#include <span>

#include "autoddl/runtime/kernels/context.hpp"

namespace autoddl::detail {

template <class T, class D>
forward_result<D, T> unary_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  forward_result<D, T> r;
  r.outputs.push_back(alloc_like<T>(d, c.shards.outputs[0]));
  std::span<T> y = d.view(r.outputs[0]);
  std::span<const T> x = in.inputs[0];
  switch (c.op.kind) {
    case op_kind::relu: d.relu_fwd(x, y); break;
    case op_kind::gelu: d.gelu_fwd(x, y); break;
    case op_kind::dropout:
      if (c.training && c.op.attrs.dropout > 0) d.dropout(dropout_key{c.seed, c.op_id, c.op.attrs.dropout}, c.shards.outputs[0], x, y);
      else d.copy(x, y);
      break;
    case op_kind::add: d.add(x, in.inputs[1], y); break;
    case op_kind::max_pool: {
      const tensor_shape& xs = c.shards.inputs[0].local;
      d.max_pool_fwd(window_geom{xs[0], xs[1], xs[2], xs[3], c.op.attrs.kernel, c.op.attrs.stride, c.op.attrs.padding}, x, y);
      break;
    }
    default: d.copy(x, y); break;  // reshape: the local block keeps its memory order
  }
  return r;
}

/// relu reads its output Y (Y > 0 exactly where X > 0, so dX is the same bits), gelu and
/// max-pool their input X; dropout (its mask rekeyed), add and reshape read neither.
template <class T, class D>
gradients<D, T> unary_bwd(D& d, const kernel_context<T>& c, const operands<T>& in, const forward_result<D, T>& f,
                          std::span<const T> dy) {
  gradients<D, T> g;
  g.inputs.push_back(alloc_like<T>(d, c.shards.inputs[0]));
  std::span<T> dx = d.view(g.inputs[0]);
  std::span<const T> x = in.inputs[0];
  switch (c.op.kind) {
    case op_kind::relu: d.relu_bwd(cview<T>(d, f.outputs[0]), dy, dx); break;
    case op_kind::gelu: d.gelu_bwd(x, dy, dx); break;
    case op_kind::dropout:
      if (c.training && c.op.attrs.dropout > 0) d.dropout(dropout_key{c.seed, c.op_id, c.op.attrs.dropout}, c.shards.outputs[0], dy, dx);
      else d.copy(dy, dx);
      break;
    case op_kind::add:
      d.copy(dy, dx);
      g.inputs.push_back(alloc_like<T>(d, c.shards.inputs[1]));
      d.copy(dy, d.view(g.inputs[1]));
      break;
    case op_kind::max_pool: {
      const tensor_shape& xs = c.shards.inputs[0].local;
      d.max_pool_bwd(window_geom{xs[0], xs[1], xs[2], xs[3], c.op.attrs.kernel, c.op.attrs.stride, c.op.attrs.padding}, x, dy,
                     dx);
      break;
    }
    default: d.copy(dy, dx); break;  // reshape
  }
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
