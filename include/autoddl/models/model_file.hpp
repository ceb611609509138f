#pragma once
// Models as files: a user's own network as JSON, planned and trained like a zoo model
// (load_model("path/to/model.json"); load_model takes zoo specs too), and any zoo model written in that format
// (autoddl-plan --export-model m.json).
//
//   {"format": "autoddl-model", "version": 1, "name": "my-mlp",
//    "inputs": [{"name": "x", "shape": [32, 784]}, {"name": "labels", "shape": [32]}],
//    "params": [{"name": "fc1.W", "shape": [784, 256]}, {"name": "fc1.b", "shape": [256]}, ...],
//    "ops": [{"name": "fc1", "op": "linear", "inputs": ["x"], "params": ["fc1.W", "fc1.b"]},
//            {"name": "act1", "op": "relu", "inputs": ["fc1"]},
//            ...
//            {"name": "loss", "op": "cross_entropy", "inputs": ["fc2", "labels"]}],
//    "loss": "loss"}
//
// - An op's "inputs" name graph inputs or earlier ops (an op's first output; "name:k" its k-th);
//   "params" name entries of "params": two ops naming one parameter tie it (GPT's wte).
// - Ops come from the op catalogue (ops/op.hpp): linear, matmul, batched_matmul, conv2d,
//   max_pool, relu, gelu, dropout, layernorm, softmax, attention, embedding, cross_entropy, add,
//   reshape, rmsnorm, silu, mul, swiglu, rotary, router, load_balance, dispatch, experts,
//   combine, routed_experts. "attrs" (optional) sets kernel, stride, padding, heads, kv_heads, causal,
//   unfused_attention, balanced_context, dropout, bias,
//   transpose_w, positions, target, eps, rope_theta, topk, capacity, renormalize, aux_coef, imbalance, as
//   ops/op.hpp's op_attrs defines them.
// - Output shapes are inferred (ops/shapes.hpp); "block" and "block_pos" (optional) mark repeated
//   blocks the planner may tie.
// - Dim 0 of every input is the batch (so is dim 0 of a reshape target): micro-batches divide it,
//   and the spec `path.json:batch=N` (the programs' --batch N) rescales it.
// Every error is one sentence naming the file, the op (or input, parameter) and the field.
#include <cstdint>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "autoddl/error.hpp"
#include "autoddl/index.hpp"
#include "autoddl/json_input.hpp"
#include "autoddl/models/graph.hpp"
#include "autoddl/models/hf_config.hpp"
#include "autoddl/models/zoo.hpp"
#include "autoddl/ops/shapes.hpp"
#include "autoddl/parse_number.hpp"
#include "autoddl/text_file.hpp"

