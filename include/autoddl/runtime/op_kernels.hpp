#pragma once
// Forward and backward of every operator on ONE device's local shards under a signature, on any
// Device (autoddl/backend/device.hpp). The executor boxes tensors into the signature's layouts,
// calls op_forward / op_backward on each device, and boxes the results onward; the kernels only
// compute what the signature implies locally (see autoddl/runtime/kernels/context.hpp).
//
//   auto ctx = make_kernel_context<float>(op, sig, mesh, coord, seed, op_id);
//   operands<float> in{{x}, {w, b}, {}};               // spans over the local shards
//   auto f = op_forward(dev, ctx, in);                  // f.outputs[0]: Y's local block
//   auto g = op_backward(dev, ctx, in, f, dy);          // g.inputs[0]: dX, g.params: dW, db
#include <cstdint>
#include <span>
#include <string>

#include "autoddl/backend/device.hpp"
#include "autoddl/backend/shard.hpp"
#include "autoddl/ops/work.hpp"
#include "autoddl/runtime/kernels/attention.hpp"
#include "autoddl/runtime/kernels/context.hpp"
#include "autoddl/runtime/kernels/embedding.hpp"
#include "autoddl/runtime/kernels/gemm_ops.hpp"
#include "autoddl/runtime/kernels/pointwise.hpp"

namespace autoddl {


namespace detail {
/// check_operands for a backward, where an input it does not read (backward_reads_of) may be an
/// empty span: the executor frees it after the forward.
template <class T>
void check_backward_operands(const kernel_context<T>& c, const operands<T>& in) {
  const backward_reads r = backward_reads_of(c.op.kind);
  operands<T> read = in;
  for (std::size_t i = 0; i < read.inputs.size() && i < c.shards.inputs.size(); ++i)
    if (!r.input(i) && !is_index_input(c.op.kind, i) && read.inputs[i].empty())
      read.inputs[i] = std::span<const T>(static_cast<const T*>(nullptr), std::size_t(c.shards.inputs[i].local.elements()));
  check_operands(c, read);  // sizes only: the stand-in spans are never read
}
}  // namespace detail

/// Runs `ctx.op` forward on this device's local operands.
/// @pre operand sizes match ctx.shards (throws layout_error naming the operand otherwise).
/// @post outputs[0] is the local block of Y laid out ctx.sig.outputs[0]; saved is for op_backward.
template <class T, Device D>
forward_result<D, T> op_forward(D& dev, const kernel_context<T>& ctx, const operands<T>& in) {
  detail::check_operands(ctx, in);
  switch (ctx.op.kind) {
    case op_kind::linear:
    case op_kind::matmul: return detail::linear_fwd(dev, ctx, in);
    case op_kind::batched_matmul: return detail::batched_matmul_fwd(dev, ctx, in);
    case op_kind::conv2d: return detail::conv2d_fwd(dev, ctx, in);
    case op_kind::layernorm: return detail::layernorm_fwd(dev, ctx, in);
    case op_kind::softmax: return detail::softmax_fwd(dev, ctx, in);
    case op_kind::attention: return detail::attention_fwd(dev, ctx, in);
    case op_kind::embedding: return detail::embedding_fwd(dev, ctx, in);
    case op_kind::cross_entropy: return detail::cross_entropy_fwd(dev, ctx, in);
    case op_kind::max_pool:
    case op_kind::relu:
    case op_kind::gelu:
    case op_kind::dropout:
    case op_kind::add:
    case op_kind::reshape: return detail::unary_fwd(dev, ctx, in);
  }
  detail::fail<error>("op_forward: unknown op kind of op '" + ctx.op.name + "'");
}

/// Runs `ctx.op` backward on this device: `dy` is the local block of dY laid out
/// dual(ctx.sig.outputs[0]) (for cross_entropy, the scalar dloss); `in` and `fwd` are the
/// forward's operands and result, of which only what backward_reads_of(kind) names is read (the
/// others may be empty spans, fwd.outputs empty). Gradients come out laid out dual(input) and dual(param).
template <class T, Device D>
gradients<D, T> op_backward(D& dev, const kernel_context<T>& ctx, const operands<T>& in, const forward_result<D, T>& fwd,
                            std::span<const T> dy) {
  detail::check_backward_operands(ctx, in);
  if (std::int64_t(dy.size()) != ctx.shards.outputs[0].local.elements())
    detail::fail<layout_error>(std::string(to_string(ctx.op.kind)) + " op '" + ctx.op.name + "': dY holds " +
                               detail::itos(std::int64_t(dy.size())) + " elements but its local shard " +
                               to_string(ctx.shards.outputs[0].local) + " needs " +
                               detail::itos(ctx.shards.outputs[0].local.elements()));
  switch (ctx.op.kind) {
    case op_kind::linear:
    case op_kind::matmul: return detail::linear_bwd(dev, ctx, in, dy);
    case op_kind::batched_matmul: return detail::batched_matmul_bwd(dev, ctx, in, dy);
    case op_kind::conv2d: return detail::conv2d_bwd(dev, ctx, in, dy);
    case op_kind::layernorm: return detail::layernorm_bwd(dev, ctx, in, fwd, dy);
    case op_kind::softmax: return detail::softmax_bwd(dev, ctx, fwd, dy);
    case op_kind::attention: return detail::attention_bwd(dev, ctx, in, fwd, dy);
    case op_kind::embedding: return detail::embedding_bwd(dev, ctx, in, dy);
    case op_kind::cross_entropy: return detail::cross_entropy_bwd(dev, ctx, in, fwd, dy);
    case op_kind::max_pool:
    case op_kind::relu:
    case op_kind::gelu:
    case op_kind::dropout:
    case op_kind::add:
    case op_kind::reshape: return detail::unary_bwd(dev, ctx, in, fwd, dy);
  }
  detail::fail<error>("op_backward: unknown op kind of op '" + ctx.op.name + "'");
}

}  // namespace autoddl
