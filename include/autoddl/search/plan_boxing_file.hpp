#pragma once
// A plan file's boxing paths, so that a file is the whole plan value (plan/plan.hpp) and runs
// without the planner pricing anything. The field "boxing" of a plan file holds, per op, each
// input and parameter slot's forward and backward path and the slot an input is chained from,
// and per parameter its synchronisation, gather and slice paths. A path is the list of the
// layouts it passes through, its first the source and its last the target; a path that boxes
// nothing is left out:
//   "boxing": {"ops": [{"inputs": [{}, {"forward": [["S(0)", "B"], ["B", "B"]],
//                                       "backward": [["P", "B"], ["B", "B"]], "chained": [3, 0]}],
//                       "params": [{"backward": [["P"], ["B"]]}]}, ...],
//              "params": [{"sync": [["P"], ["B"]]}, {}, ...]}
// Reading a path back rebuilds each single-axis step (make_step) on the plan's mesh for the
// slot's tensor; check_plan then holds every path to its source and target.
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "autoddl/error.hpp"
#include "autoddl/index.hpp"
#include "autoddl/models/graph.hpp"
#include "autoddl/ops/signatures.hpp"
#include "autoddl/plan/plan.hpp"
#include "autoddl/text.hpp"

namespace autoddl {

namespace detail {

inline nlohmann::json layout_json(const nd_sbp& l) {
  nlohmann::json a = nlohmann::json::array();
  for (int i = 0; i < l.size(); ++i) a.push_back(std::string(to_string(l[i])));
  return a;
}

// The layouts `b` passes through from `from`; null where it boxes nothing.
inline nlohmann::json path_json(const boxing_path& b, nd_sbp from) {
  if (b.size() == 0) return nullptr;
  nlohmann::json a = nlohmann::json::array({layout_json(from)});
  for (const boxing_step& s : b) {
    from[s.axis] = s.to;
    a.push_back(layout_json(from));
  }
  return a;
}

inline void put_path(nlohmann::json& into, const char* key, const boxing_path& b, const nd_sbp& from) {
  if (nlohmann::json p = path_json(b, from); !p.is_null()) into[key] = std::move(p);
}

}  // namespace detail

/// The "boxing" field of plan p's file.
inline nlohmann::json plan_boxing_json(const plan& p) {
  const graph& g = p.g();
  nlohmann::json ops = nlohmann::json::array();
  for (int i = 0; i < int(g.ops.size()); ++i) {
    const op_plan& o = at(p.ops, i);
    nlohmann::json inputs = nlohmann::json::array(), params = nlohmann::json::array();
    for (std::size_t j = 0; j < o.inputs.size(); ++j) {
      nlohmann::json slot = nlohmann::json::object();
      const tensor_ref r = at(g.op_inputs, i)[j];
      if (r.op >= 0) {
        const input_slot c = o.chained[j];
        const nd_sbp& source = c.op >= 0 ? at(p.ops, c.op).sig.inputs[std::size_t(c.input)] : at(at(p.ops, r.op).sig.outputs, r.index);
        detail::put_path(slot, "forward", o.inputs[j].forward, source);
        detail::put_path(slot, "backward", o.inputs[j].backward, dual(o.sig.inputs[j]));
        if (c.op >= 0) slot["chained"] = {c.op, c.input};
      }
      inputs.push_back(std::move(slot));
    }
    for (std::size_t j = 0; j < o.params.size(); ++j) {
      nlohmann::json slot = nlohmann::json::object();
      detail::put_path(slot, "forward", o.params[j].forward, at(p.params, at(g.ops, i).param_ids[j]).layouts.storage);
      detail::put_path(slot, "backward", o.params[j].backward, dual(o.sig.params[j]));
      params.push_back(std::move(slot));
    }
    ops.push_back({{"inputs", std::move(inputs)}, {"params", std::move(params)}});
  }
  nlohmann::json params = nlohmann::json::array();
  for (const param_plan& x : p.params) {
    nlohmann::json q = nlohmann::json::object();
    detail::put_path(q, "sync", x.sync, x.layouts.grad_sum);
    detail::put_path(q, "gather", x.gather, x.layouts.update);
    detail::put_path(q, "slice", x.slice, x.layouts.storage);
    params.push_back(std::move(q));
  }
  return {{"ops", std::move(ops)}, {"params", std::move(params)}};
}

/// What a plan file says of a plan besides its boxing: each op's signature, each parameter's
/// layouts, the schedule (search/plan_file.hpp reads these from the file).
struct plan_layouts {
  mesh_shape mesh;
  dtype type = dtype::fp32;
  int microbatches = 1;
  recompute_mode recompute = recompute_mode::none;
  bool regather_inputs = false, reshard_after_forward = false;  ///< plan's; false in files without them
  std::vector<int> stage_first_ops{0};
  std::vector<signature> ops;
  std::vector<param_choice> params;
};

namespace detail {

// Reads a plan file's boxing field against its model, failing with one sentence that names the
// slot and what is wrong.
struct boxing_reader {
  std::string file;
  const plan& p;
  [[noreturn]] void bad(const std::string& what) const { fail<parse_error>("plan file " + file + ": " + what); }