namespace autoddl {

inline constexpr const char* model_file_format = "autoddl-model";
inline constexpr int model_file_version = 1;

namespace detail {

inline nlohmann::json shape_json(const tensor_shape& s) { return std::vector<std::int64_t>(s.begin(), s.end()); }

struct model_reader {
  std::string file;
  [[noreturn]] void bad(const std::string& where, const std::string& what) const {
    fail<parse_error>("model file " + file + ": " + where + (where.empty() ? "" : ": ") + what);
  }
  const nlohmann::json& need(const nlohmann::json& j, const std::string& field, const std::string& where) const {
    if (!j.is_object() || !j.contains(field)) bad(where, "lacks the field '" + field + "'");
    return j.at(field);
  }
  std::string text(const nlohmann::json& j, const std::string& field, const std::string& where) const {
    const nlohmann::json& v = need(j, field, where);
    if (!v.is_string()) bad(where, "field '" + field + "' must be a string");
    return v.get<std::string>();
  }
  std::int64_t integer(const nlohmann::json& v, const std::string& field, const std::string& where, std::int64_t lo,
                       std::int64_t hi) const {
    if (!v.is_number_integer() || v.get<std::int64_t>() < lo || v.get<std::int64_t>() > hi)
      bad(where, "field '" + field + "' must be a whole number from " + itos(lo) + " to " + itos(hi));
    return v.get<std::int64_t>();
  }
  tensor_shape shape(const nlohmann::json& j, const std::string& where) const {
    const nlohmann::json& v = need(j, "shape", where);
    if (!v.is_array() || std::ssize(v) > max_tensor_rank)
      bad(where, "field 'shape' must be a list of at most " + itos(max_tensor_rank) + " sizes");
    tensor_shape s;
    std::int64_t elements = 1;  // refused before anything is sized by it: at most 2^48 elements
    for (const nlohmann::json& d : v) {
      const std::int64_t n = integer(d, "shape", where, 1, std::int64_t(1) << 40);
      if ((elements *= n) > (std::int64_t(1) << 48)) bad(where, "field 'shape' has more than 2^48 elements");
      s.push_back(n);
    }
    return s;
  }
  const nlohmann::json& list(const nlohmann::json& j, const std::string& field, const std::string& where) const {
    const nlohmann::json& v = need(j, field, where);
    if (!v.is_array()) bad(where, "field '" + field + "' must be a list");
    return v;
  }
};

inline void read_attrs(const model_reader& r, const nlohmann::json& a, op_attrs& at_, const std::string& where) {
  if (!a.is_object()) r.bad(where, "field 'attrs' must be an object");
  for (const auto& [key, v] : a.items()) {
    const std::string f = "attrs." + key;
    auto flag = [&] {
      if (!v.is_boolean()) r.bad(where, "field '" + f + "' must be true or false");
      return v.get<bool>();
    };
    if (key == "kernel") at_.kernel = int(r.integer(v, f, where, 1, 1 << 16));
    else if (key == "stride") at_.stride = int(r.integer(v, f, where, 1, 1 << 16));
    else if (key == "padding") at_.padding = int(r.integer(v, f, where, 0, 1 << 16));
    else if (key == "heads") at_.heads = int(r.integer(v, f, where, 1, 1 << 16));
    else if (key == "kv_heads") at_.kv_heads = int(r.integer(v, f, where, 1, 1 << 16));
    else if (key == "topk") at_.topk = int(r.integer(v, f, where, 1, 1 << 16));
    else if (key == "capacity") at_.capacity = int(r.integer(v, f, where, 1, 1 << 30));
    else if (key == "renormalize") at_.renormalize = flag();
    else if (key == "aux_coef") {
      if (!v.is_number() || !(v.get<double>() >= 0) || !(v.get<double>() < 1e300))
        r.bad(where, "field '" + f + "' must be a non-negative number");
      at_.aux_coef = v.get<double>();
    }
    else if (key == "imbalance") {
      if (!v.is_number() || !(v.get<double>() >= 1) || !(v.get<double>() < 1e300))
        r.bad(where, "field '" + f + "' must be a number >= 1");
      at_.imbalance = v.get<double>();
    }
    else if (key == "eps" || key == "rope_theta") {
      if (!v.is_number() || !(v.get<double>() > 0) || !(v.get<double>() < 1e300))
        r.bad(where, "field '" + f + "' must be a positive number");
      (key == "eps" ? at_.eps : at_.rope_theta) = v.get<double>();
    }
    else if (key == "causal") at_.causal = flag();
    else if (key == "unfused_attention") at_.unfused_attention = flag();
    else if (key == "balanced_context") at_.balanced_context = flag();
    else if (key == "bias") at_.bias = flag();
    else if (key == "transpose_w") at_.transpose_w = flag();
    else if (key == "positions") at_.positions = flag();
    else if (key == "dropout") {
      if (!v.is_number() || v.get<double>() < 0 || v.get<double>() >= 1) r.bad(where, "field '" + f + "' must be in [0, 1)");
      at_.dropout = v.get<double>();
    } else if (key == "target") {
      at_.target = r.shape(nlohmann::json{{"shape", v}}, where + " attrs.target");
    } else {
      r.bad(where, "unknown attribute '" + key + "' (kernel, stride, padding, heads, kv_heads, causal, unfused_attention, balanced_context, dropout, bias, "
                   "transpose_w, positions, target, eps, rope_theta, topk, capacity, renormalize, aux_coef, imbalance)");
    }
  }
}

}  // namespace detail

/// A model file's JSON for graph g (every zoo model can be written this way).
inline nlohmann::json model_file_json(const graph& g) {
  std::vector<std::string> input_names;
  nlohmann::json inputs = nlohmann::json::array();
  for (std::size_t i = 0; i < g.inputs.size(); ++i) {
    const bool labels = i + 1 == g.inputs.size() && g.loss_op >= 0;
    input_names.push_back(g.inputs.size() == 2 ? (i == 0 ? "data" : "labels") : (labels ? "labels" : "input" + std::to_string(i)));
    inputs.push_back({{"name", input_names.back()}, {"shape", detail::shape_json(g.inputs[i])}});
  }
  nlohmann::json params = nlohmann::json::array();
  for (const param_info& p : g.params) params.push_back({{"name", p.name}, {"shape", detail::shape_json(p.shape)}});
  const op_attrs plain{};
  nlohmann::json ops = nlohmann::json::array();
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    const op_node& n = g.ops[i];
    nlohmann::json in = nlohmann::json::array();
    for (const tensor_ref& r : g.op_inputs[i])
      in.push_back(r.op < 0 ? input_names.at(std::size_t(r.index))
                            : g.ops.at(std::size_t(r.op)).name + (r.index ? ":" + std::to_string(r.index) : ""));
    nlohmann::json ps = nlohmann::json::array();
    for (int id : n.param_ids) ps.push_back(g.params.at(std::size_t(id)).name);
    nlohmann::json o = {{"name", n.name}, {"op", std::string(to_string(n.kind))}, {"inputs", in}, {"params", ps}};
    nlohmann::json a = nlohmann::json::object();
    const op_attrs& t = n.attrs;
    if (t.kernel != plain.kernel) a["kernel"] = t.kernel;
    if (t.stride != plain.stride) a["stride"] = t.stride;
    if (t.padding != plain.padding) a["padding"] = t.padding;
    if (t.heads != plain.heads) a["heads"] = t.heads;
    if (t.kv_heads != plain.kv_heads) a["kv_heads"] = t.kv_heads;
    if (n.kind == op_kind::rmsnorm && t.eps != plain.eps) a["eps"] = t.eps;
    if (n.kind == op_kind::rotary && t.rope_theta != plain.rope_theta) a["rope_theta"] = t.rope_theta;
    if (t.topk != plain.topk) a["topk"] = t.topk;
    if (t.capacity != plain.capacity) a["capacity"] = t.capacity;
    if (t.renormalize != plain.renormalize) a["renormalize"] = t.renormalize;
    if (n.kind == op_kind::load_balance && t.aux_coef != plain.aux_coef) a["aux_coef"] = t.aux_coef;
    if (n.kind == op_kind::routed_experts && t.imbalance != plain.imbalance) a["imbalance"] = t.imbalance;
    if (t.causal != plain.causal) a["causal"] = t.causal;
    if (t.unfused_attention != plain.unfused_attention) a["unfused_attention"] = t.unfused_attention;
    if (t.balanced_context != plain.balanced_context) a["balanced_context"] = t.balanced_context;
    if (t.dropout != plain.dropout) a["dropout"] = t.dropout;
    if (t.bias != plain.bias) a["bias"] = t.bias;
    if (t.transpose_w != plain.transpose_w) a["transpose_w"] = t.transpose_w;
    if (t.positions != plain.positions) a["positions"] = t.positions;
    if (t.target.rank() > 0) a["target"] = detail::shape_json(t.target);
    if (!a.empty()) o["attrs"] = a;
    if (g.block[i] >= 0) {
      o["block"] = g.block[i];
      o["block_pos"] = g.block_pos[i];
    }
    ops.push_back(o);
  }
  return {{"format", model_file_format}, {"version", model_file_version}, {"name", g.name}, {"inputs", inputs},
          {"params", params}, {"ops", ops}, {"loss", g.ops.at(std::size_t(g.loss_op)).name}};
}

