#pragma once
// The name of the kernel one device runs for an op under a signature: op kind, attributes, the
// local shapes of its inputs, parameters and outputs, and which input gradients are computed.
// Two candidates with equal keys run the same local computation (the kernels of
// runtime/op_kernels.hpp only see local shards), so one measurement prices both; the
// calibration tool writes times under these keys and the planner looks them up
// (cost/measured.hpp).
//   kernel_key(linear [64,512]x[512,512] under X[S(0)] W[B] on mesh 2, {false})
//     == "linear k1 s1 p0 h1 c0 d0 b1 t0 pos0 in=[32,512] par=[512,512];[512] out=[32,512] dx=0"
#include <string>
#include <vector>

#include "autoddl/ops/op.hpp"
#include "autoddl/ops/signatures.hpp"
#include "autoddl/ops/work.hpp"

namespace autoddl {

namespace detail {
inline std::string shapes_text(const std::vector<tensor_shape>& v) {
  std::string r;
  for (std::size_t i = 0; i < v.size(); ++i) r += (i ? ";" : "") + to_string(v[i]);
  return r;
}
}  // namespace detail

/// The key of the kernel of `op` on one device under `sig` on `mesh`; `input_grads[i]` says
/// whether input i's gradient is computed (false for the model's own inputs, as the trainer
/// asks; empty: all). @pre sig is a valid signature of op on mesh.
inline std::string kernel_key(const op_node& op, const signature& sig, const mesh_shape& mesh,
                              const std::vector<bool>& input_grads) {
  const op_node l = detail::localize(op, sig, mesh);
  const op_attrs& a = l.attrs;
  std::string k = std::string(to_string(op.kind)) + " k" + detail::itos(a.kernel) + " s" + detail::itos(a.stride) + " p" +
                  detail::itos(a.padding) + " h" + detail::itos(a.heads) + " c" + (a.causal ? "1" : "0") + " d" +
                  std::to_string(a.dropout) + " b" + (a.bias ? "1" : "0") + " t" + (a.transpose_w ? "1" : "0") + " pos" +
                  (a.positions ? "1" : "0");
  if (op.kind == op_kind::reshape) k += " to=" + to_string(a.target);
  if (op.kind == op_kind::attention && a.kv_heads > 0) k += " kv" + detail::itos(a.kv_heads);
  if (op.kind == op_kind::attention && a.unfused_attention) k += " unfused";
  if (op.kind == op_kind::attention && !detail::attention_order_of(l).natural()) k += " balanced";
  if (op.kind == op_kind::rmsnorm) k += " eps" + std::to_string(a.eps);
  if (op.kind == op_kind::rotary) k += " theta" + std::to_string(a.rope_theta);
  if (op.kind == op_kind::router || op.kind == op_kind::load_balance)
    k += " top" + detail::itos(a.topk) + (a.renormalize ? " norm" : "");
  if (op.kind == op_kind::dispatch || op.kind == op_kind::combine || op.kind == op_kind::routed_experts) k += " top" + detail::itos(a.topk);
  k += " in=" + detail::shapes_text(l.inputs) + " par=" + detail::shapes_text(l.params) + " out=" + detail::shapes_text(l.outputs);
  k += " dx=";
  for (std::size_t i = 0; i < op.inputs.size(); ++i) k += (input_grads.empty() || input_grads[i]) ? "1" : "0";
  return k;
}

}  // namespace autoddl
