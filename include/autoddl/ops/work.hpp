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
// - Attention core, fused (the default kernel, FlashAttention-2's algorithm, Dao 2023): QK^T
//   and PV are 2 * 2 * d FLOPs per score the kernel computes, plus 5 per score for scale, mask
//   and the online softmax. The scores are its tiles (attention_tiles.hpp): the whole square
//   without a mask; under a causal mask the query tiles against the key tiles up to their last
//   query's position (about half the square at long sequences). Under a query-sequence split the
//   price is the busiest device's (the step waits for it): in the natural order the last chunk
//   of queries (it sees every key), q_offset = seq_k - local seq_q; in the balanced order
//   (op_attrs::balanced_context, token_order.hpp) every device alike, about half that at many
//   devices. The balanced order adds memory-bound copies (op_work::fwd_copy_bytes): the gathered
//   keys and values put in natural order, forward and again in backward, their gradients put
//   back, and each query run after a sequence's first adding its dK and dV in. Backward recomputes QK^T and runs four gradient
//   GEMMs (dV, dP, dQ, dK): 2.5 x the forward's GEMM FLOPs, plus 5 per score (the exp again,
//   the dropout mask, dS = P (dP - D)) and 2 per output element for D = rowsum(dO * O).
//   Kept: q, k, v, the output and one log-sum-exp statistic per row [b, heads, seq_q]; the
//   memory traffic is the operands' and the statistic's, no score leaves a tile.
// - Attention core, unfused (op_attrs::unfused_attention): QK^T and AV are 2 * 2 * batch * seq_q
//   * seq_k * hidden (Narayanan 2021's attention term, causal masking not halved, the price of a
//   dense kernel) plus 5 FLOPs per score for scale, mask, softmax; backward 2 x forward; kept:
//   q, k, v and the probabilities [b, heads, seq_q, seq_k], written and read back once more.
// - Attention with fewer key/value heads (grouped-query) computes the same scores per query
//   head: the formula reads the query's hidden size.
// - Element-wise ops are priced by bytes moved, their FLOPs are nominal per element: relu 1,
//   add 1, mul 1, dropout 2, rotary 3 (two products and a sum per element), rmsnorm 4 (square,
//   sum, scale, gamma), silu 4 (x / (1 + exp(-x))), swiglu 5 (silu and the product; backward 10:
//   silu again, a product per factor, silu's derivative), softmax 5, layernorm 8, gelu 8 (tanh form),
//   cross-entropy 5 per logit, max-pool kernel^2 per output; backward = forward (add and reshape:
//   0, gradients pass through; mul 2: a product per factor).
// - Mixture of experts (ops/moe.hpp): router 6 per logit (softmax 5, the top-k 1), load_balance
//   7 per logit; dispatch a copy (0, priced by bytes); experts three GEMMs per slot row,
//   2 * 3 * rows * h * F, plus 5 * rows * F for SiLU and the product, backward 2 x forward;
//   combine 2 per element of X (a weighted sum), backward 2 x forward. Every slot is computed,
//   used or not, as the executor does: the capacity's padding costs what it costs.
//   routed_experts (dropless) computes the routed rows only: on a device holding E_l of the E
//   experts (and F_l of each one's width), for t tokens, the expected rows under balanced routing
//   are t k E_l / E, times attrs.imbalance where the busiest device is priced above the mean; forward 2 * 3 * rows * h * F_l (three GEMMs), 5 * rows * F_l (SiLU and the
//   product) and 2 * rows * h (the weighted sum); backward 12 * rows * h * F_l (six GEMMs),
//   10 * rows * F_l (SwiGLU's backward, as swiglu's) and 4 * rows * h (dX rows and dG). Its
//   permutes are copies priced by bytes (op_work::fwd_copy_bytes), its GEMMs one expert at a
//   time (op_work::gemms) and its routed counts exchanged before a dispatch over an expert split
//   (op_work::count_exchanges): ops/expert_work.hpp says each term and its source. sigmoid_gate (the shared
//   expert's gate) 1 per element of X (the product) and 4 per gate (the sigmoid, as silu's);
//   backward 3 per element of X (dX a product, dZ a multiply-add) and 4 per gate (the
//   sigmoid again and its derivative).
// - Embedding: a gather (0 FLOPs; +1 per output element to add positions); backward scatter-adds
//   one element per output element.
// - Per device, the same formulas run on the device's local shapes (autoddl/sbp/layout.hpp
//   local_shape): a P or B tensor is whole there, a split one is a shard.
#include <algorithm>
#include <concepts>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "autoddl/attention_tiles.hpp"
#include "autoddl/ops/expert_work.hpp"
#include "autoddl/ops/op.hpp"
#include "autoddl/ops/signatures.hpp"
#include "autoddl/sbp/layout.hpp"
#include "autoddl/token_order.hpp"

