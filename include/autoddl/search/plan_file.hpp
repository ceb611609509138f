#pragma once
// Plans as files: what autoddl-plan --out writes, autoddl-train --plan runs and
// autoddl-plan --diff compares.
//
//   {"format": "autoddl-plan", "version": 1,
//    "model": "gpt:layers=2,...", "mesh": [2, 2], "hardware": "cpu-local", "dtype": "fp32",
//    "grad_sums": "fp32" (the type gradient sums were priced in: the dtype's, or fp32 beside a
//    16-bit dtype, plan_options::fp32_gradient_sums; absent from older files),
//    "optimizer": "adam", "strategy": "auto",
//    "model_hash": "61797364c227827b" (the model's content hash, model_hash: a changed model is refused),
//    "model_path": "../models/m.json" (a model file's path from the plan's folder; absent for a zoo model),
//    "schedule": {"microbatches": 2, "recompute": "full", "stages": 1,
//                 "regather_inputs": true, "reshard_after_forward": true} (plan::regather_inputs and
//                 ::reshard_after_forward; a version 2 file without them was priced without
//                 either and reads as false),
//    (a pipeline plan, search/pipeline.hpp: "stages": 2, "chunks": 1, "cuts": [0, 41] (the first op
//     of each stage), "pipeline_mesh": [4, 2] (every device); "mesh" is then one stage's mesh,
//     on which the layouts are given, e.g. [2, 2])
//    "ops": [{"name": "h0.attn.q", "kind": "linear",
//             "inputs": [["S(0)", "B"]], "params": [["B", "S(1)"], ["B", "S(0)"]], "outputs": [["S(0)", "S(2)"]]}, ...],
//    "params": [{"name": "h0.attn.q.W", "storage": ["B", "S(1)"], "grad_sum": ["P", "S(1)"]}, ...],
//    "boxing": {...} (every slot's boxing path, search/plan_boxing_file.hpp; from version 2),
//    "predicted": {"step_s": ..., "compute_s": ..., "comm_s": ..., "comm_bytes_per_device": ...,
//                  "peak_bytes_per_device": ... (the step replayed, search/step_memory.hpp)}}
//
// Every nd-SBP is a list with one entry per mesh axis, in the layout notation (S(d), B, P).
// A file is the plan value (plan/plan.hpp): plan_value_of reads it without the planner, each op's
// layouts held to the op's rules and each boxing path to its ends. It can also be read back
// against a problem (pick_of: each op's layouts one of its candidates there, each parameter's one
// of its layouts), which autoddl-plan --check and --diff do to price it again; the candidates'
// order may change between versions, the layouts may not. Version 1 files have no boxing paths:
// they are read by pick_of only.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "autoddl/error.hpp"
#include "autoddl/index.hpp"
#include "autoddl/json_input.hpp"
#include "autoddl/models/model_file.hpp"
#include "autoddl/ops/signatures.hpp"
#include "autoddl/search/plan_boxing_file.hpp"
#include "autoddl/search/plan_of.hpp"
#include "autoddl/search/planner.hpp"
#include "autoddl/search/solve.hpp"
#include "autoddl/search/step_memory.hpp"
#include "autoddl/text_file.hpp"

