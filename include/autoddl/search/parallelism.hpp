#pragma once
// A plan in the words of the parallel dimensions: what each mesh axis does for most of the work,
// the degrees dp, tp, problem, cp and ep, the ZeRO stage of the parameter storage and how many
// sequences each device runs per micro-batch. Expert plans are built from these words; an auto
// plan may lay out each op its own way, so its summary is a vote, weighted by forward FLOPs over
// the ops with parameters (a GEMM counts, a layernorm hardly):
//   for axis a and op i, the op's first input X and first parameter W in its chosen signature:
//     X S(0) on a                                         -> data parallel (the batch split)
//     X S(1) on a, i a linear of a [b, s, h] input or an  -> context parallel (the sequence split)
//       embedding of [b, s] tokens
//     W split on a, or X split on another dim             -> tensor parallel (the weight split)
//     otherwise                                           -> replicated (every device does it all)
//   the axis takes the role of the largest weight; dp, cp and tp are the products of the sizes
//   of their axes, pp the pipeline's stages. ep is the product of the axes on which most of the
//   experts ops' work (ops/moe.hpp) splits whole experts (weights S(0)); the experts ops do not vote
//   on an axis's role: an expert-parallel axis counts in dp, cp or tp as the rest of the model
//   uses it.
// ZeRO stage, over the data-parallel axes, per parameter (weighted by its bytes, the stage of
// the most bytes wins): 3 where it is stored split but computed whole (gathered before use),
// 2 where its summed gradient is split (reduce-scattered), 1 where only its update (optimizer
// state) is split, 0 where nothing is.
// Example: GPT-2 medium's auto plan on 8x8 A100s: dp=64 tp=1 pp=1 cp=1 ep=1, ZeRO stage 3,
// 1 sequence per device per micro-batch.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "autoddl/index.hpp"
#include "autoddl/ops/work.hpp"
#include "autoddl/search/planner.hpp"

namespace autoddl {

/// What a mesh axis does for most of a plan's work (see the header).
enum class axis_role : std::uint8_t { data, context, tensor, replicated };
constexpr const char* to_string(axis_role r) {
  return r == axis_role::data ? "dp" : r == axis_role::context ? "cp" : r == axis_role::tensor ? "tp" : "replicated";
}

/// A plan's parallel dimensions (see the header).
struct plan_parallelism {
  int dp = 1, tp = 1, pp = 1, cp = 1, ep = 1;
  int zero_stage = 0;
  double sequences_per_device = 0;  ///< per micro-batch: the micro-batch's rows / dp
  std::vector<axis_role> axes;      ///< per axis of the plan's (stage) mesh
};

namespace detail {

// Op i's role on axis a (see the header).
inline axis_role op_axis_role(const op_node& n, const signature& s, int a) {
  if (s.inputs.empty()) return axis_role::replicated;
  const sbp x = s.inputs[0][a];
  if (x.is_split() && x.dim == 0) return axis_role::data;
  const bool sequence = (n.kind == op_kind::linear && n.inputs[0].rank() >= 3) || n.kind == op_kind::embedding;
  if (x.is_split() && x.dim == 1 && sequence) return axis_role::context;
  if (x.is_split() || (!s.params.empty() && s.params[0][a].is_split())) return axis_role::tensor;
  return axis_role::replicated;
}

// A parameter's ZeRO level over the data axes: 3 stored split, computed whole; 2 gradient sum
// split; 1 update split; 0.
inline int zero_level(const param_choice& pc, const nd_sbp& compute, const std::vector<axis_role>& axes) {
  int level = 0;
  for (int a = 0; a < int(axes.size()); ++a) {
    if (at(axes, a) != axis_role::data) continue;
    if (pc.storage[a].is_split() && !compute[a].is_split()) level = std::max(level, 3);
    else if (pc.grad_sum[a].is_split() && !compute[a].is_split()) level = std::max(level, 2);
    else if (pc.update[a].is_split() && !compute[a].is_split()) level = std::max(level, 1);
  }
  return level;
}

}  // namespace detail

/// The parallel dimensions of `pick` (per node of problem.untied()) as a pipeline of `stages` stages
/// of problem's mesh (1: none).
inline plan_parallelism parallelism_of(const plan_problem& problem, const std::vector<int>& pick, int stages = 1) {
  const graph& g = problem.model();
  const mesh_shape& mesh = problem.options().mesh;
  plan_parallelism r;
  r.pp = stages;
  for (int a = 0; a < mesh.size(); ++a) {
    double votes[4] = {0, 0, 0, 0};
    for (int i = 0; i < int(g.ops.size()); ++i) {
      const op_node& n = at(g.ops, i);
      if (n.param_ids.empty() || n.kind == op_kind::experts || n.kind == op_kind::routed_experts) continue;  // experts vote for ep below
      votes[int(detail::op_axis_role(n, problem.op_candidate(i, at(pick, i)), a))] += forward_flops(n) + 1;
    }
    int best = int(axis_role::replicated);
    for (int k = 0; k < 4; ++k)
      if (votes[k] > votes[best]) best = k;
    r.axes.push_back(axis_role(best));
    switch (axis_role(best)) {  // a replicated axis multiplies no degree
      case axis_role::data: r.dp *= mesh[a]; break;
      case axis_role::context: r.cp *= mesh[a]; break;
      case axis_role::tensor: r.tp *= mesh[a]; break;
      case axis_role::replicated: break;
    }
  }
  for (int a = 0; a < mesh.size(); ++a) {
    double split = 0, whole = 0;
    for (int i = 0; i < int(g.ops.size()); ++i)
      if (at(g.ops, i).kind == op_kind::experts || at(g.ops, i).kind == op_kind::routed_experts)  // whole experts per device
        (problem.op_candidate(i, at(pick, i)).params[0][a] == S(0) ? split : whole) += forward_flops(at(g.ops, i)) + 1;
    if (split > whole) r.ep *= mesh[a];
  }
  double bytes[4] = {0, 0, 0, 0};
  std::vector<char> seen(g.params.size(), 0);  // each parameter at its first use
  for (int i = 0; i < int(g.ops.size()); ++i)
    for (std::size_t j = 0; j < at(g.ops, i).param_ids.size(); ++j) {
      const int p = at(g.ops, i).param_ids[j];
      if (at(seen, p)) continue;
      at(seen, p) = 1;
      const param_choice& pc = problem.param_candidate(p, at(pick, problem.param_node(p)));
      bytes[detail::zero_level(pc, problem.op_candidate(i, at(pick, i)).params[j], r.axes)] +=
          double(at(g.params, p).shape.elements());
    }
  for (int k = 1; k < 4; ++k)
    if (bytes[k] >= bytes[r.zero_stage] && bytes[k] > 0) r.zero_stage = k;
  r.sequences_per_device = g.inputs.empty() ? 0 : double(g.inputs[0][0]) / r.dp;
  return r;
}

}  // namespace autoddl