namespace autoddl {

/// What the backward of an op of kind k reads besides dY, its parameters and its forward's
/// saved products (forward_result::saved): which of its inputs (bit i: input i; an index input
/// is read through operands::indices) and whether its own output. It is what the planner prices
/// as the op's kept activations (detail::saved_bytes below; Korthikanti et al. 2022), and all
/// the executor (runtime/trainer.hpp) keeps of an op's operands and outputs from its forward to
/// its backward:
///   linear, conv2d, max_pool, gelu, layernorm   X           matmul, batched_matmul  both inputs
///   silu, rmsnorm                               X           mul, swiglu             both inputs
///   (swiglu's output, read by the down projection's backward, is recomputed from both inputs
///   there rather than kept: output_recomputed_for_readers)
///   attention (fused)                           q, k, v, Y  relu, softmax           Y
///   attention (unfused_attention)               q, k, v
///   embedding                                   the ids     cross_entropy           logits, labels
///   dropout (mask rekeyed), add, reshape, rotary (the inverse rotation of dY)       nothing
///   router, load_balance     logits     dispatch   G (the slot map)     combine   both inputs
///   experts                  X, and its saved gate and up products [rows, F]
///   routed_experts           X, G, and its saved gate and up products [rows, F] and expert outputs [rows, h]
///   sigmoid_gate             both inputs
struct backward_reads {
  std::uint32_t inputs = 0;
  bool output = false;
  constexpr bool input(std::size_t i) const { return i < 32 && ((inputs >> i) & 1u) != 0; }
};

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
  /// memory traffic of copies besides the kernel proper (the balanced attention's reorder of its
  /// keys and values), priced at the memory bandwidth
  double fwd_copy_bytes = 0, bwd_copy_bytes = 0;
  std::vector<stat_all_reduce> stat_all_reduces;  ///< forward all-reduces beyond boxing
  /// experts and routed_experts: their GEMMs one expert at a time, and the routed counts
  /// exchanged before a dropless dispatch over an expert split (ops/expert_work.hpp)
  expert_gemms gemms;
  std::vector<count_exchange> count_exchanges;
};

/// Bytes of one row statistic (layernorm's mean and 1/std, cross-entropy's max and sums) for
/// elements of `elem_bytes`: the statistic type (backend/device.hpp, statistic_t) is float for
/// the 2-byte types and the element type otherwise.
constexpr int statistic_bytes(int elem_bytes) { return elem_bytes < 4 ? 4 : elem_bytes; }