namespace detail {

/// Builds a graph from a parsed model file, section by section (inputs, parameters, ops, loss).
class model_file_builder {
 public:
  model_file_builder(const model_reader& r, const std::string& file, int microbatches, std::int64_t batch = 0)
      : reader_(r), file_(file), microbatches_(microbatches), new_batch_(batch) {}

  graph build(const nlohmann::json& j) {
    g_.name = j.contains("name") && j["name"].is_string() ? j["name"].get<std::string>() : file_;
    for (const nlohmann::json& in : reader_.list(j, "inputs", "")) add_input(in);
    for (const nlohmann::json& p : reader_.list(j, "params", "")) add_param(p);
    for (const nlohmann::json& o : reader_.list(j, "ops", "")) add_op(o);
    const std::string loss = reader_.text(j, "loss", "");
    auto it = tensors_.find(loss);
    if (it == tensors_.end() || it->second.op < 0) reader_.bad("", "field 'loss' names no op ('" + loss + "')");
    g_.loss_op = it->second.op;
    validate(g_);  // blocks repeat, the loss is a scalar, parameters match their uses
    return std::move(g_);
  }

 private:
  // An input: its batch dim (dim 0, the same for every input) divided into the micro-batches.
  void add_input(const nlohmann::json& in) {
    const std::string name = reader_.text(in, "name", "an input");
    const std::string where = "input '" + name + "'";
    tensor_shape s = reader_.shape(in, where);
    if (s.rank() == 0) reader_.bad(where, "an input needs a batch dim (dim 0)");
    if (batch_ == 0) batch_ = s[0];
    if (s[0] != batch_) reader_.bad(where, "dim 0 is the batch: " + itos(s[0]) + " differs from the first input's " + itos(batch_));
    if (new_batch_ > 0) s[0] = new_batch_;  // --batch
    if (microbatches_ < 1 || s[0] % microbatches_ != 0)
      fail<error>("--microbatches " + itos(microbatches_) + " does not divide the batch of " + itos(s[0]) +
                  "; choose a divisor of the batch (1 trains the whole batch at once)");
    s[0] /= microbatches_;
    if (!tensors_.emplace(name, tensor_ref{-1, int(g_.inputs.size())}).second) reader_.bad(where, "the name is used twice");
    g_.inputs.push_back(s);
  }