  nd_sbp layout(const nlohmann::json& v, const std::string& where) const {
    if (!v.is_array() || v.size() != std::size_t(p.mesh.size()))
      bad(where + " must list layouts of " + itos(p.mesh.size()) + " entries, like [\"S(0)\", \"B\"]");
    std::string text = "[";
    for (std::size_t a = 0; a < v.size(); ++a) {
      if (!v[a].is_string()) bad(where + " entry " + itos(int(a)) + " must be a string (S(d), B or P)");
      text += (a ? "," : "") + v[a].get<std::string>();
    }
    try {
      return parse_nd_sbp(text + "]");
    } catch (const error& e) {
      bad(where + ": " + e.what());
    }
  }
  // The path `key` of `slot` for a tensor of `shape`, each step one axis changed.
  boxing_path path(const nlohmann::json& slot, const char* key, const tensor_shape& shape, const std::string& where) const {
    boxing_path b;
    if (!slot.is_object() || !slot.contains(key)) return b;
    const nlohmann::json& v = slot.at(key);
    const std::string w = where + " " + key;
    if (!v.is_array() || v.size() < 2 || v.size() > std::size_t(max_boxing_steps) + 1)
      bad(w + " must list 2 to " + itos(max_boxing_steps + 1) + " layouts, the source first");
    const std::int64_t total = shape.elements() * bytes_of(p.type);
    nd_sbp state = layout(v[0], w + "[0]");
    for (std::size_t k = 1; k < v.size(); ++k) {
      const nd_sbp next = layout(v[k], w + "[" + itos(int(k)) + "]");
      int axis = -1, changed = 0;
      for (int a = 0; a < state.size(); ++a)
        if (!(state[a] == next[a])) axis = a, ++changed;
      if (changed != 1 || !single_axis_step_exact(state, axis, next[axis]))
        bad(w + " goes from " + to_string(state) + " to " + to_string(next) + ", which is not one single-axis step");
      b.push_back(make_step(state, p.mesh, axis, next[axis], total, bytes_of(p.type)));
      state = next;
    }
    return b;
  }
  const nlohmann::json& slots(const nlohmann::json& j, const char* key, std::size_t want, const std::string& where) const {
    if (!j.is_object() || !j.contains(key) || !j.at(key).is_array() || j.at(key).size() != want)
      bad(where + " must list " + itos(int(want)) + " " + key + " slots");
    return j.at(key);
  }
  void op(int i, const nlohmann::json& j, op_plan& o) const {
    const graph& g = p.g();
    const op_node& n = at(g.ops, i);
    const std::string where = "boxing of op '" + n.name + "'";
    const nlohmann::json& ins = slots(j, "inputs", n.inputs.size(), where);
    o.inputs.resize(n.inputs.size());
    o.chained.assign(n.inputs.size(), input_slot{});
    for (std::size_t k = 0; k < n.inputs.size(); ++k) {
      const std::string w = where + " input " + itos(int(k));
      o.inputs[k] = {path(ins[k], "forward", n.inputs[k], w), path(ins[k], "backward", n.inputs[k], w)};
      if (ins[k].is_object() && ins[k].contains("chained")) {
        const nlohmann::json& c = ins[k].at("chained");
        if (!c.is_array() || c.size() != 2 || !c[0].is_number_integer() || !c[1].is_number_integer() || c[0].get<long long>() < 0 ||
            c[0].get<long long>() >= i || c[1].get<long long>() < 0 || c[1].get<long long>() > 64)
          bad(w + " chained must name an earlier op's input slot, like [3, 0]");
        o.chained[k] = input_slot{c[0].get<int>(), c[1].get<int>()};
      }
    }
    const nlohmann::json& ps = slots(j, "params", n.param_ids.size(), where);
    o.params.resize(n.param_ids.size());
    for (std::size_t k = 0; k < n.param_ids.size(); ++k) {
      const tensor_shape& shape = at(g.params, n.param_ids[k]).shape;
      const std::string w = where + " parameter " + itos(int(k));
      o.params[k] = {path(ps[k], "forward", shape, w), path(ps[k], "backward", shape, w)};
    }
  }
};

}  // namespace detail

/// The plan value of a plan file: its model `g`, its layouts and schedule, and its boxing field
/// (plan_boxing_json). No planner prices anything: each op's signature is checked against the
/// op's rules (check_signature), each path is rebuilt step by step and held to its source and
/// target (check_plan). `file` names the file in errors.
/// @throws parse_error on a malformed boxing field, layout_error on layouts or paths that do not fit.
inline plan plan_from_file(shared_graph g, const plan_layouts& l, const nlohmann::json& boxing,
                           const std::string& file) {
  plan p;
  p.model = std::move(g);
  p.mesh = l.mesh;
  p.type = l.type;
  p.microbatches = l.microbatches;
  p.recompute = l.recompute;
  p.regather_inputs = l.regather_inputs;
  p.reshard_after_forward = l.reshard_after_forward;
  p.stage_first_ops = l.stage_first_ops;
  const graph& model = p.g();
  if (l.ops.size() != model.ops.size() || l.params.size() != model.params.size())
    detail::fail<layout_error>("plan file " + file + " lays out " + detail::itos(int(l.ops.size())) + " ops and " +
                               detail::itos(int(l.params.size())) + " parameters, its model has " +
                               detail::itos(int(model.ops.size())) + " and " + detail::itos(int(model.params.size())));
  const detail::boxing_reader r{file, p};
  if (!boxing.is_object()) r.bad("lacks the field 'boxing' (the plan's boxing paths); write it again with autoddl-plan --out");
  const nlohmann::json& ops = r.slots(boxing, "ops", model.ops.size(), "field 'boxing'");
  const nlohmann::json& params = r.slots(boxing, "params", model.params.size(), "field 'boxing'");
  resize(p.ops, int(model.ops.size()));
  for (int i = 0; i < int(model.ops.size()); ++i) {
    check_signature(at(model.ops, i), at(l.ops, i), p.mesh);
    at(p.ops, i).sig = at(l.ops, i);
    r.op(i, ops[std::size_t(i)], at(p.ops, i));
  }
  for (int q = 0; q < int(model.params.size()); ++q) {
    const tensor_shape& shape = at(model.params, q).shape;
    const std::string w = "boxing of parameter '" + at(model.params, q).name + "'";
    const nlohmann::json& x = params[std::size_t(q)];
    p.params.push_back(param_plan{at(l.params, q), r.path(x, "sync", shape, w), r.path(x, "gather", shape, w),
                                  r.path(x, "slice", shape, w)});
  }
  check_plan(p);
  return p;
}

}  // namespace autoddl
