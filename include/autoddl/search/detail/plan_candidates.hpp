#pragma once
// The candidates of a layout-choice problem: every op's signatures on the mesh (or those its
// allow-list names), every parameter's layouts (param_choice), and the facts of the graph that
// pricing reads (how many backwards read each output, which outputs another block reads, how
// many repeated blocks there are, how many ops use each parameter). The base of plan_problem.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "autoddl/cost/dtype.hpp"
#include "autoddl/cost/memory.hpp"
#include "autoddl/error.hpp"
#include "autoddl/index.hpp"
#include "autoddl/mesh/device_mesh.hpp"
#include "autoddl/models/graph.hpp"
#include "autoddl/ops/signatures.hpp"
#include "autoddl/ops/work.hpp"
#include "autoddl/search/plan_options.hpp"
#include "autoddl/text.hpp"

namespace autoddl {

namespace detail {
inline thread_local int planning_forbidden = 0;  ///< forbid_planning guards alive on this thread
/// Throws error while a forbid_planning guard lives: planning or pricing was asked for.
inline void check_planning_allowed(const char* what) {
  if (planning_forbidden > 0)
    fail<error>(std::string("the planner was asked to ") + what + " where a plan value must run without it (forbid_planning)");
}
}  // namespace detail

/// While one lives, building a plan_problem or asking one for a boxing path on this thread throws
/// error: the proof that a plan value (a plan file's, plan/plan.hpp) trains without the planner.
struct forbid_planning {
  forbid_planning() { ++detail::planning_forbidden; }
  ~forbid_planning() { --detail::planning_forbidden; }
  forbid_planning(const forbid_planning&) = delete;
  forbid_planning& operator=(const forbid_planning&) = delete;
};

}  // namespace autoddl

namespace autoddl::detail {

class plan_candidates {
 public:
  plan_candidates(graph model, const plan_options& options)
      : model_((check_planning_allowed("build a problem"), shared_graph(std::move(model)))),
        options_(options),
        mesh_(make_device_mesh(options.mesh, options.hw)),
        element_bytes_(bytes_of(options.type)),
        gradient_sum_bytes_(int(gradient_sum_bytes(options.type, options.fp32_gradient_sums))) {}

  const graph& model() const { return *model_; }
  /// The model, shared with the plans made from this problem (search/plan_of.hpp).
  const shared_graph& shared_model() const { return model_; }
  const plan_options& options() const { return options_; }
  const device_mesh& mesh() const { return mesh_; }
  int param_node(int p) const { return int(model_->ops.size()) + p; }
  const std::vector<signature>& op_candidates(int op) const { return at(sig_lists_, at(op_sig_list_, op)); }
  /// Op `op`'s candidate c.
  const signature& op_candidate(int op, int c) const { return at(op_candidates(op), c); }
  /// The index into signatures(op, mesh) of op's candidate c (c itself without an allow-list).
  int signature_index(int op, int c) const { return at(at(op_sig_index_, op), c); }
  const std::vector<param_choice>& param_candidates(int p) const { return at(param_sigs_, p); }
  /// Parameter p's candidate c (storage and gradient-summing layouts).
  const param_choice& param_candidate(int p, int c) const { return at(at(param_sigs_, p), c); }
  /// Whether parameter p has several uses (its gradient contributions are summed, then synced).
  bool tied_param(int p) const { return at(uses_, p) > 1; }

  /// Whether op `op` reruns its forward in backward under the plan's recomputation.
  bool recomputed(int op) const {
    if (at(model_->block, op) < 0) return false;
    if (options_.recompute == recompute_mode::full) return true;
    return options_.recompute == recompute_mode::selective && at(model_->ops, op).kind == op_kind::attention;
  }

 protected:
  int nops() const { return int(model_->ops.size()); }