  void add_param(const nlohmann::json& p) {
    const std::string name = reader_.text(p, "name", "a parameter");
    if (!param_ids_.emplace(name, int(g_.params.size())).second) reader_.bad("parameter '" + name + "'", "the name is used twice");
    g_.params.push_back({name, reader_.shape(p, "parameter '" + name + "'")});
  }

  void add_op(const nlohmann::json& o) {
    op_node n;
    n.name = reader_.text(o, "name", "op " + std::to_string(g_.ops.size()));
    const std::string where = "op '" + n.name + "'";
    read_kind_and_attrs(o, n, where);
    std::vector<tensor_ref> refs;
    for (const nlohmann::json& in : reader_.list(o, "inputs", where)) {
      refs.push_back(input_ref(in, where));
      n.inputs.push_back(shape_of(g_, refs.back()));
    }
    if (o.contains("params"))
      for (const nlohmann::json& pn : reader_.list(o, "params", where)) {
        if (!pn.is_string()) reader_.bad(where, "field 'params' lists parameter names (strings)");
        auto it = param_ids_.find(pn.get<std::string>());
        if (it == param_ids_.end()) reader_.bad(where, "parameter '" + pn.get<std::string>() + "' is not in 'params'");
        n.param_ids.push_back(it->second);
        n.params.push_back(at(g_.params, it->second).shape);
      }
    try {
      n.outputs = infer_outputs(n);
    } catch (const layout_error& e) {
      fail<layout_error>("model file " + file_ + ": " + e.what());
    }
    assign_param_roles(g_, n);  // by the op's kind and slot, whatever the file names it
    const int blk = o.contains("block") ? int(reader_.integer(o["block"], "block", where, 0, 1 << 20)) : -1;
    const int pos = o.contains("block_pos") ? int(reader_.integer(o["block_pos"], "block_pos", where, 0, 1 << 20)) : -1;
    if ((blk < 0) != (pos < 0)) reader_.bad(where, "give both 'block' and 'block_pos', or neither");
    if (!tensors_.emplace(n.name, tensor_ref{int(g_.ops.size()), 0}).second) reader_.bad(where, "the name is used twice");
    g_.ops.push_back(std::move(n));
    g_.op_inputs.push_back(std::move(refs));
    g_.block.push_back(blk);
    g_.block_pos.push_back(pos);
  }

  void read_kind_and_attrs(const nlohmann::json& o, op_node& n, const std::string& where) const {
    const std::string kind = reader_.text(o, "op", where);
    const std::optional<op_kind> known = parse_op_kind(kind);
    if (known) n.kind = *known;
    else reader_.bad(where, "unknown op '" + kind + "' in field 'op' (see ops/op.hpp's catalogue)");
    if (o.contains("attrs")) read_attrs(reader_, o["attrs"], n.attrs, where);
    if (n.kind == op_kind::reshape && n.attrs.target.rank() > 0) {
      if (new_batch_ > 0 && batch_ > 0) {  // --batch: dim 0 holds the batch times a whole factor
        if (n.attrs.target[0] % batch_ != 0)
          reader_.bad(where, "attrs.target dim 0 (" + itos(n.attrs.target[0]) + ") is not a multiple of the batch (" +
                            itos(batch_) + "), so --batch cannot rescale it");
        n.attrs.target[0] = n.attrs.target[0] / batch_ * new_batch_;
      }
      if (n.attrs.target[0] % microbatches_ != 0) reader_.bad(where, "attrs.target dim 0 (the batch) does not split into the micro-batches");
      n.attrs.target[0] /= microbatches_;
    }
  }