namespace autoddl {

inline constexpr const char* plan_file_format = "autoddl-plan";
inline constexpr int plan_file_version = 2;  ///< 2 adds "boxing"; version 1 files are read too

/// One op's layouts as a plan file holds them.
struct op_layouts {
  std::string name, kind;
  std::vector<nd_sbp> inputs, params, outputs;
};

/// A parameter's storage and gradient-summing layouts.
struct param_layouts_entry {
  std::string name;
  nd_sbp storage, grad_sum, update;  ///< update: optimizer state (ZeRO 1, 2); files without it: storage
};

/// The predicted figures a plan file carries (what the plan was chosen for).
struct plan_prediction {
  double step_s = 0, compute_s = 0, comm_s = 0, comm_bytes = 0, peak_bytes = 0;
};

/// A plan file's contents.
struct plan_file {
  std::string model, hardware, dtype, optimizer, strategy;
  std::string grad_sums;        ///< the gradient sums' type it was priced with ("fp32", or its dtype); "" in older files
  std::string path;             ///< where it was read from (read_plan_file; "" for text)
  std::string model_hash;       ///< the model's content hash (model_hash) when written; "" in older files
  std::string model_path;       ///< a model file's path relative to the plan file's folder; "" for a zoo model
  mesh_shape mesh;
  int microbatches = 1, stages = 1, chunks = 1;
  recompute_mode recompute = recompute_mode::none;
  bool regather_inputs = false, reshard_after_forward = false;  ///< absent from older files: false
  std::vector<int> cuts{0};     ///< the first op of each stage
  mesh_shape pipeline_mesh;     ///< every stage's devices (== mesh without a pipeline)
  std::vector<op_layouts> ops;
  std::vector<param_layouts_entry> params;
  nlohmann::json boxing;        ///< the boxing paths (plan_boxing_json); null in version 1 files
  plan_prediction predicted;
};

namespace detail {
inline nlohmann::json sbp_json(const nd_sbp& l) {
  nlohmann::json a = nlohmann::json::array();
  for (int i = 0; i < l.size(); ++i) a.push_back(std::string(to_string(l[i])));
  return a;
}
inline nlohmann::json sbp_list_json(const std::vector<nd_sbp>& v) {
  nlohmann::json a = nlohmann::json::array();
  for (const nd_sbp& l : v) a.push_back(sbp_json(l));
  return a;
}
}  // namespace detail

/// The plan file of result `r` of `problem` (model spec and hardware name as given by the user).
inline nlohmann::json plan_file_json(const plan_problem& problem, const plan_result& r, const std::string& model_spec,
                                     const std::string& hardware) {
  const graph& g = problem.model();
  const plan_options& o = problem.options();
  nlohmann::json ops = nlohmann::json::array();
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    const signature& s = at(problem.op_candidates(int(i)), at(r.pick, i));
    ops.push_back({{"name", g.ops[i].name},
                   {"kind", std::string(to_string(g.ops[i].kind))},
                   {"inputs", detail::sbp_list_json(s.inputs)},
                   {"params", detail::sbp_list_json(s.params)},
                   {"outputs", detail::sbp_list_json(s.outputs)}});
  }
  nlohmann::json params = nlohmann::json::array();
  for (std::size_t p = 0; p < g.params.size(); ++p) {
    const param_choice& c = at(problem.param_candidates(int(p)), at(r.pick, problem.param_node(int(p))));
    params.push_back({{"name", g.params[p].name}, {"storage", detail::sbp_json(c.storage)}, {"grad_sum", detail::sbp_json(c.grad_sum)},
                      {"update", detail::sbp_json(c.update)}});
  }
  return {{"format", plan_file_format},
          {"version", plan_file_version},
          {"model", model_spec},
          {"mesh", std::vector<int>(o.mesh.begin(), o.mesh.end())},
          {"hardware", hardware},
          {"dtype", std::string(to_string(o.type))},
          {"grad_sums", std::string(to_string(o.fp32_gradient_sums && bytes_of(o.type) < 4 ? dtype::fp32 : o.type))},
          {"optimizer", std::string(to_string(o.opt))},
          {"strategy", to_string(r.strategy)},
          {"schedule",
           {{"microbatches", o.microbatches},
            {"recompute", std::string(to_string(o.recompute))},
            {"regather_inputs", o.regather_inputs},
            {"reshard_after_forward", o.reshard_after_forward},
            {"stages", 1}}},
          {"ops", ops},
          {"params", params},
          {"boxing", plan_boxing_json(plan_of(problem, r.pick))},
          {"predicted",
           {{"step_s", r.time},
            {"compute_s", r.totals.compute()},
            {"comm_s", r.totals.comm()},
            {"comm_bytes_per_device", r.totals.bytes},
            {"peak_bytes_per_device", double(replay_step_memory(problem, r.pick).peak())}}}};
}

