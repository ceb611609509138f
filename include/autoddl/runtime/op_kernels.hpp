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
#include <type_traits>

#include "autoddl/backend/device.hpp"
#include "autoddl/backend/shard.hpp"
#include "autoddl/ops/work.hpp"
#include "autoddl/runtime/kernels/attention.hpp"
#include "autoddl/runtime/kernels/context.hpp"
#include "autoddl/runtime/kernels/embedding.hpp"
#include "autoddl/runtime/kernels/gemm_ops.hpp"
#include "autoddl/runtime/kernels/moe.hpp"
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

namespace detail {
/// The kernel of op kind K, forward: one mapping from kinds to kernels, used by op_forward's
/// run-time dispatch and by a typed model's instances (runtime/typed_program.hpp), which know K
/// at compile time.
template <op_kind K, class T, Device D>
forward_result<D, T> forward_kernel(D& dev, const kernel_context<T>& ctx, const operands<T>& in) {
  if constexpr (K == op_kind::linear || K == op_kind::matmul) return linear_fwd(dev, ctx, in);
  else if constexpr (K == op_kind::batched_matmul) return batched_matmul_fwd(dev, ctx, in);
  else if constexpr (K == op_kind::conv2d) return conv2d_fwd(dev, ctx, in);
  else if constexpr (K == op_kind::layernorm) return layernorm_fwd(dev, ctx, in);
  else if constexpr (K == op_kind::softmax) return softmax_fwd(dev, ctx, in);
  else if constexpr (K == op_kind::attention) return attention_fwd(dev, ctx, in);
  else if constexpr (K == op_kind::embedding) return embedding_fwd(dev, ctx, in);
  else if constexpr (K == op_kind::cross_entropy) return cross_entropy_fwd(dev, ctx, in);
  else if constexpr (K == op_kind::rmsnorm) return rmsnorm_fwd(dev, ctx, in);
  else if constexpr (K == op_kind::rotary) return rotary_fwd(dev, ctx, in);
  else if constexpr (K == op_kind::router) return router_fwd(dev, ctx, in);
  else if constexpr (K == op_kind::load_balance) return load_balance_fwd(dev, ctx, in);
  else if constexpr (K == op_kind::dispatch) return dispatch_fwd(dev, ctx, in);
  else if constexpr (K == op_kind::experts) return experts_fwd(dev, ctx, in);
  else if constexpr (K == op_kind::combine) return combine_fwd(dev, ctx, in);
  else return unary_fwd(dev, ctx, in);  // max_pool, relu, gelu, silu, dropout, add, mul, reshape
}

/// The kernel of op kind K, backward (see forward_kernel).
template <op_kind K, class T, Device D>
gradients<D, T> backward_kernel(D& dev, const kernel_context<T>& ctx, const operands<T>& in,
                                const forward_result<D, T>& fwd, std::span<const T> dy) {
  if constexpr (K == op_kind::linear || K == op_kind::matmul) return linear_bwd(dev, ctx, in, dy);
  else if constexpr (K == op_kind::batched_matmul) return batched_matmul_bwd(dev, ctx, in, dy);
  else if constexpr (K == op_kind::conv2d) return conv2d_bwd(dev, ctx, in, dy);
  else if constexpr (K == op_kind::layernorm) return layernorm_bwd(dev, ctx, in, fwd, dy);
  else if constexpr (K == op_kind::softmax) return softmax_bwd(dev, ctx, fwd, dy);
  else if constexpr (K == op_kind::attention) return attention_bwd(dev, ctx, in, fwd, dy);
  else if constexpr (K == op_kind::embedding) return embedding_bwd(dev, ctx, in, dy);
  else if constexpr (K == op_kind::cross_entropy) return cross_entropy_bwd(dev, ctx, in, fwd, dy);
  else if constexpr (K == op_kind::rmsnorm) return rmsnorm_bwd(dev, ctx, in, fwd, dy);
  else if constexpr (K == op_kind::rotary) return rotary_bwd(dev, ctx, dy);
  else if constexpr (K == op_kind::router) return router_bwd(dev, ctx, in, dy);
  else if constexpr (K == op_kind::load_balance) return load_balance_bwd(dev, ctx, in, dy);
  else if constexpr (K == op_kind::dispatch) return dispatch_bwd(dev, ctx, in, dy);
  else if constexpr (K == op_kind::experts) return experts_bwd(dev, ctx, in, fwd, dy);
  else if constexpr (K == op_kind::combine) return combine_bwd(dev, ctx, in, dy);
  else return unary_bwd(dev, ctx, in, fwd, dy);
}

/// f(std::integral_constant<op_kind, K>{}) for the run-time kind k.
template <class F>
decltype(auto) dispatch_kind(op_kind k, const std::string& op_name, F&& f) {
  using K = op_kind;
  switch (k) {
    case K::linear: return f(std::integral_constant<K, K::linear>{});
    case K::matmul: return f(std::integral_constant<K, K::matmul>{});
    case K::batched_matmul: return f(std::integral_constant<K, K::batched_matmul>{});
    case K::conv2d: return f(std::integral_constant<K, K::conv2d>{});
    case K::layernorm: return f(std::integral_constant<K, K::layernorm>{});
    case K::softmax: return f(std::integral_constant<K, K::softmax>{});
    case K::attention: return f(std::integral_constant<K, K::attention>{});
    case K::embedding: return f(std::integral_constant<K, K::embedding>{});
    case K::cross_entropy: return f(std::integral_constant<K, K::cross_entropy>{});
    case K::max_pool: return f(std::integral_constant<K, K::max_pool>{});
    case K::relu: return f(std::integral_constant<K, K::relu>{});
    case K::gelu: return f(std::integral_constant<K, K::gelu>{});
    case K::dropout: return f(std::integral_constant<K, K::dropout>{});
    case K::add: return f(std::integral_constant<K, K::add>{});
    case K::reshape: return f(std::integral_constant<K, K::reshape>{});
    case K::rmsnorm: return f(std::integral_constant<K, K::rmsnorm>{});
    case K::silu: return f(std::integral_constant<K, K::silu>{});
    case K::mul: return f(std::integral_constant<K, K::mul>{});
    case K::rotary: return f(std::integral_constant<K, K::rotary>{});
    case K::router: return f(std::integral_constant<K, K::router>{});
    case K::load_balance: return f(std::integral_constant<K, K::load_balance>{});
    case K::dispatch: return f(std::integral_constant<K, K::dispatch>{});
    case K::experts: return f(std::integral_constant<K, K::experts>{});
    case K::combine: return f(std::integral_constant<K, K::combine>{});
  }
  fail<error>("unknown op kind of op '" + op_name + "'");
}

/// Throws layout_error unless dY holds the local shard of the op's output.
template <class T>
void check_dy(const kernel_context<T>& ctx, std::span<const T> dy) {
  if (std::int64_t(dy.size()) != ctx.shards.outputs[0].local.elements())
    fail<layout_error>(std::string(to_string(ctx.op.kind)) + " op '" + ctx.op.name + "': dY holds " +
                       itos(std::int64_t(dy.size())) + " elements but its local shard " +
                       to_string(ctx.shards.outputs[0].local) + " needs " + itos(ctx.shards.outputs[0].local.elements()));
}
}  // namespace detail

