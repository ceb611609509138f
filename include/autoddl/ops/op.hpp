#pragma once
// The operator vocabulary: what an operator is (kind, attributes, global tensor shapes) and what
// a signature is (one nd-SBP per input, parameter and output). The per-axis rules live in one
// file per op family; autoddl/ops/signatures.hpp combines them across mesh axes.
//
// Example, a linear layer on a 2x4 mesh in the notation:
//   X[S(0),B] W[B,S(1)] b[B,S(0)] -> Y[S(0),S(1)]
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "autoddl/sbp/nd_sbp.hpp"
#include "autoddl/sbp/shape.hpp"
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
};


/// Whether input i of an op of kind k holds indices (std::int64_t), not values: the token ids
/// of an embedding and the labels of a cross-entropy. They travel in operands::indices.
constexpr bool is_index_input(op_kind k, std::size_t i) {
  return (k == op_kind::embedding && i == 0) || (k == op_kind::cross_entropy && i == 1);
}


struct op_attrs {
  int kernel = 1;            ///< conv2d, max_pool: square window side
  int stride = 1;            ///< conv2d, max_pool
  int padding = 0;           ///< conv2d, max_pool: zeros on each side
  int heads = 1;             ///< attention: query heads; rotary: heads of its tensor; rmsnorm: groups normed apart
  int kv_heads = 0;          ///< attention: key/value heads (grouped-query attention); 0 = heads
  bool causal = false;       ///< attention: token i sees keys <= i
  double dropout = 0.0;      ///< dropout: drop probability; attention: on the probabilities
  bool bias = true;          ///< linear, conv2d: has a bias parameter
  bool transpose_w = false;  ///< linear: W stored [out, in] (the tied GPT output head)
  bool positions = false;    ///< embedding: adds a learned position table [seq, hidden]
  tensor_shape target{};     ///< reshape: the global output shape
  double eps = 1e-5;         ///< rmsnorm: added to the mean square
  double rope_theta = 10000; ///< rotary: the base of the angles, theta^(-2i/d) per position
  int topk = 1;              ///< router, load_balance: experts per token
  int capacity = 0;          ///< dispatch: slots per expert per sequence (ops/moe.hpp, capacity_slots)
  bool renormalize = false;  ///< router: the top-k weights are scaled to sum to 1 (Mixtral, Qwen3-MoE)
  double aux_coef = 0.01;    ///< load_balance: the loss's coefficient
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

constexpr std::string_view to_string(op_kind k) {
  switch (k) {
    case op_kind::linear: return "linear";
    case op_kind::matmul: return "matmul";
    case op_kind::batched_matmul: return "batched_matmul";
    case op_kind::conv2d: return "conv2d";
    case op_kind::max_pool: return "max_pool";
    case op_kind::relu: return "relu";
    case op_kind::gelu: return "gelu";
    case op_kind::dropout: return "dropout";
    case op_kind::layernorm: return "layernorm";
    case op_kind::softmax: return "softmax";
    case op_kind::attention: return "attention";
    case op_kind::embedding: return "embedding";
    case op_kind::cross_entropy: return "cross_entropy";
    case op_kind::add: return "add";
    case op_kind::reshape: return "reshape";
    case op_kind::rmsnorm: return "rmsnorm";
    case op_kind::silu: return "silu";
    case op_kind::mul: return "mul";
    case op_kind::rotary: return "rotary";
    case op_kind::router: return "router";
    case op_kind::load_balance: return "load_balance";
    case op_kind::dispatch: return "dispatch";
    case op_kind::experts: return "experts";
    case op_kind::combine: return "combine";
  }
  return "?";
}

constexpr work_kind work_kind_of(op_kind k) {
  switch (k) {
    case op_kind::linear:
    case op_kind::matmul:
    case op_kind::batched_matmul:
    case op_kind::attention:
    case op_kind::experts: return work_kind::gemm;
    case op_kind::conv2d: return work_kind::conv;
    default: return work_kind::elementwise;
  }
}

/// Whether the op is linear in each activation input, so it may consume P (a sum of parts in, a sum of parts out):
/// linear, matmul (one side at a time), batched matmul, conv2d, add, reshape, mul (one side at a
/// time: a (b1 + b2) = a b1 + a b2), rotary (a rotation per position), and dispatch and combine
/// in their first input (a copy of rows, a weighted sum of rows).
constexpr bool accepts_partial(op_kind k) {
  switch (k) {
    case op_kind::linear:
    case op_kind::matmul:
    case op_kind::batched_matmul:
    case op_kind::conv2d:
    case op_kind::add:
    case op_kind::reshape:
    case op_kind::mul:
    case op_kind::rotary:
    case op_kind::dispatch:
    case op_kind::combine: return true;
    default: return false;
  }
}

/// The names used when printing a signature: inputs, then parameters, then the output.
struct tensor_names {
  std::vector<std::string_view> inputs, params;
  std::string_view output = "Y";
};

// (no `c ? tensor_names{...} : tensor_names{...}` here: g++ 12 then reads freed storage in
// constant expressions, where typed models name a pinned parameter in their diagnostics)
constexpr tensor_names names_of(const op_node& op) {
  switch (op.kind) {
    case op_kind::linear:
    case op_kind::conv2d:
      if (op.attrs.bias) return {{"X"}, {"W", "b"}};
      return {{"X"}, {"W"}};
    case op_kind::matmul: return {{"X", "W"}, {}};
    case op_kind::batched_matmul: return {{"A", "B"}, {}};
    case op_kind::layernorm: return {{"X"}, {"gamma", "beta"}};
    case op_kind::rmsnorm: return {{"X"}, {"gamma"}};
    case op_kind::mul: return {{"A", "B"}, {}};
    case op_kind::attention: return {{"q", "k", "v"}, {}};
    case op_kind::embedding:
      if (op.attrs.positions) return {{"ids"}, {"W", "pos"}};
      return {{"ids"}, {"W"}};
    case op_kind::cross_entropy: return {{"logits", "labels"}, {}, "loss"};
    case op_kind::add: return {{"A", "B"}, {}};
    case op_kind::router: return {{"logits"}, {}, "G"};
    case op_kind::load_balance: return {{"logits"}, {}, "loss"};
    case op_kind::dispatch:
    case op_kind::combine: return {{"X", "G"}, {}};
    case op_kind::experts: return {{"X"}, {"W_gate", "W_up", "W_down"}};
    default: return {{"X"}, {}};
  }
}

}  // namespace autoddl