/// Marks plan file `file` (plan_file_json of one stage's layouts) as a pipeline of `stages`
/// stages of `chunks` model chunks on `pipeline_mesh`, cut before ops `cuts` (first 0).
inline void add_pipeline_schedule(nlohmann::json& file, const mesh_shape& pipeline_mesh, int stages, int chunks,
                                  const std::vector<int>& cuts) {
  nlohmann::json& sc = file["schedule"];
  sc["stages"] = stages;
  sc["chunks"] = chunks;
  sc["cuts"] = cuts;
  sc["pipeline_mesh"] = std::vector<int>(pipeline_mesh.begin(), pipeline_mesh.end());
}

namespace detail {
/// Reads plan-file fields, failing with one sentence naming the file and the field.
struct plan_reader {
  std::string file;
  [[noreturn]] void bad(const std::string& what) const { detail::fail<parse_error>("plan file " + file + ": " + what); }
  const nlohmann::json& need(const nlohmann::json& j, const std::string& field) const {
    if (!j.is_object() || !j.contains(field)) bad("lacks the field '" + field + "'");
    return j.at(field);
  }
  template <class V>
  V get(const nlohmann::json& j, const std::string& field) const {
    const nlohmann::json& v = need(j, field);
    if constexpr (std::is_same_v<V, int>) {
      return whole(v, field);
    } else if constexpr (std::is_same_v<V, std::vector<int>>) {
      if (!v.is_array()) bad("field '" + field + "' has the wrong type (" + json_excerpt(v) + "); give a list of whole numbers");
      V r;
      for (const nlohmann::json& e : v) r.push_back(whole(e, field));
      return r;
    } else {
      try {
        return v.get<V>();
      } catch (const nlohmann::json::exception&) {
        bad("field '" + field + "' has the wrong type (" + json_excerpt(v) + ")");
      }
    }
  }
  /// A JSON integer an int holds (json_whole): 1.5 and 2^40 are refused, not truncated or wrapped.
  int whole(const nlohmann::json& v, const std::string& field) const {
    if (const std::optional<int> x = json_whole<int>(v)) return *x;
    if (v.is_number_integer())
      bad("field '" + field + "' is " + json_excerpt(v) + ", out of range; give a whole number up to " +
          std::to_string(std::numeric_limits<int>::max()));
    bad("field '" + field + "' is " + json_excerpt(v) + "; give a whole number");
  }
  const nlohmann::json& array(const nlohmann::json& j, const std::string& field) const {
    const nlohmann::json& v = need(j, field);
    if (!v.is_array()) bad("field '" + field + "' must be an array");
    return v;
  }
  nd_sbp sbp(const nlohmann::json& v, const std::string& where) const {
    if (!v.is_array() || v.empty() || v.size() > std::size_t(max_mesh_axes))
      bad(where + " must be a list of 1 to " + std::to_string(max_mesh_axes) + " entries like [\"S(0)\", \"B\"]");
    std::string text = "[";
    for (std::size_t a = 0; a < v.size(); ++a) {
      if (!v[a].is_string()) bad(where + " entry " + std::to_string(a) + " must be a string (S(d), B or P)");
      text += (a ? "," : "") + v[a].get<std::string>();
    }
    try {
      return parse_nd_sbp(text + "]");
    } catch (const error& e) {
      bad(where + ": " + e.what());
    }
  }
  std::vector<nd_sbp> sbps(const nlohmann::json& j, const std::string& field, const std::string& where) const {
    std::vector<nd_sbp> r;
    for (const nlohmann::json& v : array(j, field)) r.push_back(sbp(v, where + " " + field + "[" + std::to_string(r.size()) + "]"));
    return r;
  }
  mesh_shape mesh(const nlohmann::json& j, const std::string& field) const {
    const auto axes = get<std::vector<int>>(j, field);
    if (axes.empty() || axes.size() > std::size_t(max_mesh_axes)) bad("field '" + field + "' must list 1 to 4 axis sizes");
    std::string text;
    for (int a : axes) text += (text.empty() ? "" : "x") + std::to_string(a);
    try {
      return parse_mesh(text);
    } catch (const error& e) {
      bad("field '" + field + "': " + e.what());
    }
  }
};

// The file's header: format, version, model, hardware, dtype, optimizer, strategy, mesh.
inline void read_plan_header(const plan_reader& r, const nlohmann::json& j, plan_file& p) {
  if (!j.is_object() || !j.contains("format") || !j["format"].is_string() || j["format"] != plan_file_format)
    r.bad("is not an autoddl plan (its 'format' is not \"autoddl-plan\")");
  if (const int v = r.get<int>(j, "version"); v < 1 || v > plan_file_version)
    r.bad("has format version " + std::to_string(v) + "; this autoddl reads versions 1 to " + std::to_string(plan_file_version));
  p.model = r.get<std::string>(j, "model");
  p.hardware = r.get<std::string>(j, "hardware");
  p.dtype = r.get<std::string>(j, "dtype");
  p.optimizer = r.get<std::string>(j, "optimizer");
  p.strategy = r.get<std::string>(j, "strategy");
  p.mesh = r.mesh(j, "mesh");
  if (j.contains("model_hash")) p.model_hash = r.get<std::string>(j, "model_hash");  // optional
  if (j.contains("grad_sums")) p.grad_sums = r.get<std::string>(j, "grad_sums");     // optional
  if (j.contains("model_path")) p.model_path = r.get<std::string>(j, "model_path");  // optional
}

// The schedule: micro-batches, recomputation, stages (and a pipeline's chunks, cuts and mesh).
inline void read_plan_schedule(const plan_reader& r, const nlohmann::json& j, plan_file& p) {
  const nlohmann::json& sc = r.need(j, "schedule");
  p.microbatches = r.get<int>(sc, "microbatches");
  if (p.microbatches < 1) r.bad("field 'schedule.microbatches' must be at least 1");
  try {
    p.recompute = parse_recompute(r.get<std::string>(sc, "recompute"));
  } catch (const error& e) {
    r.bad(std::string("field 'schedule.recompute': ") + e.what());
  }
  // optional: files written before these fields were priced keeping gathered copies
  if (sc.contains("regather_inputs")) p.regather_inputs = r.get<bool>(sc, "regather_inputs");
  if (sc.contains("reshard_after_forward")) p.reshard_after_forward = r.get<bool>(sc, "reshard_after_forward");
  p.stages = r.get<int>(sc, "stages");
  if (p.stages < 1) r.bad("field 'schedule.stages' must be at least 1");
  p.pipeline_mesh = p.mesh;
  if (p.stages == 1) return;
  p.chunks = r.get<int>(sc, "chunks");
  if (p.chunks < 1) r.bad("field 'schedule.chunks' must be at least 1 (model chunks per stage)");
  p.cuts = r.get<std::vector<int>>(sc, "cuts");
  if (int(p.cuts.size()) != p.stages || p.cuts.front() != 0 || !std::is_sorted(p.cuts.begin(), p.cuts.end()) ||
      std::adjacent_find(p.cuts.begin(), p.cuts.end()) != p.cuts.end())
    r.bad("field 'schedule.cuts' must list the first op of each of the " + std::to_string(p.stages) +
          " stages, ascending from 0");
  p.pipeline_mesh = r.mesh(sc, "pipeline_mesh");
  if (p.pipeline_mesh.devices() != p.mesh.devices() * p.stages)
    r.bad("field 'schedule.pipeline_mesh' must hold " + std::to_string(p.stages) + " stages of mesh " + to_string(p.mesh));
}

// The ops' and parameters' layouts.
inline void read_plan_layouts(const plan_reader& r, const nlohmann::json& j, plan_file& p) {
  for (const nlohmann::json& o : r.array(j, "ops")) {
    op_layouts l;
    l.name = r.get<std::string>(o, "name");
    l.kind = r.get<std::string>(o, "kind");
    const std::string where = "op '" + l.name + "'";
    l.inputs = r.sbps(o, "inputs", where);
    l.params = r.sbps(o, "params", where);
    l.outputs = r.sbps(o, "outputs", where);
    p.ops.push_back(std::move(l));
  }
  if (p.stages > 1 && p.cuts.back() >= int(p.ops.size()))
    r.bad("field 'schedule.cuts' names op " + std::to_string(p.cuts.back()) + " of " + std::to_string(p.ops.size()));
  for (const nlohmann::json& q : r.array(j, "params")) {
    param_layouts_entry e;
    e.name = r.get<std::string>(q, "name");
    e.storage = r.sbp(r.need(q, "storage"), "parameter '" + e.name + "' storage");
    e.grad_sum = r.sbp(r.need(q, "grad_sum"), "parameter '" + e.name + "' grad_sum");
    // optional: the optimizer state's layout (ZeRO stages 1 and 2); absent means the storage
    e.update = q.contains("update") ? r.sbp(q.at("update"), "parameter '" + e.name + "' update") : e.storage;
    p.params.push_back(std::move(e));
  }
}

// The predicted figures, where the file has them.
inline plan_prediction read_plan_prediction(const nlohmann::json& j) {
  if (!j.contains("predicted") || !j["predicted"].is_object()) return {};
  const nlohmann::json& pr = j["predicted"];
  auto num = [&](const char* f) { return pr.contains(f) && pr[f].is_number() ? pr[f].get<double>() : 0.0; };
  return {num("step_s"), num("compute_s"), num("comm_s"), num("comm_bytes_per_device"), num("peak_bytes_per_device")};
}
}  // namespace detail