  // "name" (a graph input or an op's output 0) or "name:k" (output k of op name).
  tensor_ref input_ref(const nlohmann::json& in, const std::string& where) const {
    if (!in.is_string()) reader_.bad(where, "field 'inputs' lists names (strings)");
    std::string name = in.get<std::string>();
    int index = 0;
    if (!tensors_.count(name) && name.find(':') != std::string::npos) {
      const std::string k = name.substr(name.rfind(':') + 1);
      if (k.empty() || k.size() > 2 || k.find_first_not_of("0123456789") != std::string::npos)
        reader_.bad(where, "input '" + name + "' is not a graph input or an earlier op");
      index = parse_number<int>(k, where + ": the output index of input '" + name + "'");
      name = name.substr(0, name.rfind(':'));
    }
    auto it = tensors_.find(name);
    if (it == tensors_.end()) reader_.bad(where, "input '" + in.get<std::string>() + "' is not a graph input or an earlier op");
    tensor_ref t = it->second;
    if (t.op >= 0) {
      if (index >= int(at(g_.ops, t.op).outputs.size()))
        reader_.bad(where, "input '" + in.get<std::string>() + "': op '" + name + "' has no output " + std::to_string(index));
      t.index = index;
    }
    return t;
  }

  const model_reader& reader_;
  const std::string& file_;
  int microbatches_;
  std::int64_t new_batch_;  // 0: the file's batch
  graph g_;
  std::map<std::string, tensor_ref> tensors_;  // name -> producer
  std::map<std::string, int> param_ids_;
  std::int64_t batch_ = 0;
};

}  // namespace detail

/// Parses a model file's text into a graph with `microbatches` micro-batches (dim 0 of every
/// input and of every reshape target divided by it). @throws parse_error naming the file, the
/// op and the field; layout_error (from shape inference) naming the op.
inline graph parse_model_file(std::string_view text, const std::string& file, int microbatches = 1,
                              std::int64_t batch = 0) {
  const detail::model_reader r{file};
  const nlohmann::json j = parse_json(text, "model file " + file);
  if (j.is_object() && !j.contains("format") && j.contains("model_type"))  // a Hugging Face config.json
    r.bad("", "is a Hugging Face config (it has 'model_type'), not an autoddl model; did you mean hf:" + file + "?");
  if (!j.is_object() || !j.contains("format") || j["format"] != model_file_format)
    r.bad("", "is not an autoddl model (its 'format' is not \"autoddl-model\")");
  if (!j.contains("version") || j["version"] != model_file_version)
    r.bad("", "has a format version this autoddl does not read (it reads " + std::to_string(model_file_version) + ")");
  return detail::model_file_builder(r, file, microbatches, batch).build(j);
}

/// A model file's spec split: `path.json` or `path.json:batch=N` (what --batch writes).
struct model_file_spec {
  std::string path;
  std::int64_t batch = 0;  ///< 0: the file's own
};

/// Whether a model spec names a file rather than a zoo model: it ends in .json, or in
/// .json:batch=N.
inline bool is_model_file(std::string_view spec) {
  const std::size_t at = spec.rfind(".json");
  if (at == std::string_view::npos || at == 0) return false;
  return at + 5 == spec.size() || spec.substr(at + 5, 7) == ":batch=";
}

/// Splits a model file's spec. @throws parse_error on a batch that is not a positive number.
inline model_file_spec parse_model_file_spec(std::string_view spec) {
  const std::size_t at = spec.rfind(".json");
  model_file_spec r{std::string(spec.substr(0, at + 5)), 0};
  if (at + 5 == spec.size()) return r;
  const std::string n(spec.substr(at + 12));
  r.batch = parse_number<std::int64_t>(n, "model spec '" + detail::excerpt(spec) + "': batch");
  if (r.batch < 1 || r.batch > (std::int64_t(1) << 40))
    detail::fail<parse_error>("model spec '" + detail::excerpt(spec) + "': batch=" + n + " is not a positive whole number up to 2^40");
  return r;
}

/// Reads a model file (`path.json`, or `path.json:batch=N` with dim 0 of every input and every
/// reshape target rescaled to the batch N). @throws error when unreadable, parse_error /
/// layout_error when wrong.
inline graph read_model_file(const std::string& spec, int microbatches = 1) {
  const model_file_spec f = parse_model_file_spec(spec);
  const std::optional<std::string> text = read_text_file(f.path, "model file");
  if (!text) detail::fail<error>("cannot read model file '" + f.path + "'");
  return parse_model_file(*text, f.path, microbatches, f.batch);
}

