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
#include "autoddl/runtime/kernels/routed_experts.hpp"
#include "autoddl/runtime/kernels/sigmoid_gate.hpp"

namespace autoddl {


namespace detail {
/// check_operands for a backward, where an input it does not read (backward_reads_of) may be an
/// empty span: the executor frees it after the forward.
template <class T>
void check_backward_operands(const kernel_context<T>& c, const operands<T>& in) {
  const backward_reads r = backward_reads_of(c.op);
  operands<T> read = in;
  for (std::size_t i = 0; i < read.inputs.size() && i < c.shards.inputs.size(); ++i)
    if (!r.input(i) && !is_index_input(c.op.kind, i) && read.inputs[i].empty())
      read.inputs[i] = std::span<const T>(static_cast<const T*>(nullptr), std::size_t(c.shards.inputs[i].local.elements()));
  check_operands(c, read);  // sizes only: the stand-in spans are never read
}
}  // namespace detail

// ---- the kernels of every kind -------------------------------------------------------------
/// op_kernel_traits<K> holds the kernels of kind K, generic over the element type and the Device:
///   forward(dev, ctx, in) -> forward_result: Y's local block and what the backward keeps
///   backward(dev, ctx, in, fwd, dy) -> gradients: dX per input (laid out dual(input)), dW per
///     parameter; it reads only what backward_reads_of(op) names (ops/work.hpp)
/// Every kind states both here, a reshape included (a copy of the local block).
template <op_kind K>
struct op_kernel_traits;

template <> struct op_kernel_traits<op_kind::linear> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::linear_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto& in, const auto&, auto dy) {
    return detail::linear_bwd(d, c, in, dy);
  };
};
template <> struct op_kernel_traits<op_kind::matmul> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::linear_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto& in, const auto&, auto dy) {
    return detail::linear_bwd(d, c, in, dy);
  };
};
template <> struct op_kernel_traits<op_kind::batched_matmul> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::batched_matmul_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto& in, const auto&, auto dy) {
    return detail::batched_matmul_bwd(d, c, in, dy);
  };
};
template <> struct op_kernel_traits<op_kind::conv2d> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::conv2d_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto& in, const auto&, auto dy) {
    return detail::conv2d_bwd(d, c, in, dy);
  };
};
template <> struct op_kernel_traits<op_kind::max_pool> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::max_pool_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto& in, const auto&, auto dy) {
    return detail::max_pool_bwd(d, c, in, dy);
  };
};
template <> struct op_kernel_traits<op_kind::relu> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::relu_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto&, const auto& f, auto dy) {
    return detail::relu_bwd(d, c, f, dy);
  };
};
template <> struct op_kernel_traits<op_kind::gelu> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::gelu_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto& in, const auto&, auto dy) {
    return detail::gelu_bwd(d, c, in, dy);
  };
};
template <> struct op_kernel_traits<op_kind::dropout> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::dropout_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto&, const auto&, auto dy) {
    return detail::dropout_bwd(d, c, dy);
  };
};
template <> struct op_kernel_traits<op_kind::layernorm> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::layernorm_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto& in, const auto& f, auto dy) {
    return detail::layernorm_bwd(d, c, in, f, dy);
  };
};
template <> struct op_kernel_traits<op_kind::softmax> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::softmax_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto&, const auto& f, auto dy) {
    return detail::softmax_bwd(d, c, f, dy);
  };
};
template <> struct op_kernel_traits<op_kind::attention> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::attention_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto& in, const auto& f, auto dy) {
    return detail::attention_bwd(d, c, in, f, dy);
  };
};
template <> struct op_kernel_traits<op_kind::embedding> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::embedding_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto& in, const auto&, auto dy) {
    return detail::embedding_bwd(d, c, in, dy);
  };
};
template <> struct op_kernel_traits<op_kind::cross_entropy> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::cross_entropy_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto& in, const auto& f, auto dy) {
    return detail::cross_entropy_bwd(d, c, in, f, dy);
  };
};
template <> struct op_kernel_traits<op_kind::add> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::add_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto&, const auto&, auto dy) {
    return detail::add_bwd(d, c, dy);
  };
};
template <> struct op_kernel_traits<op_kind::reshape> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::reshape_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto&, const auto&, auto dy) {
    return detail::reshape_bwd(d, c, dy);
  };
};
template <> struct op_kernel_traits<op_kind::rmsnorm> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::rmsnorm_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto& in, const auto& f, auto dy) {
    return detail::rmsnorm_bwd(d, c, in, f, dy);
  };
};
template <> struct op_kernel_traits<op_kind::silu> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::silu_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto& in, const auto&, auto dy) {
    return detail::silu_bwd(d, c, in, dy);
  };
};
template <> struct op_kernel_traits<op_kind::mul> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::mul_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto& in, const auto&, auto dy) {
    return detail::mul_bwd(d, c, in, dy);
  };
};
template <> struct op_kernel_traits<op_kind::swiglu> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::swiglu_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto& in, const auto&, auto dy) {
    return detail::swiglu_bwd(d, c, in, dy);
  };
};
template <> struct op_kernel_traits<op_kind::rotary> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::rotary_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto&, const auto&, auto dy) {
    return detail::rotary_bwd(d, c, dy);
  };
};
template <> struct op_kernel_traits<op_kind::router> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::router_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto& in, const auto&, auto dy) {
    return detail::router_bwd(d, c, in, dy);
  };
};
template <> struct op_kernel_traits<op_kind::load_balance> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::load_balance_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto& in, const auto&, auto dy) {
    return detail::load_balance_bwd(d, c, in, dy);
  };
};
template <> struct op_kernel_traits<op_kind::dispatch> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::dispatch_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto& in, const auto&, auto dy) {
    return detail::dispatch_bwd(d, c, in, dy);
  };
};
template <> struct op_kernel_traits<op_kind::experts> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::experts_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto& in, const auto& f, auto dy) {
    return detail::experts_bwd(d, c, in, f, dy);
  };
};
template <> struct op_kernel_traits<op_kind::combine> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::combine_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto& in, const auto&, auto dy) {
    return detail::combine_bwd(d, c, in, dy);
  };
};

