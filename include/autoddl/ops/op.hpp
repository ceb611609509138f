#pragma once
// The operator vocabulary: what an operator is (kind, attributes, global tensor shapes) and what
// a signature is (one nd-SBP per input, parameter and output). The per-axis rules live in one
// file per op family; autoddl/ops/signatures.hpp combines them across mesh axes.
//
// Example, a linear layer on a 2x4 mesh in the notation:
//   X[S(0),B] W[B,S(1)] b[B,S(0)] -> Y[S(0),S(1)]
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "autoddl/error.hpp"
#include "autoddl/ops/detail/kinds.hpp"
#include "autoddl/sbp/nd_sbp.hpp"
#include "autoddl/sbp/shape.hpp"
#include "autoddl/text.hpp"
#include "autoddl/work_kind.hpp"

namespace autoddl {

enum class op_kind : std::uint8_t {
  linear,          ///< Y = X W + b; X [..., in], W [in, out] ([out, in] with transpose_w), b [out]
  matmul,          ///< Y = X W, both activations; X [..., k], W [k, n]
  batched_matmul,  ///< Y = A B per batch; A [..., m, k], B [..., k, n], same leading dims
  conv2d,          ///< X [N, C, H, W], W [O, C, kernel, kernel], b [O] -> [N, O, H', W']
  max_pool,        ///< X [N, C, H, W] -> [N, C, H', W'], square window
  relu,
  gelu,
  dropout,
  layernorm,       ///< over the last dim; gamma [h], beta [h]
  softmax,         ///< over the last dim
  attention,       ///< multi-head attention core: q, k, v [batch, seq, hidden] -> [batch, seq, hidden]
  embedding,       ///< ids [batch, seq], W [vocab, hidden] (+ learned positions [seq, hidden])
  cross_entropy,   ///< softmax cross-entropy: logits [..., vocab], labels [...] -> mean loss []
  add,             ///< residual add of two same-shape tensors
  reshape,         ///< to attrs.target, same number of elements
  rmsnorm,         ///< root-mean-square norm over the last dim (over each of attrs.heads groups of it); gamma
  silu,            ///< x sigmoid(x)
  mul,             ///< element-wise product of two same-shape tensors (SwiGLU's gate times up)
  rotary,          ///< rotary position embedding of q or k [batch, seq, attrs.heads * d], pairs (i, i + d/2)
  router,          ///< logits [b, s, E] -> gates [b, s, E]: top attrs.topk of the softmax, the rest 0 (ops/moe.hpp)
  load_balance,    ///< logits [b, s, E] -> the balancing loss [] (Switch Transformer's, per sequence)
  dispatch,        ///< X [b, s, h], gates [b, s, E] -> [b, E, attrs.capacity, h]: each expert's slots
  experts,         ///< X [b, E, C, h] through E SwiGLU MLPs: W_gate, W_up [E, h, F], W_down [E, F, h]
  combine,         ///< X [b, E, C, h], gates [b, s, E] -> [b, s, h]: each token's experts, weighted
  swiglu,          ///< silu(gate) * up of two same-shape tensors in one op (LLaMA's MLP): keeps gate and up
  routed_experts,  ///< X [b, s, h], gates [b, s, E] through each token's top-k of E SwiGLU experts, dropless (ops/moe.hpp)
  sigmoid_gate,    ///< X [b, s, h] scaled per token by sigmoid(Z), Z [b, s, 1]: Qwen2-MoE's shared-expert gate (ops/moe.hpp)
  // A new kind goes last, raises op_kind_count, and gets its entry in every table of facts:
  // op_traits (here), op_shape_traits (ops/shapes.hpp), op_signature_traits (ops/signatures.hpp),
  // op_work_traits (ops/work.hpp), op_kernel_traits (runtime/op_kernels.hpp). Each table checks
  // at compile time that every kind has every fact, naming the kind and the fact it lacks.
};

/// The number of op kinds; the enumerators run 0 .. op_kind_count - 1.
inline constexpr std::size_t op_kind_count = 27;
static_assert(std::size_t(op_kind::sigmoid_gate) + 1 == op_kind_count,
              "op_kind_count counts op_kind's enumerators: add a kind after the last one and raise the count");

/// f(std::integral_constant<op_kind, K>{}) for the run-time kind k: how a run-time question
/// reaches a kind's traits. Throws error when k is no enumerator (a value cast from a number).
template <class F>
constexpr decltype(auto) visit_op_kind(op_kind k, F&& f) {
  if (std::size_t(k) >= op_kind_count)
    detail::fail<error>("op kind " + detail::itos(int(k)) + " is not an enumerator of op_kind; build ops of the kinds ops/op.hpp lists");
  return detail::visit_kind<op_kind, op_kind_count>(k, std::forward<F>(f));
}


struct op_attrs {
  int kernel = 1;            ///< conv2d, max_pool: square window side
  int stride = 1;            ///< conv2d, max_pool
  int padding = 0;           ///< conv2d, max_pool: zeros on each side
  int heads = 1;             ///< attention: query heads; rotary: heads of its tensor; rmsnorm: groups normed apart
  int kv_heads = 0;          ///< attention: key/value heads (grouped-query attention); 0 = heads
  bool causal = false;       ///< attention: token i sees keys <= i
  double dropout = 0.0;      ///< dropout: drop probability; attention: on the probabilities
  bool unfused_attention = false;  ///< attention: the unfused kernel (probabilities [b, heads, sq, sk] kept)
  /// attention (fused): a query-sequence split into p parts takes the tokens in the balanced
  /// order, chunks d and 2p-1-d on part d (token_order.hpp); the model reads positions only
  /// through rotary embeddings and the mask (no position table, no dropout, no experts)
  bool balanced_context = false;
  bool bias = true;          ///< linear, conv2d: has a bias parameter
  bool transpose_w = false;  ///< linear: W stored [out, in] (the tied GPT output head)
  bool positions = false;    ///< embedding: adds a learned position table [seq, hidden]
  tensor_shape target{};     ///< reshape: the global output shape
  double eps = 1e-5;         ///< rmsnorm: added to the mean square
  double rope_theta = 10000; ///< rotary: the base of the angles, theta^(-2i/d) per position
  int topk = 1;              ///< router, load_balance, dispatch, combine, routed_experts: experts per token (the router's)
  int capacity = 0;          ///< dispatch: slots per expert per sequence (ops/moe.hpp, capacity_slots)
  bool renormalize = false;  ///< router: the top-k weights are scaled to sum to 1 (Mixtral, Qwen3-MoE)
  double aux_coef = 0.01;    ///< load_balance: the loss's coefficient
  /// routed_experts: the busiest device's routed rows over balanced routing's, >= 1 (prices only)
  double imbalance = 1;
  /// attention: key/value heads (kv_heads, or heads where 0)
  constexpr int key_value_heads() const { return kv_heads > 0 ? kv_heads : heads; }
};

struct op_node {
  std::string name;                   ///< e.g. "h3.attn.q"
  op_kind kind = op_kind::relu;
  op_attrs attrs{};
  std::vector<tensor_shape> inputs;   ///< global shapes of the activation inputs
  std::vector<tensor_shape> params;   ///< global shapes of its parameters, as stored
  std::vector<int> param_ids;         ///< index into graph::params (tied weights share an id)
  std::vector<tensor_shape> outputs;  ///< global shapes of its outputs
};

/// One nd-SBP per input, parameter and output of an op, in the op_node's order.
struct signature {
  std::vector<nd_sbp> inputs, params, outputs;
  friend bool operator==(const signature&, const signature&) = default;
};

/// The names used when printing a signature: inputs, then parameters, then the output.
struct tensor_names {
  std::vector<std::string_view> inputs, params;
  std::string_view output = "Y";
};

// ---- the vocabulary facts of every kind -------------------------------------------------------
// op_traits<K> holds, for kind K:
//   name             its text form (to_string, parse_op_kind, model files, diagnostics)
//   work             the kind of its FLOPs (work_kind_of; cost/ applies each kind's efficiency)
//   index_inputs     bit i set: input i holds indices (std::int64_t, in operands::indices): the
//                    token ids of an embedding and the labels of a cross-entropy
//   accepts_partial  whether it is linear in each activation input, so it may consume P (a sum
//                    of parts in, a sum of parts out): mul one side at a time (a (b1 + b2) =
//                    a b1 + a b2), swiglu in its up factor, rotary a rotation per position,
//                    dispatch and combine in their first input (a copy of rows, a weighted sum
//                    of rows)
//   names(attrs)     the tensor names of its signature (names_of)
// (names return through if statements, not `c ? tensor_names{...} : tensor_names{...}`: g++ 12
// then reads freed storage in constant expressions, where typed models name a pinned parameter)
template <op_kind K>
struct op_traits;

namespace detail {
/// The vocabulary facts shared by the kinds that read one tensor X, take no parameter and give Y.
struct one_input_op {
  static constexpr std::uint32_t index_inputs = 0;
  static constexpr tensor_names names(const op_attrs&) { return {{"X"}, {}}; }
};
/// ... that read two tensors A and B of one shape and take no parameter.
struct two_input_op {
  static constexpr std::uint32_t index_inputs = 0;
  static constexpr tensor_names names(const op_attrs&) { return {{"A", "B"}, {}}; }
};
/// ... that read X and a bias-optional weight: linear and conv2d.
struct weighted_op {
  static constexpr std::uint32_t index_inputs = 0;
  static constexpr tensor_names names(const op_attrs& a) {
    if (a.bias) return {{"X"}, {"W", "b"}};
    return {{"X"}, {"W"}};
  }
};
}  // namespace detail

template <> struct op_traits<op_kind::linear> : detail::weighted_op {
  static constexpr std::string_view name = "linear";
  static constexpr work_kind work = work_kind::gemm;
  static constexpr bool accepts_partial = true;
};
template <> struct op_traits<op_kind::matmul> {
  static constexpr std::string_view name = "matmul";
  static constexpr work_kind work = work_kind::gemm;
  static constexpr std::uint32_t index_inputs = 0;
  static constexpr bool accepts_partial = true;
  static constexpr tensor_names names(const op_attrs&) { return {{"X", "W"}, {}}; }
};
template <> struct op_traits<op_kind::batched_matmul> : detail::two_input_op {
  static constexpr std::string_view name = "batched_matmul";
  static constexpr work_kind work = work_kind::gemm;
  static constexpr bool accepts_partial = true;
};
template <> struct op_traits<op_kind::conv2d> : detail::weighted_op {
  static constexpr std::string_view name = "conv2d";
  static constexpr work_kind work = work_kind::conv;
  static constexpr bool accepts_partial = true;
};
template <> struct op_traits<op_kind::max_pool> : detail::one_input_op {
  static constexpr std::string_view name = "max_pool";
  static constexpr work_kind work = work_kind::elementwise;
  static constexpr bool accepts_partial = false;
};
template <> struct op_traits<op_kind::relu> : detail::one_input_op {
  static constexpr std::string_view name = "relu";
  static constexpr work_kind work = work_kind::elementwise;
  static constexpr bool accepts_partial = false;
};
template <> struct op_traits<op_kind::gelu> : detail::one_input_op {
  static constexpr std::string_view name = "gelu";
  static constexpr work_kind work = work_kind::elementwise;
  static constexpr bool accepts_partial = false;
};
template <> struct op_traits<op_kind::dropout> : detail::one_input_op {
  static constexpr std::string_view name = "dropout";
  static constexpr work_kind work = work_kind::elementwise;
  static constexpr bool accepts_partial = false;
};
template <> struct op_traits<op_kind::layernorm> {
  static constexpr std::string_view name = "layernorm";
  static constexpr work_kind work = work_kind::elementwise;
  static constexpr std::uint32_t index_inputs = 0;
  static constexpr bool accepts_partial = false;
  static constexpr tensor_names names(const op_attrs&) { return {{"X"}, {"gamma", "beta"}}; }
};
template <> struct op_traits<op_kind::softmax> : detail::one_input_op {
  static constexpr std::string_view name = "softmax";
  static constexpr work_kind work = work_kind::elementwise;
  static constexpr bool accepts_partial = false;
};
template <> struct op_traits<op_kind::attention> {
  static constexpr std::string_view name = "attention";
  static constexpr work_kind work = work_kind::attention;
  static constexpr std::uint32_t index_inputs = 0;
  static constexpr bool accepts_partial = false;
  static constexpr tensor_names names(const op_attrs&) { return {{"q", "k", "v"}, {}}; }
};
template <> struct op_traits<op_kind::embedding> {
  static constexpr std::string_view name = "embedding";
  static constexpr work_kind work = work_kind::elementwise;
  static constexpr std::uint32_t index_inputs = 0b1;  // the token ids
  static constexpr bool accepts_partial = false;
  static constexpr tensor_names names(const op_attrs& a) {
    if (a.positions) return {{"ids"}, {"W", "pos"}};
    return {{"ids"}, {"W"}};
  }
};
template <> struct op_traits<op_kind::cross_entropy> {
  static constexpr std::string_view name = "cross_entropy";
  static constexpr work_kind work = work_kind::elementwise;
  static constexpr std::uint32_t index_inputs = 0b10;  // the labels
  static constexpr bool accepts_partial = false;
  static constexpr tensor_names names(const op_attrs&) { return {{"logits", "labels"}, {}, "loss"}; }
};
template <> struct op_traits<op_kind::add> : detail::two_input_op {
  static constexpr std::string_view name = "add";
  static constexpr work_kind work = work_kind::elementwise;
  static constexpr bool accepts_partial = true;
};
template <> struct op_traits<op_kind::reshape> : detail::one_input_op {
  static constexpr std::string_view name = "reshape";
  static constexpr work_kind work = work_kind::elementwise;
  static constexpr bool accepts_partial = true;
};
template <> struct op_traits<op_kind::rmsnorm> {
  static constexpr std::string_view name = "rmsnorm";
  static constexpr work_kind work = work_kind::elementwise;
  static constexpr std::uint32_t index_inputs = 0;
  static constexpr bool accepts_partial = false;
  static constexpr tensor_names names(const op_attrs&) { return {{"X"}, {"gamma"}}; }
};
template <> struct op_traits<op_kind::silu> : detail::one_input_op {
  static constexpr std::string_view name = "silu";
  static constexpr work_kind work = work_kind::elementwise;
  static constexpr bool accepts_partial = false;
};
template <> struct op_traits<op_kind::mul> : detail::two_input_op {
  static constexpr std::string_view name = "mul";
  static constexpr work_kind work = work_kind::elementwise;
  static constexpr bool accepts_partial = true;
};
template <> struct op_traits<op_kind::swiglu> {
  static constexpr std::string_view name = "swiglu";
  static constexpr work_kind work = work_kind::elementwise;
  static constexpr std::uint32_t index_inputs = 0;
  static constexpr bool accepts_partial = true;
  static constexpr tensor_names names(const op_attrs&) { return {{"gate", "up"}, {}}; }
};
template <> struct op_traits<op_kind::rotary> : detail::one_input_op {
  static constexpr std::string_view name = "rotary";
  static constexpr work_kind work = work_kind::elementwise;
  static constexpr bool accepts_partial = true;
};
template <> struct op_traits<op_kind::router> {
  static constexpr std::string_view name = "router";
  static constexpr work_kind work = work_kind::elementwise;
  static constexpr std::uint32_t index_inputs = 0;
  static constexpr bool accepts_partial = false;
  static constexpr tensor_names names(const op_attrs&) { return {{"logits"}, {}, "G"}; }
};
template <> struct op_traits<op_kind::load_balance> {
  static constexpr std::string_view name = "load_balance";
  static constexpr work_kind work = work_kind::elementwise;
  static constexpr std::uint32_t index_inputs = 0;
  static constexpr bool accepts_partial = false;
  static constexpr tensor_names names(const op_attrs&) { return {{"logits"}, {}, "loss"}; }
};
template <> struct op_traits<op_kind::dispatch> {
  static constexpr std::string_view name = "dispatch";
  static constexpr work_kind work = work_kind::elementwise;
  static constexpr std::uint32_t index_inputs = 0;
  static constexpr bool accepts_partial = true;
  static constexpr tensor_names names(const op_attrs&) { return {{"X", "G"}, {}}; }
};
template <> struct op_traits<op_kind::experts> {
  static constexpr std::string_view name = "experts";
  static constexpr work_kind work = work_kind::gemm;
  static constexpr std::uint32_t index_inputs = 0;
  static constexpr bool accepts_partial = false;
  static constexpr tensor_names names(const op_attrs&) { return {{"X"}, {"W_gate", "W_up", "W_down"}}; }
};
template <> struct op_traits<op_kind::combine> {
  static constexpr std::string_view name = "combine";
  static constexpr work_kind work = work_kind::elementwise;
  static constexpr std::uint32_t index_inputs = 0;
  static constexpr bool accepts_partial = true;
  static constexpr tensor_names names(const op_attrs&) { return {{"X", "G"}, {}}; }
};
template <> struct op_traits<op_kind::routed_experts> {
  static constexpr std::string_view name = "routed_experts";
  static constexpr work_kind work = work_kind::gemm;
  static constexpr std::uint32_t index_inputs = 0;
  static constexpr bool accepts_partial = false;
  static constexpr tensor_names names(const op_attrs&) { return {{"X", "G"}, {"W_gate", "W_up", "W_down"}}; }
};
template <> struct op_traits<op_kind::sigmoid_gate> {
  static constexpr std::string_view name = "sigmoid_gate";
  static constexpr work_kind work = work_kind::elementwise;
  static constexpr std::uint32_t index_inputs = 0;
  static constexpr bool accepts_partial = true;  // in X: sigmoid(z) (x1 + x2) = sigmoid(z) x1 + sigmoid(z) x2
  static constexpr tensor_names names(const op_attrs&) { return {{"X", "Z"}, {}}; }
};

/// Whether Traits (op_traits<K> of one kind K) holds every vocabulary fact; a missing one fails
/// to compile with a message naming it, and the instantiation names the kind (Traits = ...<K>).
template <class Traits>
consteval bool check_op_traits() {
  static_assert(requires { sizeof(Traits); }, "op_traits<K> is not specialised for this kind: give it the kind's facts");
  static_assert(requires { { Traits::name } -> std::convertible_to<std::string_view>; },
                "op_traits<K> lacks name: give the kind its text form");
  static_assert(requires { { Traits::work } -> std::convertible_to<work_kind>; },
                "op_traits<K> lacks work: say whether its FLOPs are gemm, conv or elementwise");
  static_assert(requires { { Traits::index_inputs } -> std::convertible_to<std::uint32_t>; },
                "op_traits<K> lacks index_inputs: list the inputs that hold indices (0 for none)");
  static_assert(requires { { Traits::accepts_partial } -> std::convertible_to<bool>; },
                "op_traits<K> lacks accepts_partial: say whether the op is linear in its activation inputs");
  static_assert(requires(const op_attrs& a) { { Traits::names(a) } -> std::same_as<tensor_names>; },
                "op_traits<K> lacks names(attrs): name its inputs, parameters and output");
  return true;
}

/// check_op_traits for every kind of an enum of Count kinds with traits Traits<K>.
template <class Kind, std::size_t Count, template <Kind> class Traits>
consteval bool every_kind_has_op_traits() {
  return detail::every_kind<Kind, Count>([](auto k) { return check_op_traits<Traits<decltype(k)::value>>(); });
}
static_assert(every_kind_has_op_traits<op_kind, op_kind_count, op_traits>());

constexpr std::string_view to_string(op_kind k) {
  return visit_op_kind(k, [](auto K) { return op_traits<K.value>::name; });
}

/// The kind named `name` (to_string's inverse), or nullopt. Example: parse_op_kind("gelu") == op_kind::gelu.
constexpr std::optional<op_kind> parse_op_kind(std::string_view name) {
  for (std::size_t i = 0; i < op_kind_count; ++i)
    if (to_string(op_kind(i)) == name) return op_kind(i);
  return std::nullopt;
}

constexpr work_kind work_kind_of(op_kind k) {
  return visit_op_kind(k, [](auto K) { return op_traits<K.value>::work; });
}

/// Whether input i of an op of kind k holds indices (std::int64_t), not values: they travel in
/// operands::indices.
constexpr bool is_index_input(op_kind k, std::size_t i) {
  const std::uint32_t mask = visit_op_kind(k, [](auto K) { return op_traits<K.value>::index_inputs; });
  return i < 32 && ((mask >> i) & 1u) != 0;
}

/// Whether the op may consume P in its activation inputs (op_traits::accepts_partial).
constexpr bool accepts_partial(op_kind k) {
  return visit_op_kind(k, [](auto K) { return op_traits<K.value>::accepts_partial; });
}

constexpr tensor_names names_of(const op_node& op) {
  return visit_op_kind(op.kind, [&](auto K) { return op_traits<K.value>::names(op.attrs); });
}

}  // namespace autoddl