/// Parses a plan file's text; `file` names it in errors. @throws parse_error naming the field.
inline plan_file parse_plan_file(std::string_view text, const std::string& file) {
  const detail::plan_reader r{file};
  const nlohmann::json j = parse_json(text, "plan file " + file);
  plan_file p;
  detail::read_plan_header(r, j, p);
  detail::read_plan_schedule(r, j, p);
  detail::read_plan_layouts(r, j, p);
  p.predicted = detail::read_plan_prediction(j);
  if (j.contains("boxing")) p.boxing = j.at("boxing");
  return p;
}

/// Reads and parses a plan file. @throws parse_error (or error when unreadable).
inline plan_file read_plan_file(const std::string& path) {
  const std::optional<std::string> text = read_text_file(path, "plan file");
  if (!text) detail::fail<error>("cannot read plan file '" + path + "'");
  plan_file f = parse_plan_file(*text, path);
  f.path = path;
  return f;
}

/// Records in plan file `file`, to be written at `plan_path`, the model's content hash and, for a
/// model read from a file, that file's path relative to the plan's folder (an absolute path as
/// given), so the plan runs from any working directory and refuses a model that changed since.
inline void add_model_identity(nlohmann::json& file, const std::string& model_spec, const std::string& plan_path) {
  file["model_hash"] = model_hash(load_model(model_spec));
  const std::string model_file = model_spec_path(model_spec);
  if (model_file.empty()) return;
  namespace fs = std::filesystem;
  if (fs::path(model_file).is_absolute()) {  // as given: it names one file from anywhere
    file["model_path"] = model_file;
    return;
  }
  const fs::path folder = fs::absolute(fs::path(plan_path)).parent_path();
  file["model_path"] = fs::absolute(model_file).lexically_normal().lexically_relative(folder.lexically_normal()).string();
}

