#pragma once
// Signatures of an op on a mesh (docs/reference/ops.md): per mesh axis, the op's valid 1-D signatures (the
// per-family rules of matmul.hpp, conv.hpp, elementwise.hpp, attention.hpp, embedding.hpp,
// reshape.hpp, rotary.hpp, moe.hpp); the n-D signatures are their combinations across axes, kept when
// every tensor divides evenly and the op's n-D conditions hold (attention, rotary and a grouped
// RMSNorm split whole heads).
//   linear X [64,32], W [32,16], b [16] on 2x2 yields, among others,
//   X[S(0),B] W[B,S(1)] b[B,S(0)] -> Y[S(0),S(1)]
// Backward: the gradient of a tensor laid out B on an axis is P there, of P is B, of S(d) is
// S(d) (dual); parameter gradients come out in dual(param layout), boxed later by the planner.
#include <concepts>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "autoddl/ops/attention.hpp"
#include "autoddl/ops/conv.hpp"
#include "autoddl/ops/elementwise.hpp"
#include "autoddl/ops/embedding.hpp"
#include "autoddl/ops/matmul.hpp"
#include "autoddl/ops/moe.hpp"
#include "autoddl/ops/op.hpp"
#include "autoddl/ops/reshape.hpp"
#include "autoddl/ops/rotary.hpp"
#include "autoddl/sbp/layout.hpp"