namespace detail {
inline double elems(const tensor_shape& s) { return double(s.elements()); }

// Formulas several kinds share, from the shapes in `op` (global or local, same formula).
/// 2 M N K (+ M N for a linear's bias): linear, matmul, batched matmul.
inline double gemm_flops(const op_node& op) {
  const tensor_shape& x = op.inputs[0];
  const double k = double(x[x.rank() - 1]), y = elems(op.outputs[0]);
  const bool bias = op.kind == op_kind::linear && op.attrs.bias;
  return 2.0 * y * k + (bias ? y : 0.0);
}
/// N FLOPs per element of the output.
template <int N>
double per_output(const op_node& op) { return N * elems(op.outputs[0]); }
/// N FLOPs per element of the first input.
template <int N>
double per_input(const op_node& op) { return N * elems(op.inputs[0]); }
/// Twice the forward's FLOPs: the input gradient and the weight gradient, each a GEMM of the
/// forward's size (or, for mul and combine, a product per factor).
template <double (*Forward)(const op_node&)>
double twice(const op_node& op) { return 2.0 * Forward(op); }
inline double no_flops(const op_node&) { return 0.0; }
inline double no_bytes(const op_node&, int) { return 0.0; }
/// The first input kept for backward.
inline double first_input_bytes(const op_node& op, int e) { return elems(op.inputs[0]) * e; }
/// Both inputs kept for backward.
inline double both_inputs_bytes(const op_node& op, int e) { return (elems(op.inputs[0]) + elems(op.inputs[1])) * e; }
/// The output kept for backward.
inline double output_bytes(const op_node& op, int e) { return elems(op.outputs[0]) * e; }

// Formulas of one kind each.
inline double conv2d_flops(const op_node& op) {
  const double y = elems(op.outputs[0]);
  const op_attrs& a = op.attrs;
  return 2.0 * y * double(op.inputs[0][1]) * a.kernel * a.kernel + (a.bias ? y : 0.0);
}
inline double max_pool_flops(const op_node& op) { return elems(op.outputs[0]) * op.attrs.kernel * op.attrs.kernel; }
/// The token order a device holding `op`'s (local) shapes runs it in: the balanced order of a
/// self-attention's query split into sk / sq parts where the op asks for it, else natural.
inline token_order attention_order_of(const op_node& op) {
  const std::int64_t sq = op.inputs[0][1], sk = op.inputs[1][1];
  if (!op.attrs.balanced_context || op.attrs.unfused_attention || sq <= 0 || sq >= sk || sk % sq != 0) return {sk, 1};
  return balanced_order(sk, sk / sq);
}
/// Scores the fused kernel computes on the busiest device holding `op`'s shapes (see the
/// conventions above): every sequence and head, the tiles of its queries against its keys.
inline double attention_tile_scores_of(const op_node& op) {
  const auto& in = op.inputs;
  const std::int64_t sq = in[0][1], sk = in[1][1];
  const bool causal = op.attrs.causal;
  const token_order order = attention_order_of(op);
  const double per_head = order.natural() ? attention_tile_scores(sq, sk, causal ? sk - sq : 0, causal)
                                          : attention_busiest_scores(sk, sk / sq, order, causal);
  return double(in[0][0]) * op.attrs.heads * per_head;
}
/// The balanced attention's copies (runtime/kernels/attention.hpp): k and v read and written
/// into natural order forward (4 K elements, K = the local k's), again in backward with dK and dV
/// written back (8 K), and dK and dV of the second query run of each sequence added in (6 K: a
/// read of both, a write). Two runs: the balanced order's busiest device.
inline std::pair<double, double> attention_copy_bytes(const op_node& op, int e) {
  if (attention_order_of(op).natural()) return {0.0, 0.0};
  const double k = elems(op.inputs[1]) * e;
  return {4.0 * k, 14.0 * k};
}
/// Head size: the query hidden size over the query heads.
inline double attention_head_size(const op_node& op) { return double(op.inputs[0][2]) / op.attrs.heads; }
inline double attention_flops(const op_node& op) {
  const auto& in = op.inputs;
  const double b = double(in[0][0]), sq = double(in[0][1]), sk = double(in[1][1]), h = double(in[0][2]);
  if (op.attrs.unfused_attention) return 4.0 * b * sq * sk * h + 5.0 * b * sq * sk * double(op.attrs.heads);
  const double scores = attention_tile_scores_of(op);
  return 4.0 * scores * attention_head_size(op) + 5.0 * scores;
}
inline double attention_bwd_flops(const op_node& op) {
  if (op.attrs.unfused_attention) return 2.0 * attention_flops(op);
  const double scores = attention_tile_scores_of(op);
  return 10.0 * scores * attention_head_size(op) + 5.0 * scores + 2.0 * elems(op.outputs[0]);
}
/// A gather: nothing, or an add per output element with learned positions.
inline double embedding_flops(const op_node& op) { return op.attrs.positions ? elems(op.outputs[0]) : 0.0; }
/// Three GEMMs per slot row and 5 per element of the [rows, F] products (SiLU and the product).
inline double experts_flops(const op_node& op) {
  const tensor_shape& x = op.inputs[0];
  const double rows = elems(x) / double(x[3]), f = double(op.params[0][2]);
  return 6.0 * rows * double(x[3]) * f + 5.0 * rows * f;
}
inline double routed_experts_flops(const op_node& op) {
  const double rows = routed_rows(op), h = double(op.inputs[0][2]), f = double(op.params[0][2]);
  return 6.0 * rows * h * f + 5.0 * rows * f + 2.0 * rows * h;
}
inline double routed_experts_bwd_flops(const op_node& op) {
  const double rows = routed_rows(op), h = double(op.inputs[0][2]), f = double(op.params[0][2]);
  return 12.0 * rows * h * f + 10.0 * rows * f + 4.0 * rows * h;
}
/// sigmoid_gate: a product per element of X, a sigmoid per gate; backward a product and a
/// multiply-add per element, the sigmoid and its derivative per gate.
inline double sigmoid_gate_flops(const op_node& op) { return elems(op.inputs[0]) + 4.0 * elems(op.inputs[1]); }
inline double sigmoid_gate_bwd_flops(const op_node& op) { return 3.0 * elems(op.inputs[0]) + 4.0 * elems(op.inputs[1]); }
/// X, and 1/rms per normed group in the statistic type.
inline double rmsnorm_bytes(const op_node& op, int e) {
  const tensor_shape& x = op.inputs[0];
  const double groups = elems(x) / double(x[x.rank() - 1]) * double(op.attrs.heads);
  return elems(x) * e + groups * statistic_bytes(e);
}
/// X, and mean and 1/std per row in the statistic type.
inline double layernorm_bytes(const op_node& op, int e) {
  const tensor_shape& x = op.inputs[0];
  const double rows = elems(x) / double(x[x.rank() - 1]);
  return elems(x) * e + 2.0 * rows * statistic_bytes(e);
}
/// Fused: q, k, v, the output and one log-sum-exp per row [b, heads, sq] in the statistic type.
/// Unfused: q, k, v and the probabilities [b, heads, sq, sk].
inline double attention_bytes(const op_node& op, int e) {
  const auto& in = op.inputs;
  const double rows = double(in[0][0]) * double(op.attrs.heads) * double(in[0][1]);
  const double qkv = elems(in[0]) + elems(in[1]) + elems(in[2]);
  if (op.attrs.unfused_attention) return (qkv + rows * double(in[1][1])) * e;
  return (qkv + elems(op.outputs[0])) * e + rows * statistic_bytes(e);
}
/// The token ids, int64.
inline double ids_bytes(const op_node& op, int) { return elems(op.inputs[0]) * 8; }
/// The logits, and the labels as int64.
inline double cross_entropy_bytes(const op_node& op, int e) { return elems(op.inputs[0]) * e + elems(op.inputs[1]) * 8; }
/// The gates G (input 1): the backward rebuilds the slot map from them.
inline double gates_bytes(const op_node& op, int e) { return elems(op.inputs[1]) * e; }
/// X, G, and per routed row the gate and up products and the expert's output.
inline double routed_experts_bytes(const op_node& op, int e) {
  const double rows = routed_rows(op);
  return (elems(op.inputs[0]) + elems(op.inputs[1]) + rows * (2.0 * double(op.params[0][2]) + double(op.inputs[0][2]))) * e;
}
/// X, and the gate and up products per slot row.
inline double experts_bytes(const op_node& op, int e) {
  const tensor_shape& x = op.inputs[0];
  const double rows = elems(x) / double(x[3]);
  return (elems(x) + 2.0 * rows * double(op.params[0][2])) * e;
}
}  // namespace detail