/// The model spec to load for plan file f: where its model is a file, the one at model_path
/// relative to the plan file when that exists (else the spec as written, relative to the
/// working directory). @throws error when the model's content hash differs from the file's:
/// the model changed since the plan was made.
inline std::string plan_model_spec(const plan_file& f) {
  namespace fs = std::filesystem;
  std::string spec = f.model;
  if (!f.model_path.empty() && !f.path.empty()) {
    const fs::path beside = (fs::absolute(fs::path(f.path)).parent_path() / f.model_path).lexically_normal();
    std::error_code ec;
    if (fs::exists(beside, ec)) spec = with_model_path(f.model, beside.string());
  }
  if (!f.model_hash.empty()) {
    const std::string now = model_hash(load_model(spec));
    if (now != f.model_hash)
      detail::fail<error>("plan file " + f.path + " was made for model '" + f.model + "' with content hash " + f.model_hash +
                          ", but that model now hashes to " + now + ": it changed since; plan it again (autoddl-plan --out)");
  }
  return spec;
}

namespace detail {

// How many per-axis entries of candidate c's tensors differ from the file's layouts l.
inline int layout_distance(const signature& c, const op_layouts& l) {
  int d = 0;
  auto add = [&d](const std::vector<nd_sbp>& a, const std::vector<nd_sbp>& b) {
    for (std::size_t t = 0; t < a.size(); ++t)
      for (int x = 0; x < a[t].size(); ++x) d += t >= b.size() || x >= b[t].size() || !(a[t][x] == b[t][x]);
  };
  add(c.inputs, l.inputs);
  add(c.params, l.params);
  add(c.outputs, l.outputs);
  return d;
}

// Op i's layouts l, which are not among its candidates: the rule they break (signature_problem)
// and the nearest valid layouts (fewest per-axis entries changed, at most three).
inline std::string invalid_layouts_sentence(const plan_problem& problem, int i, const op_layouts& l) {
  const op_node& op = at(problem.model().ops, i);
  const mesh_shape& mesh = problem.options().mesh;
  std::string why = signature_problem(op, signature{l.inputs, l.params, l.outputs}, mesh);
  if (why.empty()) why = "op '" + op.name + "' takes a valid signature there that the planner does not offer";
  std::vector<std::pair<int, int>> near;  // (distance, candidate)
  const auto& cands = problem.op_candidates(i);
  for (int c = 0; c < int(cands.size()); ++c) near.push_back({layout_distance(at(cands, c), l), c});
  std::sort(near.begin(), near.end());
  std::string nearest;
  for (std::size_t k = 0; k < near.size() && k < 3; ++k)
    nearest += (k == 0 ? "" : "; ") + to_string(op, at(cands, near[k].second));
  return "the plan's layouts of op '" + op.name + "' on mesh " + to_string(mesh) + ": " + why +
         (nearest.empty() ? std::string() : "; the nearest valid layouts: " + nearest);
}

}  // namespace detail