  // Per op output: the backwards that read it (at least 1) and whether an op of another block
  // reads it; the number of repeated blocks.
  void find_readers() {
    // the distinct block indices, marked in a table (a search of a list per op is quadratic in layers)
    const int top = model_->block.empty() ? -1 : *std::max_element(model_->block.begin(), model_->block.end());
    std::vector<char> seen(std::size_t(top + 1), 0);
    int distinct = 0;
    read_by_other_block_.resize(model_->ops.size());
    for (std::size_t i = 0; i < model_->ops.size(); ++i) {
      at(read_by_other_block_, i).assign(at(model_->ops, i).outputs.size(), 0);
      if (const int b = at(model_->block, i); b >= 0 && !at(seen, b)) {
        at(seen, b) = 1;
        ++distinct;
      }
    }
    blocks_ = std::max<int>(1, distinct);
    readers_.resize(model_->ops.size());
    for (std::size_t i = 0; i < model_->ops.size(); ++i)
      at(readers_, i).assign(at(model_->ops, i).outputs.size(), backward_reads_of(at(model_->ops, i)).output ? 1 : 0);
    for (std::size_t i = 0; i < model_->ops.size(); ++i)
      for (std::size_t j = 0; j < at(model_->op_inputs, i).size(); ++j) {
        const tensor_ref r = at(at(model_->op_inputs, i), j);
        if (r.op >= 0 && backward_reads_of(at(model_->ops, i)).input(j)) ++at(at(readers_, r.op), r.index);
      }
    for (auto& v : readers_)
      for (int& k : v) k = std::max(k, 1);
    for (std::size_t i = 0; i < model_->ops.size(); ++i)
      for (const tensor_ref& r : at(model_->op_inputs, i))
        if (r.op >= 0 && at(model_->block, i) >= 0 && at(model_->block, r.op) != at(model_->block, i))
          at(at(read_by_other_block_, r.op), r.index) = 1;
  }

  // Every op's candidates: signatures(op, mesh), or the ones its allow-list names.
  void build_op_candidates() {
    const int nops = int(model_->ops.size());
    op_sig_list_.clear();
    sig_lists_.clear();
    resize(op_sig_index_, nops);
    if (std::ssize(options_.allowed) > nops)
      detail::fail<layout_error>("plan_options::allowed has " + detail::itos(std::int64_t(options_.allowed.size())) +
                                 " entries but graph '" + model_->name + "' has " + detail::itos(nops) +
                                 " ops; give at most one allow-list per op");
    std::vector<std::pair<int, std::vector<signature>>> seen;  // an op of each distinct node, its signatures
    for (int i = 0; i < nops; ++i) {
      auto f = std::find_if(seen.begin(), seen.end(), [&](const auto& s) { return same_node(s.first, i); });
      if (f == seen.end()) f = seen.insert(seen.end(), {i, signatures(at(model_->ops, i), options_.mesh)});
      const std::vector<signature>& all = f->second;
      std::vector<int>& index = at(op_sig_index_, i);
      const bool listed = i < std::ssize(options_.allowed) && !at(options_.allowed, i).empty();
      for (int k = 0; k < int(all.size()); ++k) index.push_back(k);
      if (listed) index = at(options_.allowed, i);
      candidates_like_.push_back(i);
      for (int j = 0; j < i; ++j)
        if (at(candidates_like_, j) == j && same_node(j, i) && at(op_sig_index_, j) == index) {
          candidates_like_.back() = j;
          break;
        }
      if (candidates_like_.back() != i) {  // the same list as an earlier op: shared (a GPT's blocks)
        op_sig_list_.push_back(at(op_sig_list_, candidates_like_.back()));
        continue;
      }
      std::vector<signature> mine;
      for (int k : index) {
        if (k < 0 || k >= std::ssize(all))
          detail::fail<layout_error>("op '" + at(model_->ops, i).name + "' allows signature " + detail::itos(k) + " but has " +
                                     detail::itos(std::int64_t(all.size())) + " on mesh " + to_string(options_.mesh) +
                                     "; list indices into signatures(op, mesh)");
        mine.push_back(at(all, k));
      }
      op_sig_list_.push_back(int(sig_lists_.size()));
      sig_lists_.push_back(std::move(mine));
      if (op_candidates(i).empty())
        detail::fail<layout_error>("op '" + at(model_->ops, i).name + "' has no signature whose tensors divide evenly on mesh " +
                                   to_string(options_.mesh) + "; choose sizes divisible by the mesh axes or a smaller mesh");
    }
  }