// ---- the work facts of every kind ------------------------------------------------------------
/// op_work_traits<K> holds, for kind K (formulas from the shapes in `op`, global or local):
///   reads                  what its backward reads (backward_reads_of)
///   forward_flops(op)      its forward FLOPs
///   backward_flops(op)     its backward FLOPs, stated for every kind (the conventions above)
///   kept_bytes(op, e)      bytes kept for backward with `e` bytes per element. Token ids and
///                          labels are int64 (8 bytes); attention keeps one log-sum-exp per row
///                          (fused), or its probabilities [b, heads, sq, sk] before dropout
///                          (unfused; Korthikanti et al. 2022, activation memory of
///                          self-attention). Dropout masks are not kept: the mask is a
///                          counter-based hash of (seed, op, element), recomputed in backward
///                          (backend/device.hpp, dropout_keep), where Korthikanti count 1 byte per
///                          element.
template <op_kind K>
struct op_work_traits;

template <> struct op_work_traits<op_kind::linear> {
  static constexpr backward_reads reads{0b1, false};
  static constexpr auto forward_flops = detail::gemm_flops;
  static constexpr auto backward_flops = detail::twice<detail::gemm_flops>;
  static constexpr auto kept_bytes = detail::first_input_bytes;
};
template <> struct op_work_traits<op_kind::matmul> {
  static constexpr backward_reads reads{0b11, false};
  static constexpr auto forward_flops = detail::gemm_flops;
  static constexpr auto backward_flops = detail::twice<detail::gemm_flops>;
  static constexpr auto kept_bytes = detail::both_inputs_bytes;
};
template <> struct op_work_traits<op_kind::batched_matmul> {
  static constexpr backward_reads reads{0b11, false};
  static constexpr auto forward_flops = detail::gemm_flops;
  static constexpr auto backward_flops = detail::twice<detail::gemm_flops>;
  static constexpr auto kept_bytes = detail::both_inputs_bytes;
};
template <> struct op_work_traits<op_kind::conv2d> {
  static constexpr backward_reads reads{0b1, false};
  static constexpr auto forward_flops = detail::conv2d_flops;
  static constexpr auto backward_flops = detail::twice<detail::conv2d_flops>;
  static constexpr auto kept_bytes = detail::first_input_bytes;
};
template <> struct op_work_traits<op_kind::max_pool> {
  static constexpr backward_reads reads{0b1, false};
  static constexpr auto forward_flops = detail::max_pool_flops;
  static constexpr auto backward_flops = detail::max_pool_flops;
  static constexpr auto kept_bytes = detail::first_input_bytes;
};
template <> struct op_work_traits<op_kind::relu> {
  static constexpr backward_reads reads{0, true};
  static constexpr auto forward_flops = detail::per_output<1>;
  static constexpr auto backward_flops = detail::per_output<1>;
  static constexpr auto kept_bytes = detail::output_bytes;
};
template <> struct op_work_traits<op_kind::gelu> {
  static constexpr backward_reads reads{0b1, false};
  static constexpr auto forward_flops = detail::per_input<8>;
  static constexpr auto backward_flops = detail::per_input<8>;
  static constexpr auto kept_bytes = detail::first_input_bytes;
};
template <> struct op_work_traits<op_kind::dropout> {
  static constexpr backward_reads reads{0, false};
  static constexpr auto forward_flops = detail::per_output<2>;
  static constexpr auto backward_flops = detail::per_output<2>;
  static constexpr auto kept_bytes = detail::no_bytes;
};
template <> struct op_work_traits<op_kind::layernorm> {
  static constexpr backward_reads reads{0b1, false};
  static constexpr auto forward_flops = detail::per_input<8>;
  static constexpr auto backward_flops = detail::per_input<8>;
  static constexpr auto kept_bytes = detail::layernorm_bytes;
};
template <> struct op_work_traits<op_kind::softmax> {
  static constexpr backward_reads reads{0, true};
  static constexpr auto forward_flops = detail::per_input<5>;
  static constexpr auto backward_flops = detail::per_input<5>;
  static constexpr auto kept_bytes = detail::output_bytes;
};
template <> struct op_work_traits<op_kind::attention> {
  static constexpr backward_reads reads{0b111, true};  // the fused kernel's; backward_reads_of(op) for the unfused
  static constexpr auto forward_flops = detail::attention_flops;
  static constexpr auto backward_flops = detail::attention_bwd_flops;
  static constexpr auto kept_bytes = detail::attention_bytes;
};
template <> struct op_work_traits<op_kind::embedding> {
  static constexpr backward_reads reads{0b1, false};
  static constexpr auto forward_flops = detail::embedding_flops;
  static constexpr auto backward_flops = detail::per_output<1>;
  static constexpr auto kept_bytes = detail::ids_bytes;
};
template <> struct op_work_traits<op_kind::cross_entropy> {
  static constexpr backward_reads reads{0b11, false};
  static constexpr auto forward_flops = detail::per_input<5>;
  static constexpr auto backward_flops = detail::per_input<5>;
  static constexpr auto kept_bytes = detail::cross_entropy_bytes;
};
template <> struct op_work_traits<op_kind::add> {
  static constexpr backward_reads reads{0, false};
  static constexpr auto forward_flops = detail::per_output<1>;
  static constexpr auto backward_flops = detail::no_flops;
  static constexpr auto kept_bytes = detail::no_bytes;
};
template <> struct op_work_traits<op_kind::reshape> {
  static constexpr backward_reads reads{0, false};
  static constexpr auto forward_flops = detail::no_flops;
  static constexpr auto backward_flops = detail::no_flops;
  static constexpr auto kept_bytes = detail::no_bytes;
};
template <> struct op_work_traits<op_kind::rmsnorm> {
  static constexpr backward_reads reads{0b1, false};
  static constexpr auto forward_flops = detail::per_output<4>;
  static constexpr auto backward_flops = detail::per_output<4>;
  static constexpr auto kept_bytes = detail::rmsnorm_bytes;
};
template <> struct op_work_traits<op_kind::silu> {
  static constexpr backward_reads reads{0b1, false};
  static constexpr auto forward_flops = detail::per_output<4>;
  static constexpr auto backward_flops = detail::per_output<4>;
  static constexpr auto kept_bytes = detail::first_input_bytes;
};
template <> struct op_work_traits<op_kind::mul> {
  static constexpr backward_reads reads{0b11, false};
  static constexpr auto forward_flops = detail::per_output<1>;
  static constexpr auto backward_flops = detail::twice<detail::per_output<1>>;
  static constexpr auto kept_bytes = detail::both_inputs_bytes;
};
template <> struct op_work_traits<op_kind::swiglu> {
  static constexpr backward_reads reads{0b11, false};
  static constexpr auto forward_flops = detail::per_output<5>;
  static constexpr auto backward_flops = detail::per_output<10>;
  static constexpr auto kept_bytes = detail::both_inputs_bytes;
};
template <> struct op_work_traits<op_kind::rotary> {
  static constexpr backward_reads reads{0, false};
  static constexpr auto forward_flops = detail::per_output<3>;
  static constexpr auto backward_flops = detail::per_output<3>;
  static constexpr auto kept_bytes = detail::no_bytes;
};
template <> struct op_work_traits<op_kind::router> {
  static constexpr backward_reads reads{0b1, false};
  static constexpr auto forward_flops = detail::per_input<6>;
  static constexpr auto backward_flops = detail::per_input<6>;
  static constexpr auto kept_bytes = detail::first_input_bytes;
};
template <> struct op_work_traits<op_kind::load_balance> {
  static constexpr backward_reads reads{0b1, false};
  static constexpr auto forward_flops = detail::per_input<7>;
  static constexpr auto backward_flops = detail::per_input<7>;
  static constexpr auto kept_bytes = detail::first_input_bytes;
};
template <> struct op_work_traits<op_kind::dispatch> {
  static constexpr backward_reads reads{0b10, false};
  static constexpr auto forward_flops = detail::no_flops;
  static constexpr auto backward_flops = detail::no_flops;
  static constexpr auto kept_bytes = detail::gates_bytes;
};
template <> struct op_work_traits<op_kind::experts> {
  static constexpr backward_reads reads{0b1, false};
  static constexpr auto forward_flops = detail::experts_flops;
  static constexpr auto backward_flops = detail::twice<detail::experts_flops>;
  static constexpr auto kept_bytes = detail::experts_bytes;
};
template <> struct op_work_traits<op_kind::combine> {
  static constexpr backward_reads reads{0b11, false};
  static constexpr auto forward_flops = detail::per_input<2>;
  static constexpr auto backward_flops = detail::twice<detail::per_input<2>>;
  static constexpr auto kept_bytes = detail::both_inputs_bytes;
};
template <> struct op_work_traits<op_kind::routed_experts> {
  static constexpr backward_reads reads{0b11, false};
  static constexpr auto forward_flops = detail::routed_experts_flops;
  static constexpr auto backward_flops = detail::routed_experts_bwd_flops;
  static constexpr auto kept_bytes = detail::routed_experts_bytes;
};
template <> struct op_work_traits<op_kind::sigmoid_gate> {
  static constexpr backward_reads reads{0b11, false};
  static constexpr auto forward_flops = detail::sigmoid_gate_flops;
  static constexpr auto backward_flops = detail::sigmoid_gate_bwd_flops;
  static constexpr auto kept_bytes = detail::both_inputs_bytes;
};
/// Whether Traits (op_work_traits<K> of one kind K) holds every work fact; see check_op_traits.
template <class Traits>
consteval bool check_op_work_traits() {
  static_assert(requires { sizeof(Traits); }, "op_work_traits<K> is not specialised for this kind: give it the kind's work facts");
  static_assert(requires { { Traits::reads } -> std::convertible_to<backward_reads>; },
                "op_work_traits<K> lacks reads: say what the kind's backward reads of its inputs and output");
  static_assert(requires(const op_node& op) { { Traits::forward_flops(op) } -> std::same_as<double>; },
                "op_work_traits<K> lacks forward_flops(op): state the kind's forward FLOPs");
  static_assert(requires(const op_node& op) { { Traits::backward_flops(op) } -> std::same_as<double>; },
                "op_work_traits<K> lacks backward_flops(op): state the kind's backward FLOPs (never assume the forward's)");
  static_assert(requires(const op_node& op, int e) { { Traits::kept_bytes(op, e) } -> std::same_as<double>; },
                "op_work_traits<K> lacks kept_bytes(op, e): state the bytes the kind keeps for its backward");
  return true;
}