/// The pick (per node of problem.untied()) that runs exactly the file's layouts on `problem`, a problem
/// built from the file's model, mesh and schedule. @throws layout_error naming the op or
/// parameter whose layouts `problem` does not offer.
inline std::vector<int> pick_of(const plan_problem& problem, const plan_file& f) {
  const graph& g = problem.model();
  if (f.ops.size() != g.ops.size() || f.params.size() != g.params.size())
    detail::fail<layout_error>("the plan has " + std::to_string(f.ops.size()) + " ops and " + std::to_string(f.params.size()) +
                       " parameters but model '" + f.model + "' has " + std::to_string(g.ops.size()) + " and " +
                       std::to_string(g.params.size()));
  std::vector<int> pick(std::size_t(problem.untied().nodes()), -1);
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    const op_layouts& l = f.ops[i];
    if (l.name != g.ops[i].name || l.kind != to_string(g.ops[i].kind))
      detail::fail<layout_error>("plan op " + std::to_string(i) + " is " + detail::excerpt(l.kind) + " '" + detail::excerpt(l.name) +
                                 "' but the model's op " + std::to_string(i) + " is " + std::string(to_string(g.ops[i].kind)) +
                                 " '" + g.ops[i].name + "'");
    const auto& cands = problem.op_candidates(int(i));
    for (std::size_t c = 0; c < cands.size() && pick[i] < 0; ++c)
      if (cands[c].inputs == l.inputs && cands[c].params == l.params && cands[c].outputs == l.outputs) pick[i] = int(c);
    if (pick[i] < 0) detail::fail<layout_error>(detail::invalid_layouts_sentence(problem, int(i), l));
  }
  for (std::size_t p = 0; p < g.params.size(); ++p) {
    const param_layouts_entry& e = f.params[p];
    if (e.name != g.params[p].name)
      detail::fail<layout_error>("plan parameter " + std::to_string(p) + " is '" + e.name + "' but the model's is '" +
                         g.params[p].name + "'");
    const auto& cands = problem.param_candidates(int(p));
    int& slot = pick[std::size_t(problem.param_node(int(p)))];
    for (std::size_t c = 0; c < cands.size() && slot < 0; ++c)
      if (cands[c] == param_choice{e.storage, e.grad_sum, e.update}) slot = int(c);
    if (slot < 0)
      detail::fail<layout_error>("the plan's storage " + to_string(e.storage) + ", summing layout " + to_string(e.grad_sum) +
                         " and update layout " + to_string(e.update) + " of parameter '" + e.name +
                         "' are not candidates of it");
  }
  return pick;
}