  // Every parameter's candidates: each nd-SBP over {B, S(d)} that divides it, as storage; a tied
  // parameter also pairs each storage with its reduce layout for summing (param_choice).
  void build_param_candidates() {
    const int nparams = int(model_->params.size());
    assign(uses_, nparams, 0);
    for (const op_node& n : model_->ops)
      for (int p : n.param_ids) ++at(uses_, p);
    resize(param_sigs_, nparams);
    for (int p = 0; p < nparams; ++p) {
      const tensor_shape& s = at(model_->params, p).shape;
      std::vector<nd_sbp> all{nd_sbp{}};
      for (int a = 0; a < options_.mesh.size(); ++a) {
        std::vector<nd_sbp> next;
        for (const auto& v : all)
          for (int d = -1; d < s.rank(); ++d) {  // -1: B
            nd_sbp w = v;
            w.push_back(d < 0 ? B : S(d));
            next.push_back(w);
          }
        all = std::move(next);
      }
      const bool tied = at(uses_, p) > 1;
      for (const auto& v : all) {
        if (!divides(s, layout{v, options_.mesh})) continue;
        at(param_sigs_, p).push_back({v, v, v});
        if (tied && !(reduce_layout(v) == v)) at(param_sigs_, p).push_back({v, reduce_layout(v), v});
        const nd_sbp z = zero_shard(v, s, options_.mesh);
        if (z == v) continue;
        if (options_.zero2_layouts) at(param_sigs_, p).push_back({v, tied ? reduce_layout(z) : z, z});  // ZeRO-2
        // ZeRO-1; and ZeRO-2's for a tied weight as DeepSpeed runs it: autograd adds the uses'
        // contributions before the reduce hook fires, one reduce-scatter of the whole sum
        if (options_.zero1_layouts || (tied && options_.zero2_layouts)) at(param_sigs_, p).push_back({v, reduce_layout(v), z});
      }
    }
  }

  // Whether ops a and b are the same computation on the same shapes (names and parameter ids
  // aside): the same signatures on any mesh.
  bool same_node(int a, int b) const {
    const op_node &x = at(model_->ops, a), &y = at(model_->ops, b);
    const op_attrs &p = x.attrs, &q = y.attrs;
    return x.kind == y.kind && x.inputs == y.inputs && x.params == y.params && x.outputs == y.outputs &&
           p.kernel == q.kernel && p.stride == q.stride && p.padding == q.padding && p.heads == q.heads &&
           p.causal == q.causal && p.dropout == q.dropout && p.bias == q.bias && p.transpose_w == q.transpose_w &&
           p.positions == q.positions && p.target == q.target && p.unfused_attention == q.unfused_attention &&
           p.balanced_context == q.balanced_context;
  }

  shared_graph model_;  ///< never empty
  plan_options options_;
  device_mesh mesh_;
  int element_bytes_;  ///< bytes per element of the plan's dtype
  int gradient_sum_bytes_;  ///< bytes per element of a gradient sum (cost/memory.hpp, gradient_sum_bytes)
  std::vector<std::vector<signature>> sig_lists_;  ///< the distinct candidate lists of the ops
  std::vector<int> op_sig_list_;                    ///< per op: its list in sig_lists_
  std::vector<std::vector<int>> op_sig_index_;
  std::vector<int> candidates_like_;  ///< per op: the first op with the same candidates, in order
  std::vector<std::vector<param_choice>> param_sigs_;
  std::vector<int> uses_;  ///< per parameter: how many op slots use it
  int blocks_ = 1;         ///< repeated blocks in the graph (at least 1)
  std::vector<std::vector<char>> read_by_other_block_;  ///< per op output: read by an op of another block
  std::vector<std::vector<int>> readers_;  ///< per op output: backwards that read it (at least 1)
};

}  // namespace autoddl::detail