/// check_op_work_traits for every kind of an enum of Count kinds with traits Traits<K>.
template <class Kind, std::size_t Count, template <Kind> class Traits>
consteval bool every_kind_has_work_traits() {
  return detail::every_kind<Kind, Count>([](auto k) { return check_op_work_traits<Traits<decltype(k)::value>>(); });
}
static_assert(every_kind_has_work_traits<op_kind, op_kind_count, op_work_traits>());

/// What op's backward reads (op_work_traits<K>::reads), for the kernel its attributes choose:
/// the unfused attention reads q, k and v but not its output.
constexpr backward_reads backward_reads_of(const op_node& op) {
  if (op.kind == op_kind::attention && op.attrs.unfused_attention) return {0b111, false};
  return visit_op_kind(op.kind, [](auto K) { return op_work_traits<K.value>::reads; });
}

/// Whether op's output is recomputed from its kept inputs for the backwards that read it in place
/// rather than kept from forward: the fused SwiGLU's product silu(gate) * up, read by the down
/// projection's weight gradient. SwiGLU's own backward keeps gate and up, so the product costs 5
/// FLOPs per element again (its forward) and no kept bytes: the MLP keeps 2F per token, not 3F
/// (F its width). plan/step_schedule.hpp says where the step reruns it.
constexpr bool output_recomputed_for_readers(const op_node& op) { return op.kind == op_kind::swiglu; }
static_assert(op_work_traits<op_kind::swiglu>::reads.inputs == 0b11, "a recomputed output's inputs must be kept for its rerun");

