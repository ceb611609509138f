#pragma once
// FLOPs, activation memory and memory traffic of an op, globally and per device under a
// signature.
//
// Conventions (stated once, used everywhere):
// - A multiply-add is 2 FLOPs. GEMM-like ops (linear, matmul, batched matmul, conv2d, attention):
//   2 * M * N * K (+ M * N for a bias); backward = 2 x forward (input gradient + weight
//   gradient, each a GEMM of the forward's size), as in Kaplan et al. 2020 ("Scaling laws",
//   C = 6N per token) and Narayanan et al. 2021 (Megatron-LM, SC'21, 72BslH^2 with recompute).
//   The input gradient of the first layer is counted too.
// - Attention core: QK^T and AV are 2 * 2 * batch * seq_q * seq_k * hidden (Narayanan 2021's
//   attention term, causal masking not halved, as dense kernels compute it) plus 5 FLOPs per
//   score for scale, mask, softmax.
// - Attention with fewer key/value heads (grouped-query) computes the same scores per query
//   head: the formula reads the query's hidden size.
// - Element-wise ops are priced by bytes moved, their FLOPs are nominal per element: relu 1,
//   add 1, mul 1, dropout 2, rotary 3 (two products and a sum per element), rmsnorm 4 (square,
//   sum, scale, gamma), silu 4 (x / (1 + exp(-x))), softmax 5, layernorm 8, gelu 8 (tanh form),
//   cross-entropy 5 per logit, max-pool kernel^2 per output; backward = forward (add and reshape:
//   0, gradients pass through; mul 2: a product per factor).
// - Mixture of experts (ops/moe.hpp): router 6 per logit (softmax 5, the top-k 1), load_balance
//   7 per logit; dispatch a copy (0, priced by bytes); experts three GEMMs per slot row,
//   2 * 3 * rows * h * F, plus 5 * rows * F for SiLU and the product, backward 2 x forward;
//   combine 2 per element of X (a weighted sum), backward 2 x forward. Every slot is computed,
//   used or not, as the executor does: the capacity's padding costs what it costs.
// - Embedding: a gather (0 FLOPs; +1 per output element to add positions); backward scatter-adds
//   one element per output element.
// - Per device, the same formulas run on the device's local shapes (autoddl/sbp/layout.hpp
//   local_shape): a P or B tensor is whole there, a split one is a shard.
#include <cstdint>
#include <vector>

#include "autoddl/ops/op.hpp"
#include "autoddl/ops/signatures.hpp"
#include "autoddl/sbp/layout.hpp"

