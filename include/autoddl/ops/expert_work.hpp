#pragma once
// The work of a device's experts besides their FLOPs (ops/work.hpp, device_work): the GEMMs they
// run one expert at a time, the copies that put the routed rows in expert order and back, and the
// exchange of routed counts before a dropless dispatch. Each term is what Megatron-Core's MoE
// layer runs (megatron/core/transformer/moe/: experts.py, token_dispatcher.py, moe_utils.py) and
// what autoddl's executor runs (runtime/kernels/routed_experts.hpp):
//
// - Expert GEMMs. Megatron-Core's SequentialMLP (moe_grouped_gemm false, as NVIDIA's Grok-1
//   recipe runs) loops over the local experts and calls each one's MLP on its own rows; the
//   grouped GEMM and autoddl's grouped_experts.hpp launch one GEMM per expert too, each on that
//   expert's rows. A device holding E_l experts (F_l of each one's width) with m rows per expert
//   runs, per expert, gate and up ([m, h] x [h, F_l]) and down ([m, F_l] x [F_l, h]) forward, and
//   for each the input and weight gradients backward, GEMMs of the forward's operands.
//   expert_gemms says the shapes; cost/compute.hpp, gemm_roofline_time, prices each GEMM on its
//   own (the roofline of its arithmetic intensity), so a small expert GEMM is not priced at a
//   large one's rate.
// - Permutes. Dropless (routed_experts): forward, the rows routed to the local experts gathered
//   in expert order (Megatron-Core's permute before the all-to-all; autoddl's gather_rows) and
//   their outputs put back in token order with their gates (unpermute after it; autoddl's
//   weighted sum); backward, the output gradient's rows gathered (unpermute's backward), the input
//   rows gathered again for the weight gradients (autoddl keeps X, not its rows) and the input
//   gradient's rows scatter-added back (permute's backward). Each pass reads and writes
//   rows x h elements: 2 x rows x h x e bytes, twice forward, three times backward. With
//   capacity slots (experts), dispatch and combine are those permutes and are priced as their
//   own ops; Megatron-Core's drop-and-pad dispatcher then sorts the received slots by local
//   expert after the all-to-all and back before it (token_dispatcher.py, "Permutation 2" and
//   "Unpermutation 2": a transpose made contiguous) when a device holds more than one expert of
//   an expert-split buffer: 2 x 2 x slots x h x e bytes forward and the same backward.
// - Count exchange. Before a dropless all-to-all each rank learns how many rows every other rank
//   sends each of its experts: Megatron-Core's alltoall dispatcher all-gathers each rank's E
//   counts (int64) over the expert-parallel group and synchronises the stream to read them on
//   the host ("A synchronization is needed before expert parallel AlltoAll communication to get
//   the input_splits and output_splits CPU values", token_dispatcher.py); DeepEP's normal
//   dispatch likewise has the host wait for the received count. The host waits, so nothing is
//   queued behind the exchange: it is on the critical path, forward only (backward reuses the
//   splits). Priced as an all-gather of T = p x E x 8 bytes on the expert axis (alpha-beta,
//   cost/collective_cost.hpp): at these sizes its latency, (p - 1) alpha on a ring. The padded
//   dispatcher knows its counts (every expert gets its capacity) and exchanges none. autoddl's own
//   executor has the host read each token's picks instead (a wait as long, no bytes sent), so the
//   exchange adds time to a plan's price and nothing to the bytes it predicts sent.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "autoddl/ops/op.hpp"
#include "autoddl/sbp/mesh_shape.hpp"

namespace autoddl {

/// One device's expert GEMMs: `experts` experts, each on `rows` rows of width `hidden`, with
/// intermediate width `width` (gate and up [hidden, width], down [width, hidden]).
struct expert_gemms {
  double experts = 0, rows = 0, hidden = 0, width = 0;
  /// FLOPs of the forward's three GEMMs over every expert: 3 x 2 m h F per expert.
  constexpr double forward_flops() const { return experts * 6.0 * rows * hidden * width; }
};

/// An all-gather of routed counts on mesh axis `axis`: T = `bytes`, the counts of the whole group.
struct count_exchange {
  int axis = 0;
  std::int64_t bytes = 0;
};

/// The work of an experts or routed_experts op on one device besides its FLOPs (the header above).
struct expert_work {
  expert_gemms gemms;
  double fwd_copy_bytes = 0, bwd_copy_bytes = 0;
  std::vector<count_exchange> counts;
};

namespace detail {
/// The rows routed_experts computes on a device: t tokens, k picks each, balanced over the E
/// experts, of which the device holds E_l = params[0][0], times attrs.imbalance (the busiest
/// device's over the mean), at most every token's picks among the held experts, t min(k, E_l).
/// Example: t = 8, k = 2, E = 4, E_l = 1: 4 rows; imbalance 1.5: 6; imbalance 3: 8 (the cap).
inline double routed_rows(const op_node& op) {
  const tensor_shape& g = op.inputs[1];
  const double t = double(g[0]) * double(g[1]), k = double(op.attrs.topk), held = double(op.params[0][0]);
  const double balanced = t * k * held / double(g[2]);
  return std::min(balanced * op.attrs.imbalance, t * std::min(k, held));
}

/// Whether some axis of `mesh` with more than one device splits `l` on dim `d`.
inline bool split_on(const nd_sbp& l, const mesh_shape& mesh, int d) {
  for (int a = 0; a < mesh.size(); ++a)
    if (mesh[a] > 1 && l[a].is_split() && l[a].dim == d) return true;
  return false;
}

/// The expert work of `op` (experts or routed_experts; anything else: none) whose local shapes
/// under `sig` on `mesh` are those of `local`, `e` bytes per element.
/// Example: routed_experts, 8 tokens of h = 4, k = 2 of E = 4 experts, W B: 16 rows, 4 per
/// expert; copies 2 x 16 x 2 x 4 x e forward, 3 x that / 2 backward; no counts.
inline expert_work expert_work_of(const op_node& op, const op_node& local, const signature& sig, const mesh_shape& mesh,
                                  int e) {
  expert_work w;
  if (op.kind != op_kind::experts && op.kind != op_kind::routed_experts) return w;
  const tensor_shape& wg = local.params[0];  // [E_l, h, F_l]
  const double held = double(wg[0]), h = double(wg[1]), f = double(wg[2]);
  if (op.kind == op_kind::routed_experts) {
    const double rows = routed_rows(local);
    w.gemms = {held, rows / held, h, f};
    w.fwd_copy_bytes = 2.0 * (2.0 * rows * h * e);
    w.bwd_copy_bytes = 3.0 * (2.0 * rows * h * e);
    for (int a = 0; a < mesh.size(); ++a)
      if (mesh[a] > 1 && sig.params[0][a].is_split() && sig.params[0][a].dim == 0)
        w.counts.push_back({a, mesh[a] * std::int64_t(op.params[0][0]) * std::int64_t(sizeof(std::int64_t))});
    return w;
  }
  const tensor_shape& x = local.inputs[0];  // [b, E_l, C, h]
  const double slots = double(x.elements()) / double(x[3]);
  w.gemms = {held, slots / held, h, f};
  if (held > 1 && split_on(sig.inputs[0], mesh, 1)) w.fwd_copy_bytes = w.bwd_copy_bytes = 2.0 * (2.0 * slots * double(x[3]) * e);
  return w;
}
}  // namespace detail

}  // namespace autoddl
