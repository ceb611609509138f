#pragma once
// autoddl-plan --emit dtensor: a plan's layouts as PyTorch DTensor placements, one per mesh
// dimension: S(d) -> Shard(d), B -> Replicate(), P -> Partial() (a sum). A parameter with a
// Hugging Face name (models/hf_weights.hpp) is given in the dims of that tensor: a linear's
// weight is [in, out] here and [out, in] in torch, so S(0) of h0.attn.q.W is Shard(1) of
// model.layers.0.self_attn.q_proj.weight. Activations keep autoddl's dims.
//   {"format": "autoddl-dtensor", "version": 1, "model": "hf:...", "mesh": [2, 2], "strategy": "dp",
//    "optimizer": "adam", "microbatches": 1,
//    "inputs": [{"index": 0, "shape": [4, 16], "reads": [{"op": "embed", "input": 0, "sbp": ["S(0)", "B"],
//                "placements": ["Shard(0)", "Replicate()"]}]}, ...],
//    "params": [{"name": "h0.attn.q.W", "shape": [32, 32], "hf_name": "model.layers.0.self_attn.q_proj.weight",
//                "hf_shape": [32, 32], "transposed": true,
//                "storage": {"sbp": ["B", "S(1)"], "placements": ["Replicate()", "Shard(0)"]},
//                "grad_sum": {...}, "update": {...}, "reads": [{"op": "h0.attn.q", "slot": 0, "sbp": ..., "placements": ...}]}],
//    "activations": [{"producer": "h0.attn_norm", "output": 0, "consumer": "h0.attn.q", "input": 0, "shape": [4, 16, 32],
//                     "from": {"sbp": ..., "placements": ...}, "to": {...}}]}   (only those the plan boxes)
// A mixture's stacked experts [E, in, out] are one tensor per expert there: a split of the
// experts (S(0)) has no placement in such a tensor and is written null.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autoddl/models/hf_weights.hpp"
#include "autoddl/search/planner.hpp"
#include "autoddl/search/solve.hpp"

namespace autoddl::tools {

namespace detail {

/// The torch tensor's dim of autoddl dim d of a parameter stored as `h` says (nullopt: the
/// experts' dim, which has none in a tensor of one expert).
inline std::optional<int> torch_dim(const std::optional<hf_param_name>& h, int rank, int d) {
  if (!h) return d;
  if (h->expert >= 0) {
    if (d == 0) return std::nullopt;
    --d;
    --rank;
  }
  return h->transposed && rank == 2 ? 1 - d : d;
}

/// {"sbp": [...], "placements": [...]} of layout l on a tensor of rank `rank` (h: its Hugging Face tensor).
inline nlohmann::ordered_json placements_json(const nd_sbp& l, int rank, const std::optional<hf_param_name>& h = std::nullopt) {
  nlohmann::ordered_json sbp = nlohmann::ordered_json::array(), pl = nlohmann::ordered_json::array();
  for (int a = 0; a < l.size(); ++a) {
    sbp.push_back(std::string(to_string(l[a])));
    if (l[a].is_broadcast()) {
      pl.push_back("Replicate()");
    } else if (l[a].is_partial()) {
      pl.push_back("Partial()");
    } else if (const std::optional<int> d = torch_dim(h, rank, l[a].dim)) {
      pl.push_back("Shard(" + std::to_string(*d) + ")");
    } else {
      pl.push_back(nullptr);
    }
  }
  return {{"sbp", sbp}, {"placements", pl}};
}

inline nlohmann::ordered_json shape_json(const tensor_shape& s) { return std::vector<std::int64_t>(s.begin(), s.end()); }

/// The signature the plan picks for op i.
inline const signature& picked(const plan_problem& problem, const plan_result& r, std::size_t i) {
  return at(problem.op_candidates(int(i)), at(r.pick, i));
}

/// Every parameter: its storage, gradient-summing and update layouts and the layout each op reads it in.
inline nlohmann::ordered_json dtensor_params(const plan_problem& problem, const plan_result& r, hf_experts_naming naming) {
  const graph& g = problem.model();
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (std::size_t p = 0; p < g.params.size(); ++p) {
    const param_info& info = g.params[p];
    const std::vector<std::int64_t> shape(info.shape.begin(), info.shape.end());
    const std::vector<hf_param_name> names = hf_names_of(info.name, shape, naming);
    const std::optional<hf_param_name> h = names.empty() ? std::nullopt : std::optional(names.front());
    const int rank = int(shape.size());
    const param_choice& c = at(problem.param_candidates(int(p)), at(r.pick, problem.param_node(int(p))));
    nlohmann::ordered_json e = {{"name", info.name}, {"shape", shape}, {"hf_name", h ? nlohmann::ordered_json(h->name) : nlohmann::ordered_json(nullptr)}};
    if (h) e["hf_shape"] = hf_shape_of(*h, shape), e["transposed"] = h->transposed;
    if (names.size() > 1) {
      nlohmann::ordered_json all = nlohmann::ordered_json::array();
      for (const hf_param_name& n : names) all.push_back(n.name);
      e["hf_names"] = all;
    }
    e["storage"] = placements_json(c.storage, rank, h);
    e["grad_sum"] = placements_json(c.grad_sum, rank, h);
    e["update"] = placements_json(c.update, rank, h);
    nlohmann::ordered_json reads = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < g.ops.size(); ++i)
      for (std::size_t slot = 0; slot < g.ops[i].param_ids.size(); ++slot) {
        if (g.ops[i].param_ids[slot] != int(p)) continue;
        nlohmann::ordered_json x = {{"op", g.ops[i].name}, {"slot", slot}, {"kind", std::string(to_string(g.ops[i].kind))}};
        x.update(placements_json(at(picked(problem, r, i).params, slot), rank, h));
        reads.push_back(x);
      }
    e["reads"] = reads;
    out.push_back(e);
  }
  return out;
}

/// The graph's inputs, each with the layouts its readers take it in.
inline nlohmann::ordered_json dtensor_inputs(const plan_problem& problem, const plan_result& r) {
  const graph& g = problem.model();
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (std::size_t k = 0; k < g.inputs.size(); ++k) {
    nlohmann::ordered_json reads = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < g.ops.size(); ++i)
      for (std::size_t j = 0; j < g.op_inputs[i].size(); ++j)
        if (g.op_inputs[i][j] == tensor_ref{-1, int(k)}) {
          nlohmann::ordered_json x = {{"op", g.ops[i].name}, {"input", j}};
          x.update(placements_json(at(picked(problem, r, i).inputs, j), g.inputs[k].rank()));
          reads.push_back(x);
        }
    out.push_back({{"index", k}, {"shape", shape_json(g.inputs[k])}, {"reads", reads}});
  }
  return out;
}

