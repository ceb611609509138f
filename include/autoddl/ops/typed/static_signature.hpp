#pragma once
// Signatures known at compile time: an op with static shapes on a static mesh (static_op), its
// valid signatures as a constexpr array (signatures_v), and one signature as a type
// (signature_constant), so that the searched path instantiates every candidate of a layer and
// dispatches to the one a plan picks. The list is the runtime one: signatures_v<op>[i] is
// signatures(to_op_node(op), op.mesh)[i] (one implementation, two binding times).
//
//   constexpr static_op q = linear_op({8, 128, 256}, 256, {2, 4});
//   signatures_v<q>.size()   // every valid X W b -> Y of the linear layer on 2x4
//   signatures_v<q>[0]       // X[S(0),S(0)] W[B,B] b[B,B] -> Y[S(0),S(0)]
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "autoddl/index.hpp"
#include "autoddl/ops/signatures.hpp"

namespace autoddl {

/// An op with static shapes on a static mesh; structural, so it can be a template argument.
/// Identical layers (same kind, attributes, shapes, mesh) are the same value, so their candidate
/// lists are instantiated once.
struct static_op {
  op_kind kind = op_kind::relu;
  int kernel = 1, stride = 1, padding = 0, heads = 1;
  bool causal = false, bias = true, transpose_w = false;
  std::array<tensor_shape, 3> inputs{};
  std::int8_t n_inputs = 0;
  std::array<tensor_shape, 2> params{};
  std::int8_t n_params = 0;
  tensor_shape output{};
  mesh_shape mesh{};
  // last, so that a positional aggregate (docs/reference/ops.md) may leave them out
  int kv_heads = 0;           ///< attention: key/value heads, 0 = heads (op_attrs::kv_heads)
  double eps = 1e-5;          ///< rmsnorm
  double rope_theta = 10000;  ///< rotary
  bool unfused_attention = false;  ///< attention: the unfused kernel (op_attrs::unfused_attention)
  friend constexpr bool operator==(const static_op&, const static_op&) = default;
};

/// The runtime op_node of a static_op (no parameter ids: a graph builder assigns them).
constexpr op_node to_op_node(const static_op& s, std::string_view name = {}) {
  op_attrs a;
  a.kernel = s.kernel;
  a.stride = s.stride;
  a.padding = s.padding;
  a.heads = s.heads;
  a.causal = s.causal;
  a.bias = s.bias;
  a.transpose_w = s.transpose_w;
  a.kv_heads = s.kv_heads;
  a.eps = s.eps;
  a.rope_theta = s.rope_theta;
  a.unfused_attention = s.unfused_attention;
  // built in one aggregate: assigning a std::string member trips g++ 12 in constant expressions
  op_node n{std::string(name), s.kind, a, {}, {}, {}, {}};
  for (int i = 0; i < s.n_inputs; ++i) n.inputs.push_back(at(s.inputs, i));
  for (int i = 0; i < s.n_params; ++i) n.params.push_back(at(s.params, i));
  n.outputs.push_back(s.output);
  return n;
}

/// A signature with fixed capacity (3 inputs, 2 parameters, 1 output); structural.
struct static_signature {
  std::array<nd_sbp, 3> inputs{};
  std::int8_t n_inputs = 0;
  std::array<nd_sbp, 2> params{};
  std::int8_t n_params = 0;
  nd_sbp output{};
  friend constexpr bool operator==(const static_signature&, const static_signature&) = default;

  /// The nd-SBP of tensor t, counting inputs first, then parameters (op_node order).
  constexpr const nd_sbp& tensor(int t) const {
    return t < n_inputs ? at(inputs, t) : at(params, t - n_inputs);
  }
  constexpr signature runtime() const {
    signature s;
    for (int i = 0; i < n_inputs; ++i) s.inputs.push_back(at(inputs, i));
    for (int i = 0; i < n_params; ++i) s.params.push_back(at(params, i));
    s.outputs.push_back(output);
    return s;
  }
  static constexpr static_signature from(const signature& s) {
    static_signature r;
    for (const nd_sbp& v : s.inputs) at(r.inputs, r.n_inputs++) = v;
    for (const nd_sbp& v : s.params) at(r.params, r.n_params++) = v;
    r.output = s.outputs[0];
    return r;
  }
};

namespace detail {
template <static_op Op>
constexpr std::size_t signature_count() {
  return signatures(to_op_node(Op), Op.mesh).size();
}
template <static_op Op, std::size_t N>
constexpr std::array<static_signature, N> static_signatures() {
  std::vector<signature> all = signatures(to_op_node(Op), Op.mesh);
  std::array<static_signature, N> r{};
  for (std::size_t i = 0; i < N; ++i) r[i] = static_signature::from(all[i]);
  return r;
}
}  // namespace detail

/// Every valid signature of Op, in the order of signatures(op, mesh), computed by the compiler.
template <static_op Op>
inline constexpr auto signatures_v = detail::static_signatures<Op, detail::signature_count<Op>()>();

/// Signature I of Op as a type: what a layer's dispatch hands to the code that runs it.
template <static_op Op, int I>
struct signature_constant {
  static constexpr static_op op = Op;
  static constexpr int index = I;
  static constexpr static_signature value = signatures_v<Op>[std::size_t(I)];
};

}  // namespace autoddl