namespace autoddl {

/// B <-> P on every axis, S(d) stays: the layout of a gradient. Example: dual([S(0),B]) == [S(0),P].
constexpr sbp dual(sbp v) {
  if (v.is_broadcast()) return P;
  if (v.is_partial()) return B;
  return v;
}
constexpr nd_sbp dual(const nd_sbp& v) {
  nd_sbp r;
  for (sbp a : v) r.push_back(dual(a));
  return r;
}

// ---- the signature rule of every kind --------------------------------------------------------
/// op_signature_traits<K>::axis(op, in, pr): the output SBP of an op of kind K on one mesh axis for
/// the given input and parameter SBPs on that axis, or nullopt when the kind has no such 1-D
/// signature (its per-family rule: matmul.hpp, conv.hpp, elementwise.hpp, ...). @pre op's shapes
/// are consistent.
template <op_kind K>
struct op_signature_traits;

namespace detail {
using axis_sbps = std::span<const sbp>;
}  // namespace detail

template <> struct op_signature_traits<op_kind::linear> {
  static constexpr auto axis = [](const op_node& op, detail::axis_sbps in, detail::axis_sbps pr) -> std::optional<sbp> {
    const op_attrs& a = op.attrs;
    return a.bias ? linear_axis(in[0], pr[0], pr[1], op.inputs[0].rank(), a.transpose_w)
                  : matmul_axis(in[0], pr[0], op.inputs[0].rank(), a.transpose_w);
  };
};
template <> struct op_signature_traits<op_kind::matmul> {
  static constexpr auto axis = [](const op_node& op, detail::axis_sbps in, detail::axis_sbps) -> std::optional<sbp> {
    return matmul_axis(in[0], in[1], op.inputs[0].rank());
  };
};
template <> struct op_signature_traits<op_kind::batched_matmul> {
  static constexpr auto axis = [](const op_node& op, detail::axis_sbps in, detail::axis_sbps) -> std::optional<sbp> {
    return batched_matmul_axis(in[0], in[1], op.inputs[0].rank());
  };
};
template <> struct op_signature_traits<op_kind::conv2d> {
  static constexpr auto axis = [](const op_node& op, detail::axis_sbps in, detail::axis_sbps pr) -> std::optional<sbp> {
    const op_attrs& a = op.attrs;
    const bool pw = pointwise_window(a.kernel, a.stride, a.padding);
    return a.bias ? conv2d_bias_axis(in[0], pr[0], pr[1], pw) : conv2d_axis(in[0], pr[0], pw);
  };
};
template <> struct op_signature_traits<op_kind::max_pool> {
  static constexpr auto axis = [](const op_node& op, detail::axis_sbps in, detail::axis_sbps) -> std::optional<sbp> {
    return max_pool_axis(in[0], pointwise_window(op.attrs.kernel, op.attrs.stride, op.attrs.padding));
  };
};
template <> struct op_signature_traits<op_kind::relu> {
  static constexpr auto axis = [](const op_node&, detail::axis_sbps in, detail::axis_sbps) -> std::optional<sbp> {
    return pointwise_axis(in[0]);
  };
};
template <> struct op_signature_traits<op_kind::gelu> {
  static constexpr auto axis = [](const op_node&, detail::axis_sbps in, detail::axis_sbps) -> std::optional<sbp> {
    return pointwise_axis(in[0]);
  };
};
template <> struct op_signature_traits<op_kind::dropout> {
  static constexpr auto axis = [](const op_node&, detail::axis_sbps in, detail::axis_sbps) -> std::optional<sbp> {
    return pointwise_axis(in[0]);
  };
};
template <> struct op_signature_traits<op_kind::layernorm> {
  static constexpr auto axis = [](const op_node& op, detail::axis_sbps in, detail::axis_sbps pr) -> std::optional<sbp> {
    return layernorm_axis(in[0], pr[0], pr[1], op.inputs[0].rank());
  };
};
template <> struct op_signature_traits<op_kind::softmax> {
  static constexpr auto axis = [](const op_node& op, detail::axis_sbps in, detail::axis_sbps) -> std::optional<sbp> {
    return rowwise_axis(in[0], op.inputs[0].rank());
  };
};
template <> struct op_signature_traits<op_kind::attention> {
  static constexpr auto axis = [](const op_node& op, detail::axis_sbps in, detail::axis_sbps) -> std::optional<sbp> {
    return attention_axis(in[0], in[1], in[2], op.attrs.key_value_heads() < op.attrs.heads);
  };
};
template <> struct op_signature_traits<op_kind::embedding> {
  static constexpr auto axis = [](const op_node& op, detail::axis_sbps in, detail::axis_sbps pr) -> std::optional<sbp> {
    return op.attrs.positions ? embedding_axis(in[0], pr[0], pr[1]) : embedding_axis(in[0], pr[0], op.inputs[0].rank());
  };
};
template <> struct op_signature_traits<op_kind::cross_entropy> {
  static constexpr auto axis = [](const op_node& op, detail::axis_sbps in, detail::axis_sbps) -> std::optional<sbp> {
    return cross_entropy_axis(in[0], in[1], op.inputs[0].rank());
  };
};
template <> struct op_signature_traits<op_kind::add> {
  static constexpr auto axis = [](const op_node&, detail::axis_sbps in, detail::axis_sbps) -> std::optional<sbp> {
    return add_axis(in[0], in[1]);
  };
};
template <> struct op_signature_traits<op_kind::reshape> {
  static constexpr auto axis = [](const op_node& op, detail::axis_sbps in, detail::axis_sbps) -> std::optional<sbp> {
    return reshape_axis(in[0], op.inputs[0], op.outputs[0]);
  };
};
template <> struct op_signature_traits<op_kind::rmsnorm> {
  static constexpr auto axis = [](const op_node& op, detail::axis_sbps in, detail::axis_sbps pr) -> std::optional<sbp> {
    return rmsnorm_axis(in[0], pr[0], op.inputs[0].rank(), op.attrs.heads);
  };
};
template <> struct op_signature_traits<op_kind::silu> {
  static constexpr auto axis = [](const op_node&, detail::axis_sbps in, detail::axis_sbps) -> std::optional<sbp> {
    return pointwise_axis(in[0]);
  };
};
template <> struct op_signature_traits<op_kind::mul> {
  static constexpr auto axis = [](const op_node&, detail::axis_sbps in, detail::axis_sbps) -> std::optional<sbp> {
    return mul_axis(in[0], in[1]);
  };
};
template <> struct op_signature_traits<op_kind::swiglu> {
  static constexpr auto axis = [](const op_node&, detail::axis_sbps in, detail::axis_sbps) -> std::optional<sbp> {
    return swiglu_axis(in[0], in[1]);
  };
};
template <> struct op_signature_traits<op_kind::rotary> {
  static constexpr auto axis = [](const op_node&, detail::axis_sbps in, detail::axis_sbps) -> std::optional<sbp> {
    return rotary_axis(in[0]);
  };
};
template <> struct op_signature_traits<op_kind::router> {
  static constexpr auto axis = [](const op_node&, detail::axis_sbps in, detail::axis_sbps) -> std::optional<sbp> {
    return router_axis(in[0]);
  };
};
template <> struct op_signature_traits<op_kind::load_balance> {
  static constexpr auto axis = [](const op_node&, detail::axis_sbps in, detail::axis_sbps) -> std::optional<sbp> {
    return load_balance_axis(in[0]);
  };
};
template <> struct op_signature_traits<op_kind::dispatch> {
  static constexpr auto axis = [](const op_node&, detail::axis_sbps in, detail::axis_sbps) -> std::optional<sbp> {
    return dispatch_axis(in[0], in[1]);
  };
};
template <> struct op_signature_traits<op_kind::experts> {
  static constexpr auto axis = [](const op_node&, detail::axis_sbps in, detail::axis_sbps pr) -> std::optional<sbp> {
    return experts_axis(in[0], pr[0], pr[1], pr[2]);
  };
};
template <> struct op_signature_traits<op_kind::routed_experts> {
  static constexpr auto axis = [](const op_node&, detail::axis_sbps in, detail::axis_sbps pr) -> std::optional<sbp> {
    return routed_experts_axis(in[0], in[1], pr[0], pr[1], pr[2]);
  };
};
template <> struct op_signature_traits<op_kind::sigmoid_gate> {
  static constexpr auto axis = [](const op_node&, detail::axis_sbps in, detail::axis_sbps) -> std::optional<sbp> {
    return sigmoid_gate_axis(in[0], in[1]);
  };
};
template <> struct op_signature_traits<op_kind::combine> {
  static constexpr auto axis = [](const op_node&, detail::axis_sbps in, detail::axis_sbps) -> std::optional<sbp> {
    return combine_axis(in[0], in[1]);
  };
};

/// Whether Traits (op_signature_traits<K> of one kind K) states the per-axis rule; see check_op_traits.
template <class Traits>
consteval bool check_op_signature_traits() {
  static_assert(requires { sizeof(Traits); },
                "op_signature_traits<K> is not specialised for this kind: give it the kind's per-axis signature rule");
  static_assert(requires(const op_node& op, detail::axis_sbps s) { { Traits::axis(op, s, s) } -> std::same_as<std::optional<sbp>>; },
                "op_signature_traits<K> lacks axis(op, in, pr): state the kind's output SBP on one mesh axis");
  return true;
}

/// check_op_signature_traits for every kind of an enum of Count kinds with traits Traits<K>.
template <class Kind, std::size_t Count, template <Kind> class Traits>
consteval bool every_kind_has_signature_traits() {
  return detail::every_kind<Kind, Count>([](auto k) { return check_op_signature_traits<Traits<decltype(k)::value>>(); });
}
static_assert(every_kind_has_signature_traits<op_kind, op_kind_count, op_signature_traits>());

/// The output SBP of `op` on one mesh axis for the given input and parameter SBPs on that axis,
/// or nullopt when the op has no such 1-D signature. @pre op's shapes are consistent.
constexpr std::optional<sbp> axis_output(const op_node& op, std::span<const sbp> in, std::span<const sbp> pr) {
  return visit_op_kind(op.kind, [&](auto K) { return op_signature_traits<K.value>::axis(op, in, pr); });
}

/// The output nd-SBP of `op` for given input and parameter nd-SBPs: axis_output on every axis.
constexpr std::optional<nd_sbp> forward_output(const op_node& op, const std::vector<nd_sbp>& in,
                                            const std::vector<nd_sbp>& pr) {
  if (in.size() != op.inputs.size() || pr.size() != op.params.size()) return std::nullopt;
  int axes = in.empty() ? 0 : in[0].size();
  std::vector<sbp> ai(in.size()), ap(pr.size());
  nd_sbp r;
  for (int i = 0; i < axes; ++i) {
    for (std::size_t j = 0; j < in.size(); ++j) {
      if (in[j].size() != axes) return std::nullopt;
      ai[j] = in[j][i];
    }
    for (std::size_t j = 0; j < pr.size(); ++j) {
      if (pr[j].size() != axes) return std::nullopt;
      ap[j] = pr[j][i];
    }
    std::optional<sbp> o = axis_output(op, ai, ap);
    if (!o) return std::nullopt;
    r.push_back(*o);
  }
  return r;
}

/// The n-D conditions of `sig` beyond per-axis rules and divisibility ("" when they hold).
constexpr std::string nd_problem(const op_node& op, const signature& sig, const mesh_shape& mesh) {
  const op_attrs& a = op.attrs;
  if (op.kind == op_kind::attention && a.heads % split_factor(sig.inputs[0], mesh, 2) != 0)
    return "attention with " + detail::itos(a.heads) + " heads cannot split hidden " +
           detail::itos(split_factor(sig.inputs[0], mesh, 2)) + " ways under q " + to_string(sig.inputs[0]) +
           "; split hidden a number of ways that divides the head count";
  if (op.kind == op_kind::attention &&
      !attention_exact(sig.inputs[0], sig.inputs[1], mesh, a.heads, a.key_value_heads()))
    return "attention with " + detail::itos(a.key_value_heads()) + " key/value heads cannot split k " +
           detail::itos(split_factor(sig.inputs[1], mesh, 2)) + " ways under q " + to_string(sig.inputs[0]) + " k " +
           to_string(sig.inputs[1]) + "; split k into whole key/value heads, on the outermost of the axes that split q";
  const int last = op.inputs.empty() ? 0 : op.inputs[0].rank() - 1;
  if ((op.kind == op_kind::rotary || (op.kind == op_kind::rmsnorm && a.heads > 1)) &&
      a.heads % split_factor(sig.inputs[0], mesh, last) != 0)
    return std::string(to_string(op.kind)) + " op '" + op.name + "' over " + detail::itos(a.heads) +
           " heads cannot split its last dim " + detail::itos(split_factor(sig.inputs[0], mesh, last)) + " ways under X " +
           to_string(sig.inputs[0]) + "; split it a number of ways that divides the head count (whole heads per device)";
  return "";
}

/// "X[S(0),B] W[B,S(1)] b[B,S(0)] -> Y[S(0),S(1)]"
constexpr std::string to_string(const op_node& op, const signature& sig) {
  tensor_names nm = names_of(op);
  std::string r;
  auto put = [&](std::string_view n, const nd_sbp& v) {
    if (!r.empty()) r += " ";
    r += std::string(n) + to_string(v);
  };
  for (std::size_t i = 0; i < sig.inputs.size() && i < nm.inputs.size(); ++i) put(nm.inputs[i], sig.inputs[i]);
  for (std::size_t i = 0; i < sig.params.size() && i < nm.params.size(); ++i) put(nm.params[i], sig.params[i]);
  r += " ->";
  for (const nd_sbp& o : sig.outputs) r += " " + std::string(nm.output) + to_string(o);
  return r;
}

/// One sentence on why `sig` is not a valid signature of `op` on `mesh`, or "".
constexpr std::string signature_problem(const op_node& op, const signature& sig, const mesh_shape& mesh) {
  // the signature as text, made only for a sentence (the planner checks every candidate it
  // prices, and valid ones need none)
  auto s = [&] { return to_string(op, sig) + "@" + to_string(mesh); };
  if (sig.inputs.size() != op.inputs.size() || sig.params.size() != op.params.size() ||
      sig.outputs.size() != op.outputs.size())
    return "signature " + s() + " has the wrong number of tensors for " + std::string(to_string(op.kind)) + " op '" +
           op.name + "'";
  auto rank_ok = [&](const std::vector<nd_sbp>& v) {
    for (const nd_sbp& x : v) if (x.size() != mesh.size()) return false;
    return true;
  };
  if (!rank_ok(sig.inputs) || !rank_ok(sig.params) || !rank_ok(sig.outputs))
    return "signature " + s() + " needs one SBP per axis of the mesh " + to_string(mesh);
  std::optional<nd_sbp> y = forward_output(op, sig.inputs, sig.params);
  if (!y || !(*y == sig.outputs[0]))
    return "signature " + s() + " is not a rule of " + std::string(to_string(op.kind)) + " op '" + op.name +
           "' (nonlinear ops never take P; see the op's per-axis table); choose one from signatures()";
  auto check = [&](const std::vector<tensor_shape>& shapes, const std::vector<nd_sbp>& v) -> std::string {
    for (std::size_t i = 0; i < v.size(); ++i) {
      std::string why = divisibility_problem(shapes[i], layout{v[i], mesh});
      if (!why.empty()) return why;
    }
    return "";
  };
  for (std::string why : {check(op.inputs, sig.inputs), check(op.params, sig.params), check(op.outputs, sig.outputs)})
    if (!why.empty()) return "op '" + op.name + "': " + why;
  if (op.kind == op_kind::reshape) {
    std::string why = reshape_problem(sig.inputs[0], op.inputs[0], op.outputs[0]);
    if (!why.empty()) return why;
  }
  return nd_problem(op, sig, mesh);
}

/// Throws layout_error with signature_problem's sentence unless `sig` is valid.
inline void check_signature(const op_node& op, const signature& sig, const mesh_shape& mesh) {
  std::string why = signature_problem(op, sig, mesh);
  if (!why.empty()) detail::fail<layout_error>(why);
}

namespace detail {
/// Candidate SBPs of a tensor of rank r on one axis, in the listing order S(0..r-1), B, P.
constexpr std::vector<sbp> candidates(const tensor_shape& s) {
  std::vector<sbp> r;
  for (int d = 0; d < s.rank(); ++d) r.push_back(S(d));
  r.push_back(B);
  r.push_back(P);
  return r;
}

struct axis_signature {
  std::vector<sbp> inputs, params;
  sbp output;
};

/// All 1-D signatures of `op`: every combination of candidate SBPs of its inputs then parameters
/// (the first tensor most significant) that axis_output accepts.
constexpr std::vector<axis_signature> axis_signatures(const op_node& op) {
  std::vector<std::vector<sbp>> cand;
  for (const tensor_shape& s : op.inputs) cand.push_back(candidates(s));
  for (const tensor_shape& s : op.params) cand.push_back(candidates(s));
  const std::size_t ni = op.inputs.size(), n = cand.size();
  std::vector<std::size_t> idx(n, 0);
  std::vector<axis_signature> out;
  std::vector<sbp> in(ni), pr(n - ni);
  while (true) {
    for (std::size_t t = 0; t < n; ++t) (t < ni ? in[t] : pr[t - ni]) = cand[t][idx[t]];
    if (std::optional<sbp> y = axis_output(op, in, pr)) out.push_back({in, pr, *y});
    std::size_t t = n;
    while (t > 0 && ++idx[t - 1] == cand[t - 1].size()) idx[--t] = 0;
    if (t == 0) break;
  }
  return out;
}
}  // namespace detail

/// All valid n-D signatures of `op` on `mesh`, in a deterministic order: the per-axis lists
/// combined with axis 0 most significant, each list ordered as detail::axis_signatures.
constexpr std::vector<signature> signatures(const op_node& op, const mesh_shape& mesh) {
  std::vector<detail::axis_signature> one = detail::axis_signatures(op);
  std::vector<signature> out;
  if (one.empty() || mesh.size() == 0) return out;
  std::vector<std::size_t> idx(std::size_t(mesh.size()), 0);
  auto fits = [&](const std::vector<tensor_shape>& shapes, const std::vector<nd_sbp>& v) {
    for (std::size_t i = 0; i < v.size(); ++i)
      if (!divides(shapes[i], layout{v[i], mesh})) return false;
    return true;
  };
  while (true) {
    signature sig;
    sig.inputs.assign(op.inputs.size(), nd_sbp{});
    sig.params.assign(op.params.size(), nd_sbp{});
    sig.outputs.assign(1, nd_sbp{});
    for (std::size_t a = 0; a < idx.size(); ++a) {
      const detail::axis_signature& s = one[idx[a]];
      for (std::size_t j = 0; j < s.inputs.size(); ++j) sig.inputs[j].push_back(s.inputs[j]);
      for (std::size_t j = 0; j < s.params.size(); ++j) sig.params[j].push_back(s.params[j]);
      sig.outputs[0].push_back(s.output);
    }
    if (fits(op.inputs, sig.inputs) && fits(op.params, sig.params) && fits(op.outputs, sig.outputs) &&
        nd_problem(op, sig, mesh).empty())
      out.push_back(std::move(sig));
    std::size_t a = idx.size();
    while (a > 0 && ++idx[a - 1] == one.size()) idx[--a] = 0;
    if (a == 0) break;
  }
  return out;
}

/// The gradient layouts of a signature: dual of every tensor (inputs' grads, params' grads,
/// and the incoming output grad). Example: Y[S(0),B] -> dY[S(0),P].
constexpr signature backward(const signature& sig) {
  signature g;
  for (const nd_sbp& v : sig.inputs) g.inputs.push_back(dual(v));
  for (const nd_sbp& v : sig.params) g.params.push_back(dual(v));
  for (const nd_sbp& v : sig.outputs) g.outputs.push_back(dual(v));
  return g;
}

}  // namespace autoddl