/// A model by spec: a Hugging Face config when the spec starts with hf: (models/hf_config.hpp),
/// a model file when it ends in .json (or .json:batch=N), else a zoo model (build_model);
/// `microbatches` micro-batches (the graph is one of them).
inline graph load_model(std::string_view spec, int microbatches = 1) {
  if (is_hf_spec(spec)) return build_hf_model(spec, microbatches);
  if (is_model_file(spec)) return read_model_file(std::string(spec), microbatches);
  return build_model(spec, microbatches);
}

/// The spec `spec` with the sequence length and the global batch set (the programs' --seq and
/// --batch; nullopt keeps the model's own): a zoo spec's seq= and batch= keys, an hf spec's
/// :seq=,batch= suffix, a model file's :batch=. `flag` names the option in errors.
/// @throws parse_error when the model has no sequence (vgg, mlp, a model file: its inputs say
/// which dim is the batch, not which is a sequence) or a size is not positive.
inline std::string resize_model_spec(std::string_view spec, std::optional<std::int64_t> seq,
                                     std::optional<std::int64_t> batch) {
  for (const auto& [flag, v] : {std::pair{"--seq", seq}, std::pair{"--batch", batch}})
    if (v && *v < 1) detail::fail<parse_error>(std::string(flag) + " " + std::to_string(*v) + " is not a positive whole number");
  if (!seq && !batch) return std::string(spec);
  if (is_hf_spec(spec)) {
    hf_spec h = parse_hf_spec(spec);
    if (seq) h.seq = seq;
    if (batch) h.batch = batch;
    return to_string(h);
  }
  if (is_model_file(spec)) {
    model_file_spec f = parse_model_file_spec(spec);
    if (seq)
      detail::fail<parse_error>("--seq " + std::to_string(*seq) + ": model file '" + f.path +
                                "' fixes its shapes (its inputs mark the batch, not a sequence); edit the file, or "
                                "plan a zoo model or an hf config");
    return f.path + ":batch=" + std::to_string(*batch);
  }
  detail::model_spec s = detail::parse_spec(spec);
  const bool has_seq = s.model == "gpt" || s.model == "bert" || s.model == "llama";
  if (seq && !has_seq)
    detail::fail<parse_error>("--seq " + std::to_string(*seq) + ": model " + s.model +
                              " has no sequence; --seq applies to gpt, bert, llama and hf configs");
  std::string text = s.model;
  std::string sep = ":";
  for (const auto& [k, v] : s.kv)
    if (!(k == "seq" && seq) && !(k == "batch" && batch)) text += sep + k + "=" + v, sep = ",";
  if (seq) text += sep + "seq=" + std::to_string(*seq), sep = ",";
  if (batch) text += sep + "batch=" + std::to_string(*batch);
  return text;
}

/// The model's content hash: FNV-1a (64 bits, hex) of its model file (model_file_json), so a
/// zoo spec, the model file exported from it and its hf config hash alike, and any change to an
/// op, a shape or a parameter changes it. model_hash(build_model("mlp")) is 16 hex digits.
inline std::string model_hash(const graph& g) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : model_file_json(g).dump()) h = (h ^ c) * 1099511628211ull;
  static constexpr char hex[] = "0123456789abcdef";
  std::string r(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4) r[std::size_t(i)] = hex[h & 15];
  return r;
}

/// The file a spec reads (a model file's path, an hf config's), or "" for a zoo spec.
inline std::string model_spec_path(std::string_view spec) {
  if (is_hf_spec(spec)) return parse_hf_spec(spec).path;
  if (is_model_file(spec)) return parse_model_file_spec(spec).path;
  return "";
}

/// The spec with its file at `path` instead (a zoo spec unchanged): keeps :batch= and hf's keys.
inline std::string with_model_path(std::string_view spec, const std::string& path) {
  if (is_hf_spec(spec)) {
    hf_spec h = parse_hf_spec(spec);
    h.path = path;
    return to_string(h);
  }
  if (is_model_file(spec)) {
    const model_file_spec f = parse_model_file_spec(spec);
    return f.batch > 0 ? path + ":batch=" + std::to_string(f.batch) : path;
  }
  return std::string(spec);
}

}  // namespace autoddl