/// Runs `ctx.op` forward on this device's local operands.
/// @pre operand sizes match ctx.shards (throws layout_error naming the operand otherwise).
/// @post outputs[0] is the local block of Y laid out ctx.sig.outputs[0]; saved is for op_backward.
template <class T, Device D>
forward_result<D, T> op_forward(D& dev, const kernel_context<T>& ctx, const operands<T>& in) {
  detail::check_operands(ctx, in);
  return detail::dispatch_kind(ctx.op.kind, ctx.op.name,
                               [&](auto k) { return detail::forward_kernel<decltype(k)::value, T>(dev, ctx, in); });
}

/// Runs `ctx.op` backward on this device: `dy` is the local block of dY laid out
/// dual(ctx.sig.outputs[0]) (for cross_entropy, the scalar dloss); `in` and `fwd` are the
/// forward's operands and result, of which only what backward_reads_of(kind) names is read (the
/// others may be empty spans, fwd.outputs empty). Gradients come out laid out dual(input) and dual(param).
template <class T, Device D>
gradients<D, T> op_backward(D& dev, const kernel_context<T>& ctx, const operands<T>& in, const forward_result<D, T>& fwd,
                            std::span<const T> dy) {
  detail::check_backward_operands(ctx, in);
  detail::check_dy(ctx, dy);
  return detail::dispatch_kind(ctx.op.kind, ctx.op.name, [&](auto k) {
    return detail::backward_kernel<decltype(k)::value, T>(dev, ctx, in, fwd, dy);
  });
}

}  // namespace autoddl