/// The result of running pick on problem (priced as the search prices it), labelled `s`.
inline plan_result result_of(const plan_problem& problem, std::vector<int> pick, plan_strategy s) {
  plan_result r;
  r.strategy = s;
  r.pick = std::move(pick);
  price_pick(problem, r);
  return r;
}

/// Plan file f as the plan value it holds, on its model `g` (load_model(plan_model_spec(f)), one
/// micro-batch), without the planner: each op's layouts held to the op's rules, the boxing paths
/// rebuilt from the file and held to their ends (plan_from_file).
/// @throws parse_error or layout_error naming the file and what does not fit; error for a version
/// 1 file, which holds no boxing paths.
inline plan plan_value_of(const plan_file& f, shared_graph g) {
  const std::string name = f.path.empty() ? std::string("(text)") : f.path;
  if (f.boxing.is_null())
    detail::fail<error>("plan file " + name + " holds no boxing paths (format version 1); write it again with autoddl-plan --out");
  const graph& model = *g;
  if (f.ops.size() != model.ops.size() || f.params.size() != model.params.size())
    detail::fail<layout_error>("plan file " + name + " lays out " + std::to_string(f.ops.size()) + " ops and " +
                               std::to_string(f.params.size()) + " parameters, but model '" + f.model + "' has " +
                               std::to_string(model.ops.size()) + " and " + std::to_string(model.params.size()));
  plan_layouts l;
  l.mesh = f.mesh;
  l.type = parse_dtype(f.dtype);
  l.microbatches = f.microbatches;
  l.recompute = f.recompute;
  l.regather_inputs = f.regather_inputs;
  l.reshard_after_forward = f.reshard_after_forward;
  l.stage_first_ops = f.cuts;
  for (std::size_t i = 0; i < f.ops.size(); ++i) {
    if (f.ops[i].name != model.ops[i].name || f.ops[i].kind != to_string(model.ops[i].kind))
      detail::fail<layout_error>("plan file " + name + ": op " + std::to_string(i) + " is " + f.ops[i].kind + " '" + f.ops[i].name +
                                 "' but the model's op " + std::to_string(i) + " is " + std::string(to_string(model.ops[i].kind)) +
                                 " '" + model.ops[i].name + "'");
    l.ops.push_back(signature{f.ops[i].inputs, f.ops[i].params, f.ops[i].outputs});
  }
  for (std::size_t q = 0; q < f.params.size(); ++q) {
    const param_layouts_entry& e = f.params[q];
    if (e.name != model.params[q].name)
      detail::fail<layout_error>("plan file " + name + ": parameter " + std::to_string(q) + " is '" + e.name + "' but the model's is '" +
                                 model.params[q].name + "'");
    l.params.push_back(param_choice{e.storage, e.grad_sum, e.update});
  }
  return plan_from_file(std::move(g), l, f.boxing, name);
}

}  // namespace autoddl