/// Every activation the plan boxes: produced in one layout, read by an op in another.
inline nlohmann::ordered_json dtensor_activations(const plan_problem& problem, const plan_result& r) {
  const graph& g = problem.model();
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < g.ops.size(); ++i)
    for (std::size_t j = 0; j < g.op_inputs[i].size(); ++j) {
      const tensor_ref t = g.op_inputs[i][j];
      if (t.op < 0) continue;
      const nd_sbp& from = at(picked(problem, r, std::size_t(t.op)).outputs, t.index);
      const nd_sbp& to = at(picked(problem, r, i).inputs, j);
      if (from == to) continue;
      const tensor_shape& shape = at(g.ops[std::size_t(t.op)].outputs, t.index);
      out.push_back({{"producer", g.ops[std::size_t(t.op)].name}, {"output", t.index}, {"consumer", g.ops[i].name},
                     {"input", j}, {"shape", shape_json(shape)}, {"from", placements_json(from, shape.rank())},
                     {"to", placements_json(to, shape.rank())}});
    }
  return out;
}

}  // namespace detail

/// The DTensor placements of plan `r` of `problem` (model spec as given; naming: how a mixture's
/// experts are named in its checkpoints).
inline nlohmann::ordered_json dtensor_json(const plan_problem& problem, const plan_result& r, const std::string& model_spec,
                                   hf_experts_naming naming) {
  const plan_options& o = problem.options();
  return {{"format", "autoddl-dtensor"},
          {"version", 1},
          {"model", model_spec},
          {"mesh", std::vector<int>(o.mesh.begin(), o.mesh.end())},
          {"strategy", to_string(r.strategy)},
          {"optimizer", std::string(to_string(o.opt))},
          {"microbatches", o.microbatches},
          {"inputs", detail::dtensor_inputs(problem, r)},
          {"params", detail::dtensor_params(problem, r, naming)},
          {"activations", detail::dtensor_activations(problem, r)}};
}

/// dtensor_json's text: one line per input, parameter and activation, so a reader (and grep) sees
/// each tensor whole.
inline std::string dtensor_text(const nlohmann::ordered_json& j) {
  std::string out = "{";
  bool first = true;
  for (const auto& [key, value] : j.items()) {
    out += std::string(first ? "" : ",") + "\n \"" + key + "\": ";
    first = false;
    if (!value.is_array() || value.empty() || !value.front().is_object()) {
      out += value.dump();
      continue;
    }
    out += "[";
    for (std::size_t i = 0; i < value.size(); ++i) out += std::string(i ? "," : "") + "\n  " + value[i].dump();
    out += "\n ]";
  }
  return out + "\n}\n";
}

}  // namespace autoddl::tools