template <> struct op_kernel_traits<op_kind::routed_experts> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::routed_experts_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto& in, const auto& f, auto dy) {
    return detail::routed_experts_bwd(d, c, in, f, dy);
  };
};
template <> struct op_kernel_traits<op_kind::sigmoid_gate> {
  static constexpr auto forward = [](auto& d, const auto& c, const auto& in) {
    return detail::sigmoid_gate_fwd(d, c, in);
  };
  static constexpr auto backward = [](auto& d, const auto& c, const auto& in, const auto&, auto dy) {
    return detail::sigmoid_gate_bwd(d, c, in, dy);
  };
};

/// Whether Traits (op_kernel_traits<K> of one kind K) holds both kernels; see check_op_traits.
template <class Traits>
consteval bool check_op_kernel_traits() {
  static_assert(requires { sizeof(Traits); }, "op_kernel_traits<K> is not specialised for this kind: give it the kind's kernels");
  static_assert(requires { Traits::forward; }, "op_kernel_traits<K> lacks forward: give the kind its forward kernel");
  static_assert(requires { Traits::backward; }, "op_kernel_traits<K> lacks backward: give the kind its backward kernel");
  return true;
}

/// check_op_kernel_traits for every kind of an enum of Count kinds with traits Traits<K>.
template <class Kind, std::size_t Count, template <Kind> class Traits>
consteval bool every_kind_has_kernel_traits() {
  return detail::every_kind<Kind, Count>([](auto k) { return check_op_kernel_traits<Traits<decltype(k)::value>>(); });
}
static_assert(every_kind_has_kernel_traits<op_kind, op_kind_count, op_kernel_traits>());

namespace detail {
/// The forward kernel of op kind K: used by op_forward's run-time dispatch and by a typed model's
/// instances (runtime/typed_program.hpp), which know K at compile time.
template <op_kind K, class T, Device D>
forward_result<D, T> forward_kernel(D& dev, const kernel_context<T>& ctx, const operands<T>& in) {
  return op_kernel_traits<K>::forward(dev, ctx, in);
}

/// The backward kernel of op kind K (see forward_kernel).
template <op_kind K, class T, Device D>
gradients<D, T> backward_kernel(D& dev, const kernel_context<T>& ctx, const operands<T>& in,
                                const forward_result<D, T>& fwd, std::span<const T> dy) {
  return op_kernel_traits<K>::backward(dev, ctx, in, fwd, dy);
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
  return visit_op_kind(ctx.op.kind, [&](auto k) { return detail::forward_kernel<k.value, T>(dev, ctx, in); });
}

/// Runs `ctx.op` backward on this device: `dy` is the local block of dY laid out
/// dual(ctx.sig.outputs[0]) (for cross_entropy, the scalar dloss); `in` and `fwd` are the
/// forward's operands and result, of which only what backward_reads_of(op) names is read (the
/// others may be empty spans, fwd.outputs empty). Gradients come out laid out dual(input) and dual(param).
template <class T, Device D>
gradients<D, T> op_backward(D& dev, const kernel_context<T>& ctx, const operands<T>& in, const forward_result<D, T>& fwd,
                            std::span<const T> dy) {
  detail::check_backward_operands(ctx, in);
  detail::check_dy(ctx, dy);
  return visit_op_kind(ctx.op.kind, [&](auto k) { return detail::backward_kernel<k.value, T>(dev, ctx, in, fwd, dy); });
}

}  // namespace autoddl
