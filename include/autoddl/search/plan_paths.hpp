#pragma once
// The boxing paths of one chosen plan, by the slot they feed: for each input and parameter slot
// of each op, the forward path (the producer's or the storage's layout to the layout the op
// computes in) and the backward path (its gradient, back). The executor runs them; the memory
// replay (step_memory.hpp) counts the copies they make. Both read them from here, so both see
// the same copies.
//   plan_paths paths(problem, pick);
//   paths.input(i, j).forward.size() == 0   // input j of op i is read in place
// A chained slot (chained_from) boxes from its first reader's input slot rather than from the
// producer (search/planner.hpp, box once for all consumers): read in place, it reads that
// slot's operand (a boxed copy, or the producer's output where that slot reads it in place).
#include <cstddef>
#include <vector>

#include "autoddl/index.hpp"
#include "autoddl/search/planner.hpp"
#include "autoddl/search/step_schedule.hpp"

namespace autoddl {

class plan_paths {
 public:
  struct edge_paths {
    boxing_path forward, backward;
  };

  /// @pre pick is a candidate of every node of problem (plan_result::pick).
  plan_paths(const plan_problem& problem, const std::vector<int>& pick) {
    const graph& g = problem.model();
    const int nops = int(g.ops.size());
    resize(of_input_, nops);
    resize(of_param_, nops);
    resize(chained_, nops);
    for (int i = 0; i < nops; ++i) {
      at(of_input_, i).assign(at(g.op_inputs, i).size(), -1);
      at(chained_, i).assign(at(g.op_inputs, i).size(), input_slot{});
      at(of_param_, i).assign(at(g.ops, i).param_ids.size(), -1);
    }
    const auto& infos = problem.edge_infos();
    const auto& edges = problem.untied().edges();
    for (int e = 0; e < int(infos.size()); ++e) {
      auto [fwd, bwd] = problem.edge_paths(e, at(pick, at(edges, e).u), at(pick, at(edges, e).v));
      paths_.push_back({fwd, bwd});
      auto& slots = at(infos, e).param ? of_param_ : of_input_;
      at(at(slots, at(infos, e).to_node), at(infos, e).tensor_index) = e;
      if (at(infos, e).from_input >= 0)
        at(at(chained_, at(infos, e).to_node), at(infos, e).tensor_index) = input_slot{at(infos, e).from_node, at(infos, e).from_input};
    }
  }

  /// The slot input j of op i is chained from (op -1: none, it boxes from its producer).
  input_slot chained_from(int i, std::size_t j) const { return at(chained_, i)[j]; }
  /// chained_from of every slot, per op.
  const std::vector<std::vector<input_slot>>& chains() const { return chained_; }

  /// The paths into input slot j of op i (empty for a model input: it has no producer).
  const edge_paths& input(int i, std::size_t j) const { return of(at(of_input_, i)[j]); }
  /// The paths into parameter slot j of op i (from the parameter's storage).
  const edge_paths& param(int i, std::size_t j) const { return of(at(of_param_, i)[j]); }
  /// Whether input slot j of op i is a boxed copy rather than its producer's output read in place.
  bool boxes_input(int i, std::size_t j) const { return input(i, j).forward.size() > 0; }
  /// boxes_input of every slot, per op.
  std::vector<std::vector<bool>> boxed_inputs() const {
    std::vector<std::vector<bool>> r(of_input_.size());
    for (int i = 0; i < int(r.size()); ++i)
      for (std::size_t j = 0; j < at(of_input_, i).size(); ++j) at(r, i).push_back(boxes_input(i, j));
    return r;
  }

 private:
  const edge_paths& of(int e) const {
    static const edge_paths none{};
    return e < 0 ? none : at(paths_, e);
  }
  std::vector<std::vector<int>> of_input_, of_param_;  ///< per op slot: its edge of the problem (-1: none)
  std::vector<std::vector<input_slot>> chained_;            ///< per op input slot: chained_from
  std::vector<edge_paths> paths_;                     ///< per edge
};

}  // namespace autoddl
