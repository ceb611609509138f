#pragma once
// Shape inference and checking of every op: the global output shapes an op_node's inputs,
// parameters and attributes imply. Builders fill op_node::outputs with it; validate() of a
// graph re-checks it. Errors name the op, the offending shape in the notation, and the fix.
//   linear X [8,1024,768], W [768,3072], b [3072] -> [8,1024,3072]
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "autoddl/ops/op.hpp"
#include "autoddl/error.hpp"

namespace autoddl {

namespace detail {
[[noreturn]] inline void shape_fail(const op_node& op, const std::string& what) {
  fail<layout_error>(std::string(to_string(op.kind)) + " op '" + op.name + "': " + what);
}
inline void expect_counts(const op_node& op, std::size_t inputs, std::size_t params) {
  if (op.inputs.size() != inputs || op.params.size() != params)
    shape_fail(op, "takes " + itos(std::int64_t(inputs)) + " inputs and " + itos(std::int64_t(params)) +
                       " parameters, got " + itos(std::int64_t(op.inputs.size())) + " and " +
                       itos(std::int64_t(op.params.size())) + "; build it with the op's documented operands");
}
inline void expect_rank(const op_node& op, const tensor_shape& s, const char* what, int lo, int hi) {
  if (s.rank() < lo || s.rank() > hi)
    shape_fail(op, std::string(what) + " " + to_string(s) + " has rank " + itos(s.rank()) + ", expected " +
                       (lo == hi ? itos(lo) : itos(lo) + " to " + itos(hi)));
}
inline void expect_shape(const op_node& op, const tensor_shape& got, const tensor_shape& want, const char* what) {
  if (!(got == want))
    shape_fail(op, std::string(what) + " has shape " + to_string(got) + ", expected " + to_string(want));
}
inline std::int64_t window_out(const op_node& op, std::int64_t in) {
  const op_attrs& a = op.attrs;
  if (a.kernel < 1 || a.stride < 1 || a.padding < 0)
    shape_fail(op, "window kernel=" + itos(a.kernel) + " stride=" + itos(a.stride) + " padding=" + itos(a.padding) +
                       " is invalid; use kernel >= 1, stride >= 1, padding >= 0");
  std::int64_t span = in + 2 * a.padding - a.kernel;
  if (span < 0) shape_fail(op, "input extent " + itos(in) + " is smaller than the window " + itos(a.kernel));
  return span / a.stride + 1;
}
inline tensor_shape with_last(tensor_shape s, std::int64_t v) {
  s[s.rank() - 1] = v;
  return s;
}
}  // namespace detail

// Output shape of each op kind; each checks its operands first (one sentence naming the op).
namespace detail {

inline tensor_shape linear_output(const op_node& op) {
  const auto& in = op.inputs;
  const auto& pr = op.params;
  const op_attrs& a = op.attrs;
  expect_counts(op, 1, a.bias ? 2 : 1);
  expect_rank(op, in[0], "X", 1, max_tensor_rank);
  expect_rank(op, pr[0], "W", 2, 2);
  const std::int64_t k = in[0][in[0].rank() - 1];
  const std::int64_t w_in = a.transpose_w ? pr[0][1] : pr[0][0], w_out = a.transpose_w ? pr[0][0] : pr[0][1];
  if (w_in != k)
    shape_fail(op, "W " + to_string(pr[0]) + " does not match X " + to_string(in[0]) + ": the contraction dim is " +
                       itos(k) + (a.transpose_w ? " (W stored [out, in])" : " (W stored [in, out])"));
  if (a.bias) expect_shape(op, pr[1], tensor_shape{w_out}, "b");
  return with_last(in[0], w_out);
}

inline tensor_shape matmul_output(const op_node& op) {
  const auto& in = op.inputs;
  expect_counts(op, 2, 0);
  expect_rank(op, in[0], "X", 1, max_tensor_rank);
  expect_rank(op, in[1], "W", 2, 2);
  if (in[1][0] != in[0][in[0].rank() - 1])
    shape_fail(op, "W " + to_string(in[1]) + " does not match X " + to_string(in[0]) + " in the contraction dim");
  return with_last(in[0], in[1][1]);
}

inline tensor_shape batched_matmul_output(const op_node& op) {
  const auto& in = op.inputs;
  expect_counts(op, 2, 0);
  expect_rank(op, in[0], "A", 3, max_tensor_rank);
  const int r = in[0].rank();
  tensor_shape want_b = in[0];
  want_b[r - 2] = in[0][r - 1];
  want_b[r - 1] = in[1].rank() == r ? in[1][r - 1] : 0;
  expect_shape(op, in[1], want_b, "B");
  return with_last(in[0], in[1][r - 1]);
}

inline tensor_shape window_output(const op_node& op) {  // conv2d and max_pool over NCHW
  const auto& in = op.inputs;
  const auto& pr = op.params;
  const op_attrs& a = op.attrs;
  const bool conv = op.kind == op_kind::conv2d;
  expect_counts(op, 1, conv ? (a.bias ? 2 : 1) : 0);
  expect_rank(op, in[0], "X", 4, 4);
  std::int64_t channels = in[0][1];
  if (conv) {
    expect_rank(op, pr[0], "W", 4, 4);
    expect_shape(op, pr[0], tensor_shape{pr[0][0], in[0][1], a.kernel, a.kernel}, "W");
    if (a.bias) expect_shape(op, pr[1], tensor_shape{pr[0][0]}, "b");
    channels = pr[0][0];
  }
  return tensor_shape{in[0][0], channels, window_out(op, in[0][2]), window_out(op, in[0][3])};
}

/// RMSNorm over the last dim, normed as attrs.heads groups of it: gamma has one group's size.
inline void check_rmsnorm(const op_node& op) {
  const auto& in = op.inputs;
  const op_attrs& a = op.attrs;
  expect_counts(op, 1, 1);
  expect_rank(op, in[0], "X", 1, max_tensor_rank);
  const std::int64_t last = in[0][in[0].rank() - 1];
  if (a.heads < 1 || last % a.heads != 0)
    shape_fail(op, "heads=" + itos(a.heads) + " does not divide the last dim " + itos(last) +
                       "; norm the whole dim (heads=1) or groups that divide it");
  if (!(a.eps > 0)) shape_fail(op, "eps must be positive");
  expect_shape(op, op.params[0], tensor_shape{last / a.heads}, "gamma");
}

/// Rotary embedding of X [batch, seq, heads * d]: d even (pairs i, i + d/2), theta > 0.
inline void check_rotary(const op_node& op) {
  const auto& in = op.inputs;
  const op_attrs& a = op.attrs;
  expect_counts(op, 1, 0);
  expect_rank(op, in[0], "X", 3, 3);
  if (a.heads < 1 || in[0][2] % a.heads != 0 || (in[0][2] / a.heads) % 2 != 0)
    shape_fail(op, "heads=" + itos(a.heads) + " must divide the hidden dim " + itos(in[0][2]) +
                       " into heads of an even size (rotated pairs i, i + d/2)");
  if (!(a.rope_theta > 0)) shape_fail(op, "rope_theta must be positive");
}

/// An element-wise op of one input and no parameter: Y has X's shape.
inline tensor_shape pointwise_output(const op_node& op) {
  expect_counts(op, 1, 0);
  return op.inputs[0];
}

inline tensor_shape softmax_output(const op_node& op) {
  expect_counts(op, 1, 0);
  expect_rank(op, op.inputs[0], "X", 1, max_tensor_rank);
  return op.inputs[0];
}

inline tensor_shape dropout_output(const op_node& op) {
  expect_counts(op, 1, 0);
  if (!(op.attrs.dropout >= 0.0 && op.attrs.dropout < 1.0)) shape_fail(op, "drop probability must lie in [0, 1)");
  return op.inputs[0];
}

/// add, mul and swiglu: two inputs of one shape.
inline tensor_shape same_pair_output(const op_node& op) {
  expect_counts(op, 2, 0);
  expect_shape(op, op.inputs[1], op.inputs[0], "B");
  return op.inputs[0];
}

inline tensor_shape layernorm_output(const op_node& op) {
  const auto& in = op.inputs;
  expect_counts(op, 1, 2);
  expect_rank(op, in[0], "X", 1, max_tensor_rank);
  const tensor_shape h{in[0][in[0].rank() - 1]};
  expect_shape(op, op.params[0], h, "gamma");
  expect_shape(op, op.params[1], h, "beta");
  return in[0];
}

inline tensor_shape rmsnorm_output(const op_node& op) {
  check_rmsnorm(op);
  return op.inputs[0];
}

inline tensor_shape rotary_output(const op_node& op) {
  check_rotary(op);
  return op.inputs[0];
}

inline tensor_shape attention_output(const op_node& op) {
  const auto& in = op.inputs;
  const op_attrs& a = op.attrs;
  expect_counts(op, 3, 0);
  expect_rank(op, in[0], "q", 3, 3);
  expect_rank(op, in[1], "k", 3, 3);
  expect_shape(op, in[2], in[1], "v");
  if (a.heads < 1 || in[0][2] % a.heads != 0)
    shape_fail(op, "heads=" + itos(a.heads) + " does not divide hidden " + itos(in[0][2]) +
                       "; choose a head count that divides the hidden size");
  const int kv = a.key_value_heads();
  if (kv < 1 || a.heads % kv != 0)
    shape_fail(op, "kv_heads=" + itos(kv) + " does not divide heads=" + itos(a.heads) +
                       "; grouped-query attention shares each key/value head among heads / kv_heads query heads");
  if (in[1][0] != in[0][0] || in[1][2] != in[0][2] / a.heads * kv)
    shape_fail(op, "k " + to_string(in[1]) + " does not match q " + to_string(in[0]) + " in batch or in " + itos(kv) +
                       " key/value heads of " + itos(in[0][2] / a.heads));
  if (a.causal && in[0][1] != in[1][1]) shape_fail(op, "a causal mask needs as many queries as keys");
  return in[0];
}

inline tensor_shape embedding_output(const op_node& op) {
  const auto& in = op.inputs;
  const auto& pr = op.params;
  expect_counts(op, 1, op.attrs.positions ? 2 : 1);
  expect_rank(op, in[0], "ids", 1, max_tensor_rank - 1);
  expect_rank(op, pr[0], "W", 2, 2);
  tensor_shape out = in[0];
  out.push_back(pr[0][1]);
  if (op.attrs.positions) {
    expect_rank(op, in[0], "ids (with positions)", 2, 2);
    expect_shape(op, pr[1], tensor_shape{in[0][1], pr[0][1]}, "pos");
  }
  return out;
}

inline tensor_shape cross_entropy_output(const op_node& op) {
  const auto& in = op.inputs;
  expect_counts(op, 2, 0);
  expect_rank(op, in[0], "logits", 1, max_tensor_rank);
  tensor_shape lab = in[0];
  lab.n = std::int8_t(lab.n - 1);
  expect_shape(op, in[1], lab, "labels");
  return tensor_shape{};
}

/// The mixture-of-experts ops (ops/moe.hpp): gates and logits [b, s, E], the dispatched
/// buffer [b, E, C, h] with 1 <= C <= s, the experts' weights [E, h, F], [E, h, F], [E, F, h].
inline void check_topk(const op_node& op, std::int64_t experts) {
  if (op.attrs.topk < 1 || op.attrs.topk > experts)
    shape_fail(op, "topk=" + itos(op.attrs.topk) + " must lie in [1, experts=" + itos(experts) +
                       "]; route each token to at least one and at most every expert");
}

/// router and load_balance: logits [b, s, E] and a top-k within the experts.
inline void check_logits(const op_node& op) {
  expect_counts(op, 1, 0);
  expect_rank(op, op.inputs[0], "logits", 3, 3);
  check_topk(op, op.inputs[0][2]);
}

inline tensor_shape router_output(const op_node& op) {
  check_logits(op);
  return op.inputs[0];
}

inline tensor_shape load_balance_output(const op_node& op) {
  check_logits(op);
  if (!(op.attrs.aux_coef >= 0)) shape_fail(op, "aux_coef must be non-negative");
  return tensor_shape{};
}

inline tensor_shape dispatch_output(const op_node& op) {
  const auto& in = op.inputs;
  const op_attrs& a = op.attrs;
  expect_counts(op, 2, 0);
  expect_rank(op, in[0], "X", 3, 3);
  expect_rank(op, in[1], "G", 3, 3);
  expect_shape(op, in[1], tensor_shape{in[0][0], in[0][1], in[1][2]}, "G");
  check_topk(op, in[1][2]);
  if (a.capacity < 1 || a.capacity > in[0][1])
    shape_fail(op, "capacity=" + itos(a.capacity) + " slots per expert must lie in [1, seq=" + itos(in[0][1]) + "]");
  return tensor_shape{in[0][0], in[1][2], a.capacity, in[0][2]};
}

/// E SwiGLU experts' weights of hidden size h: W_gate, W_up [E, h, F], W_down [E, F, h].
inline void expect_expert_weights(const op_node& op, std::int64_t e, std::int64_t h) {
  expect_rank(op, op.params[0], "W_gate", 3, 3);
  const std::int64_t f = op.params[0][2];
  expect_shape(op, op.params[0], tensor_shape{e, h, f}, "W_gate");
  expect_shape(op, op.params[1], tensor_shape{e, h, f}, "W_up");
  expect_shape(op, op.params[2], tensor_shape{e, f, h}, "W_down");
}

inline tensor_shape experts_output(const op_node& op) {
  const auto& in = op.inputs;
  expect_counts(op, 1, 3);
  expect_rank(op, in[0], "X", 4, 4);
  expect_expert_weights(op, in[0][1], in[0][3]);
  return in[0];
}

inline tensor_shape combine_output(const op_node& op) {
  const auto& in = op.inputs;
  expect_counts(op, 2, 0);
  expect_rank(op, in[0], "X", 4, 4);
  expect_rank(op, in[1], "G", 3, 3);
  if (in[1][0] != in[0][0] || in[1][2] != in[0][1] || in[0][2] > in[1][1])
    shape_fail(op, "X " + to_string(in[0]) + " does not match G " + to_string(in[1]) +
                       ": X is [batch, experts, slots <= seq, hidden] of G's [batch, seq, experts]");
  check_topk(op, in[1][2]);
  return tensor_shape{in[0][0], in[1][1], in[0][3]};
}

/// routed_experts: X [b, s, h], G [b, s, E], W_gate, W_up [E, h, F], W_down [E, F, h] -> [b, s, h].
inline tensor_shape routed_experts_output(const op_node& op) {
  const auto& in = op.inputs;
  expect_counts(op, 2, 3);
  expect_rank(op, in[0], "X", 3, 3);
  expect_rank(op, in[1], "G", 3, 3);
  expect_shape(op, in[1], tensor_shape{in[0][0], in[0][1], in[1][2]}, "G");
  check_topk(op, in[1][2]);
  expect_expert_weights(op, in[1][2], in[0][2]);
  return in[0];
}

/// sigmoid_gate: X [b, s, h], Z [b, s, 1] -> [b, s, h].
inline tensor_shape sigmoid_gate_output(const op_node& op) {
  const auto& in = op.inputs;
  expect_counts(op, 2, 0);
  expect_rank(op, in[0], "X", 3, 3);
  expect_shape(op, in[1], tensor_shape{in[0][0], in[0][1], 1}, "Z");
  return in[0];
}

inline tensor_shape reshape_output(const op_node& op) {
  expect_counts(op, 1, 0);
  const tensor_shape& target = op.attrs.target;
  if (!target.is_static() || !op.inputs[0].is_static() || target.elements() != op.inputs[0].elements())
    shape_fail(op, "cannot reshape " + to_string(op.inputs[0]) + " to " + to_string(target) +
                       "; the target must hold the same number of elements");
  return target;
}

}  // namespace detail

// ---- the shape rule of every kind ------------------------------------------------------------
/// op_shape_traits<K>::output(op): the global output shape of an op of kind K, after checking its
/// operands (one sentence naming the op). Every kind states its rule here.
template <op_kind K>
struct op_shape_traits;

template <> struct op_shape_traits<op_kind::linear> { static constexpr auto output = detail::linear_output; };
template <> struct op_shape_traits<op_kind::matmul> { static constexpr auto output = detail::matmul_output; };
template <> struct op_shape_traits<op_kind::batched_matmul> { static constexpr auto output = detail::batched_matmul_output; };
template <> struct op_shape_traits<op_kind::conv2d> { static constexpr auto output = detail::window_output; };
template <> struct op_shape_traits<op_kind::max_pool> { static constexpr auto output = detail::window_output; };
template <> struct op_shape_traits<op_kind::relu> { static constexpr auto output = detail::pointwise_output; };
template <> struct op_shape_traits<op_kind::gelu> { static constexpr auto output = detail::pointwise_output; };
template <> struct op_shape_traits<op_kind::dropout> { static constexpr auto output = detail::dropout_output; };
template <> struct op_shape_traits<op_kind::layernorm> { static constexpr auto output = detail::layernorm_output; };
template <> struct op_shape_traits<op_kind::softmax> { static constexpr auto output = detail::softmax_output; };
template <> struct op_shape_traits<op_kind::attention> { static constexpr auto output = detail::attention_output; };
template <> struct op_shape_traits<op_kind::embedding> { static constexpr auto output = detail::embedding_output; };
template <> struct op_shape_traits<op_kind::cross_entropy> { static constexpr auto output = detail::cross_entropy_output; };
template <> struct op_shape_traits<op_kind::add> { static constexpr auto output = detail::same_pair_output; };
template <> struct op_shape_traits<op_kind::reshape> { static constexpr auto output = detail::reshape_output; };
template <> struct op_shape_traits<op_kind::rmsnorm> { static constexpr auto output = detail::rmsnorm_output; };
template <> struct op_shape_traits<op_kind::silu> { static constexpr auto output = detail::pointwise_output; };
template <> struct op_shape_traits<op_kind::mul> { static constexpr auto output = detail::same_pair_output; };
template <> struct op_shape_traits<op_kind::swiglu> { static constexpr auto output = detail::same_pair_output; };
template <> struct op_shape_traits<op_kind::rotary> { static constexpr auto output = detail::rotary_output; };
template <> struct op_shape_traits<op_kind::router> { static constexpr auto output = detail::router_output; };
template <> struct op_shape_traits<op_kind::load_balance> { static constexpr auto output = detail::load_balance_output; };
template <> struct op_shape_traits<op_kind::dispatch> { static constexpr auto output = detail::dispatch_output; };
template <> struct op_shape_traits<op_kind::experts> { static constexpr auto output = detail::experts_output; };
template <> struct op_shape_traits<op_kind::combine> { static constexpr auto output = detail::combine_output; };
template <> struct op_shape_traits<op_kind::routed_experts> { static constexpr auto output = detail::routed_experts_output; };
template <> struct op_shape_traits<op_kind::sigmoid_gate> { static constexpr auto output = detail::sigmoid_gate_output; };

/// Whether Traits (op_shape_traits<K> of one kind K) states the shape rule; see check_op_traits.
template <class Traits>
consteval bool check_op_shape_traits() {
  static_assert(requires { sizeof(Traits); }, "op_shape_traits<K> is not specialised for this kind: give it the kind's shape rule");
  static_assert(requires(const op_node& op) { { Traits::output(op) } -> std::same_as<tensor_shape>; },
                "op_shape_traits<K> lacks output(op): state the kind's output shape and the checks of its operands");
  return true;
}

/// check_op_shape_traits for every kind of an enum of Count kinds with traits Traits<K>.
template <class Kind, std::size_t Count, template <Kind> class Traits>
consteval bool every_kind_has_shape_traits() {
  return detail::every_kind<Kind, Count>([](auto k) { return check_op_shape_traits<Traits<decltype(k)::value>>(); });
}
static_assert(every_kind_has_shape_traits<op_kind, op_kind_count, op_shape_traits>());

/// The output shapes of `op`. Throws layout_error when operands disagree.
inline std::vector<tensor_shape> infer_outputs(const op_node& op) {
  return {visit_op_kind(op.kind, [&](auto K) { return op_shape_traits<K.value>::output(op); })};
}

/// Throws layout_error unless op.outputs are what its operands imply.
inline void check_shapes(const op_node& op) {
  std::vector<tensor_shape> want = infer_outputs(op);
  if (op.outputs.size() != want.size() || !(op.outputs[0] == want[0]))
    detail::shape_fail(op, "output " + (op.outputs.empty() ? std::string("(none)") : to_string(op.outputs[0])) +
                               " should be " + to_string(want[0]));
}

}  // namespace autoddl