namespace autoddl {

/// What the backward of an op of kind k reads besides dY, its parameters and its forward's
/// saved products (forward_result::saved): which of its inputs (bit i: input i; an index input
/// is read through operands::indices) and whether its own output. It is what the planner prices
/// as the op's kept activations (detail::saved_bytes below; Korthikanti et al. 2022), and all
/// the executor (runtime/trainer.hpp) keeps of an op's operands and outputs from its forward to
/// its backward:
///   linear, conv2d, max_pool, gelu, layernorm   X           matmul, batched_matmul  both inputs
///   silu, rmsnorm                               X           mul                     both inputs
///   attention                                   q, k, v     relu, softmax           Y
///   embedding                                   the ids     cross_entropy           logits, labels
///   dropout (mask rekeyed), add, reshape, rotary (the inverse rotation of dY)       nothing
///   router, load_balance     logits     dispatch   G (the slot map)     combine   both inputs
///   experts                  X, and its saved gate and up products [rows, F]
struct backward_reads {
  std::uint32_t inputs = 0;
  bool output = false;
  constexpr bool input(std::size_t i) const { return i < 32 && ((inputs >> i) & 1u) != 0; }
};

constexpr backward_reads backward_reads_of(op_kind k) {
  switch (k) {
    case op_kind::linear:
    case op_kind::conv2d:
    case op_kind::max_pool:
    case op_kind::gelu:
    case op_kind::layernorm:
    case op_kind::embedding:
    case op_kind::rmsnorm:
    case op_kind::silu:
    case op_kind::router:
    case op_kind::load_balance:
    case op_kind::experts: return {0b1, false};
    case op_kind::dispatch: return {0b10, false};
    case op_kind::combine:
    case op_kind::matmul:
    case op_kind::batched_matmul:
    case op_kind::cross_entropy:
    case op_kind::mul: return {0b11, false};
    case op_kind::attention: return {0b111, false};
    case op_kind::relu:
    case op_kind::softmax: return {0, true};
    case op_kind::dropout:
    case op_kind::add:
    case op_kind::reshape:
    case op_kind::rotary: return {0, false};
  }
  return {~std::uint32_t(0), true};
}

/// An all-reduce of row statistics an op needs besides boxing (vocab-parallel cross-entropy:
/// the row max, the sum of exponentials and the target logit, Megatron-LM 2019 section 3).
struct stat_all_reduce {
  int axis = 0;               ///< the mesh axis that splits the vocabulary
  std::int64_t bytes = 0;     ///< T of sbp/boxing.hpp's table: the statistics each device holds
};

/// Work of one op on one device under one signature.
struct op_work {
  double fwd_flops = 0, bwd_flops = 0;  ///< bwd = input-grad + weight-grad
  work_kind kind = work_kind::elementwise;
  std::int64_t activation_bytes = 0;    ///< kept for backward, per device
  std::int64_t fwd_bytes_moved = 0;     ///< memory traffic of the forward (element-wise pricing)
  std::vector<stat_all_reduce> stat_all_reduces;  ///< forward all-reduces beyond boxing
};

/// Bytes of one row statistic (layernorm's mean and 1/std, cross-entropy's max and sums) for
/// elements of `elem_bytes`: the statistic type (backend/device.hpp, statistic_t) is float for
/// the 2-byte types and the element type otherwise.
constexpr int statistic_bytes(int elem_bytes) { return elem_bytes < 4 ? 4 : elem_bytes; }

namespace detail {
inline double elems(const tensor_shape& s) { return double(s.elements()); }

/// Forward FLOPs from the shapes in `op` (global or local, same formula).
inline double flops_of(const op_node& op) {
  const auto& in = op.inputs;
  const tensor_shape& y = op.outputs[0];
  const op_attrs& a = op.attrs;
  switch (op.kind) {
    case op_kind::linear:
    case op_kind::matmul:
    case op_kind::batched_matmul: {
      double k = double(in[0][in[0].rank() - 1]);
      bool bias = op.kind == op_kind::linear && a.bias;
      return 2.0 * elems(y) * k + (bias ? elems(y) : 0.0);
    }
    case op_kind::conv2d:
      return 2.0 * elems(y) * double(in[0][1]) * a.kernel * a.kernel + (a.bias ? elems(y) : 0.0);
    case op_kind::max_pool: return elems(y) * a.kernel * a.kernel;
    case op_kind::relu:
    case op_kind::add:
    case op_kind::mul: return elems(y);
    case op_kind::dropout: return 2.0 * elems(y);
    case op_kind::rotary: return 3.0 * elems(y);
    case op_kind::rmsnorm:
    case op_kind::silu: return 4.0 * elems(y);
    case op_kind::softmax:
    case op_kind::cross_entropy: return 5.0 * elems(in[0]);
    case op_kind::layernorm:
    case op_kind::gelu: return 8.0 * elems(in[0]);
    case op_kind::attention: {
      double b = double(in[0][0]), sq = double(in[0][1]), sk = double(in[1][1]), h = double(in[0][2]);
      return 4.0 * b * sq * sk * h + 5.0 * b * sq * sk * double(a.heads);
    }
    case op_kind::embedding: return a.positions ? elems(y) : 0.0;
    case op_kind::reshape:
    case op_kind::dispatch: return 0.0;
    case op_kind::router: return 6.0 * elems(in[0]);
    case op_kind::load_balance: return 7.0 * elems(in[0]);
    case op_kind::experts: {
      const double rows = elems(in[0]) / double(in[0][3]), f = double(op.params[0][2]);
      return 6.0 * rows * double(in[0][3]) * f + 5.0 * rows * f;
    }
    case op_kind::combine: return 2.0 * elems(in[0]);
  }
  return 0.0;
}

inline double bwd_of(const op_node& op, double fwd) {
  switch (op.kind) {
    case op_kind::linear:
    case op_kind::matmul:
    case op_kind::batched_matmul:
    case op_kind::conv2d:
    case op_kind::attention:
    case op_kind::experts:
    case op_kind::combine: return 2.0 * fwd;
    case op_kind::add:
    case op_kind::reshape: return 0.0;
    case op_kind::embedding: return elems(op.outputs[0]);
    case op_kind::mul: return 2.0 * fwd;
    default: return fwd;
  }
}

/// Bytes kept for backward, from the shapes in `op` (global or local). Token ids and labels are
/// int64 (8 bytes); attention keeps its probabilities [b, heads, sq, sk] before dropout
/// (Korthikanti et al. 2022, activation memory of self-attention). Dropout masks are not kept:
/// the mask is a counter-based hash of (seed, op, element), recomputed in backward
/// (backend/device.hpp, dropout_keep), where Korthikanti count 1 byte per element.
inline double saved_bytes(const op_node& op, int e) {
  const double heads = double(op.attrs.heads);
  const auto& in = op.inputs;
  const tensor_shape& y = op.outputs[0];
  switch (op.kind) {
    case op_kind::linear:
    case op_kind::conv2d:
    case op_kind::max_pool:
    case op_kind::gelu:
    case op_kind::silu: return elems(in[0]) * e;
    case op_kind::matmul:
    case op_kind::batched_matmul:
    case op_kind::mul: return (elems(in[0]) + elems(in[1])) * e;
    case op_kind::rmsnorm: {  // X, and 1/rms per normed group in the statistic type
      double groups = elems(in[0]) / double(in[0][in[0].rank() - 1]) * double(op.attrs.heads);
      return elems(in[0]) * e + groups * statistic_bytes(e);
    }
    case op_kind::relu:
    case op_kind::softmax: return elems(y) * e;
    case op_kind::layernorm: {  // X, and mean and 1/std per row in the statistic type
      double rows = elems(in[0]) / double(in[0][in[0].rank() - 1]);
      return elems(in[0]) * e + 2.0 * rows * statistic_bytes(e);
    }
    case op_kind::attention: {
      double probs = double(in[0][0]) * heads * double(in[0][1]) * double(in[1][1]);
      return (elems(in[0]) + elems(in[1]) + elems(in[2]) + probs) * e;
    }
    case op_kind::embedding: return elems(in[0]) * 8;
    case op_kind::cross_entropy: return elems(in[0]) * e + elems(in[1]) * 8;
    case op_kind::dropout:
    case op_kind::add:
    case op_kind::reshape:
    case op_kind::rotary: return 0.0;
    case op_kind::router:
    case op_kind::load_balance: return elems(in[0]) * e;
    case op_kind::dispatch: return elems(in[1]) * e;
    case op_kind::experts: {  // X, and the gate and up products per slot row
      const double rows = elems(in[0]) / double(in[0][3]);
      return (elems(in[0]) + 2.0 * rows * double(op.params[0][2])) * e;
    }
    case op_kind::combine: return (elems(in[0]) + elems(in[1])) * e;
  }
  return 0.0;
}

inline double moved_bytes(const op_node& op, int e) {
  double t = 0;
  for (const tensor_shape& s : op.inputs) t += elems(s);
  for (const tensor_shape& s : op.params) t += elems(s);
  for (const tensor_shape& s : op.outputs) t += elems(s);
  if (op.kind == op_kind::attention)  // probabilities written and read back
    t += 2.0 * double(op.inputs[0][0]) * op.attrs.heads * double(op.inputs[0][1]) * double(op.inputs[1][1]);
  return t * e;
}

/// `op` with every shape replaced by its per-device shard under `sig` on `mesh`, and the head
/// counts of an attention, a rotary or a grouped RMSNorm by the heads each device holds.
inline op_node localize(const op_node& op, const signature& sig, const mesh_shape& mesh) {
  op_node l = op;
  for (std::size_t i = 0; i < op.inputs.size(); ++i) l.inputs[i] = local_shape(op.inputs[i], {sig.inputs[i], mesh});
  for (std::size_t i = 0; i < op.params.size(); ++i) l.params[i] = local_shape(op.params[i], {sig.params[i], mesh});
  for (std::size_t i = 0; i < op.outputs.size(); ++i) l.outputs[i] = local_shape(op.outputs[i], {sig.outputs[i], mesh});
  if (op.kind == op_kind::attention) {
    l.attrs.heads = int(op.attrs.heads / split_factor(sig.inputs[0], mesh, 2));
    if (op.attrs.kv_heads > 0) l.attrs.kv_heads = int(op.attrs.kv_heads / split_factor(sig.inputs[1], mesh, 2));
  }
  if (op.kind == op_kind::rotary || op.kind == op_kind::rmsnorm) {
    const int last = op.inputs[0].rank() - 1;
    l.attrs.heads = int(op.attrs.heads / split_factor(sig.inputs[0], mesh, last));
  }
  return l;
}
}  // namespace detail

/// Global forward FLOPs of `op`. Example: linear [8,64] x [64,32] + b: 2*8*64*32 + 8*32.
inline double forward_flops(const op_node& op) { return detail::flops_of(op); }
/// Global backward FLOPs of `op` (input gradient + weight gradient).
inline double backward_flops(const op_node& op) { return detail::bwd_of(op, detail::flops_of(op)); }

/// Per-device work of `op` under `sig` on `mesh`, with `elem_bytes` per activation element.
/// @pre signature_problem(op, sig, mesh) is empty (throws layout_error otherwise).
inline op_work device_work(const op_node& op, const signature& sig, const mesh_shape& mesh, int elem_bytes) {
  check_signature(op, sig, mesh);
  op_node l = detail::localize(op, sig, mesh);
  op_work w;
  w.kind = work_kind_of(op.kind);
  w.fwd_flops = detail::flops_of(l);
  w.bwd_flops = detail::bwd_of(l, w.fwd_flops);
  w.activation_bytes = std::int64_t(detail::saved_bytes(l, elem_bytes));
  w.fwd_bytes_moved = std::int64_t(detail::moved_bytes(l, elem_bytes));
  if (op.kind == op_kind::cross_entropy) {
    const int last = op.inputs[0].rank() - 1;
    std::int64_t rows = l.inputs[0].elements() / l.inputs[0][last];
    for (int a = 0; a < mesh.size(); ++a)
      if (sig.inputs[0][a].is_split() && sig.inputs[0][a].dim == last) {  // as the kernel calls them:
        w.stat_all_reduces.push_back({a, rows * statistic_bytes(elem_bytes)});      // the row max,
        w.stat_all_reduces.push_back({a, 2 * rows * statistic_bytes(elem_bytes)});  // sum of exp and target logit
      }
  }
  return w;
}

}  // namespace autoddl
