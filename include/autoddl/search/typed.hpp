#pragma once
// Planning a typed model (models/typed/): its graph and allow-lists go to plan_problem, the
// search picks a candidate per op, and the picks come back as indices into signatures(op, mesh)
// for typed_model::visit. A fully pinned model is priced by the compiler with the same
// constexpr boxing costs the planner uses.
//
//   using gpt = typed_model<float, static_mesh<2, 4>, static_shape<8, 128, 256>, ...>;
//   plan_problem problem(gpt::to_graph("gpt"), typed_plan_options<gpt>(opts));
//   plan_result r = solve_plan(problem, strategy::automatic{});
//   std::vector<int> s = chosen_signatures(problem, r);       // s[i]: signature index of op i
//   gpt::visit<3>(s[3], [](auto sig) { /* sig.value: the static_signature */ });
#include <cstdint>
#include <vector>

#include "autoddl/cost.hpp"
#include "autoddl/index.hpp"
#include "autoddl/models/typed.hpp"
#include "autoddl/search/planner.hpp"
#include "autoddl/search/solve.hpp"

namespace autoddl {

/// Options for planning Model: its mesh and its ops' allow-lists on top of `o`.
template <class Model>
plan_options typed_plan_options(plan_options o) {
  o.mesh = Model::mesh;
  o.allowed = Model::allowed();
  return o;
}

/// Per op, the index into signatures(op, mesh) of the candidate the plan picked.
inline std::vector<int> chosen_signatures(const plan_problem& problem, const plan_result& r) {
  std::vector<int> s;
  for (int i = 0; i < int(problem.model().ops.size()); ++i) s.push_back(problem.signature_index(i, at(r.pick, i)));
  return s;
}

/// Bytes per device the plan's activation boxings move, forward and backward (the gradient
/// boxing dual(in) -> dual(out): B and P are dual, S stays S), on the planner's paths. Parameter edges excluded.
inline std::int64_t activation_boxing_bytes(const plan_problem& problem, const std::vector<int>& pick) {
  std::int64_t bytes = 0;
  const auto& edges = problem.edge_infos();
  for (std::size_t e = 0; e < edges.size(); ++e) {
    if (edges[e].param) continue;
    auto [fwd, bwd] = problem.edge_paths(int(e), at(pick, edges[e].from_node), at(pick, edges[e].to_node));
    bytes += fwd.bytes_per_device() + bwd.bytes_per_device();
  }
  return bytes;
}

/// The same figure for the boxings a typed model writes (Model::boxings), at compile time:
/// forward and backward paths of boxing_cost on `mesh`, the planner's choice of path. For a
/// fully pinned model it equals activation_boxing_bytes of its only plan.
template <class Model>
constexpr std::int64_t static_boxing_bytes(const device_mesh& mesh, int elem_bytes = int(sizeof(typename Model::value_type))) {
  std::int64_t bytes = 0;
  for (const auto& b : Model::boxings) {
    bytes += boxing_cost({b.from.sbp, b.to.sbp, Model::mesh, b.shape, elem_bytes}, mesh).bytes_per_device();
    bytes += boxing_cost({dual(b.to.sbp), dual(b.from.sbp), Model::mesh, b.shape, elem_bytes}, mesh).bytes_per_device();
  }
  return bytes;
}

}  // namespace autoddl