namespace detail {
/// Forward FLOPs from the shapes in `op` (global or local, same formula).
inline double flops_of(const op_node& op) {
  return visit_op_kind(op.kind, [&](auto K) { return op_work_traits<K.value>::forward_flops(op); });
}
inline double bwd_flops_of(const op_node& op) {
  return visit_op_kind(op.kind, [&](auto K) { return op_work_traits<K.value>::backward_flops(op); });
}
/// Bytes kept for backward, from the shapes in `op` (global or local).
inline double saved_bytes(const op_node& op, int e) {
  return visit_op_kind(op.kind, [&](auto K) { return op_work_traits<K.value>::kept_bytes(op, e); });
}

inline double moved_bytes(const op_node& op, int e) {
  double t = 0;
  for (const tensor_shape& s : op.inputs) t += elems(s);
  for (const tensor_shape& s : op.params) t += elems(s);
  for (const tensor_shape& s : op.outputs) t += elems(s);
  const double rows = op.kind == op_kind::attention ? double(op.inputs[0][0]) * op.attrs.heads * double(op.inputs[0][1]) : 0;
  if (op.kind == op_kind::attention && op.attrs.unfused_attention)  // probabilities written and read back
    return (t + 2.0 * rows * double(op.inputs[1][1])) * e;
  return t * e + rows * statistic_bytes(e);  // the fused kernel's lse; its scores stay in tiles
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
inline double backward_flops(const op_node& op) { return detail::bwd_flops_of(op); }

/// Per-device work of `op` under `sig` on `mesh`, with `elem_bytes` per activation element.
/// @pre signature_problem(op, sig, mesh) is empty (throws layout_error otherwise).
inline op_work device_work(const op_node& op, const signature& sig, const mesh_shape& mesh, int elem_bytes) {
  check_signature(op, sig, mesh);
  op_node l = detail::localize(op, sig, mesh);
  op_work w;
  w.kind = work_kind_of(op.kind);
  w.fwd_flops = detail::flops_of(l);
  w.bwd_flops = detail::bwd_flops_of(l);
  w.activation_bytes = std::int64_t(detail::saved_bytes(l, elem_bytes));
  w.fwd_bytes_moved = std::int64_t(detail::moved_bytes(l, elem_bytes));
  if (op.kind == op_kind::attention) std::tie(w.fwd_copy_bytes, w.bwd_copy_bytes) = detail::attention_copy_bytes(l, elem_bytes);
  if (op.kind == op_kind::experts || op.kind == op_kind::routed_experts) {  // ops/expert_work.hpp
    expert_work x = detail::expert_work_of(op, l, sig, mesh, elem_bytes);
    w.gemms = x.gemms;
    w.fwd_copy_bytes = x.fwd_copy_bytes;
    w.bwd_copy_bytes = x.bwd_copy_bytes;
    w.count_exchanges = std::move(x.counts);
  }
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
