#pragma once
// Models from a Hugging Face config.json: `hf:PATH` (and `hf:PATH:seq=N,batch=N` to set the
// sequence and the global batch; capacity=C a mixture of experts' capacity factor, 0: dropless
// routing, as transformers computes it). The LLaMA family's model types are read:
//   llama, mistral   hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
//                    num_key_value_heads (default: the attention heads), head_dim (default
//                    hidden / heads), vocab_size, tie_word_embeddings (false), attention_bias
//                    (false: true puts biases on q, k, v and o; mistral has none), rms_norm_eps,
//                    rope_theta (or rope_parameters.rope_theta, as transformers 5 writes it),
//                    max_position_embeddings
//   qwen2            the same, with biases on q, k and v (Qwen2's attention always has them, o none)
//   qwen3            the same, with attention_bias (false) and RMSNorm of each q and k head
//   mixtral          mistral's fields, and a mixture of experts in every block: num_local_experts,
//                    num_experts_per_tok, intermediate_size as each expert's width, the top-k
//                    weights renormalised, router_aux_loss_coef (0.001)
//   qwen3_moe        qwen3's fields, with num_experts (or num_local_experts, as transformers 5
//                    saves it), num_experts_per_tok, moe_intermediate_size,
//                    norm_topk_prob (false), router_aux_loss_coef (0.001), decoder_sparse_step (1)
//                    and mlp_only_layers ([]): every block must be routed (a model mixing dense and
//                    routed blocks is refused, naming the layers)
//   qwen2_moe        qwen2's fields (biases on q, k and v), the experts as qwen3_moe's (num_experts,
//                    num_experts_per_tok, moe_intermediate_size, norm_topk_prob (false),
//                    router_aux_loss_coef, decoder_sparse_step, mlp_only_layers), and a shared
//                    expert of shared_expert_intermediate_size gated per token by sigmoid(x w)
// Experts use the capacity factor 1.25 (ops/moe.hpp), as the programs' models do by default;
// capacity=C in the spec sets it (0: dropless, every token at its experts, as transformers routes).
// The sequence defaults to max_position_embeddings but at most 8192 (the length the LLaMA 3
// models were pre-trained at; planning a 131,072-token context is a choice: give seq=), the
// global batch to 8. Sliding-window attention (Mistral 7B v0.1's 4096) and RoPE scaling are
// not modelled: the core attends to every earlier key, as at these sequence lengths.
// Errors name the file, the field and the value.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "autoddl/error.hpp"
#include "autoddl/json_input.hpp"
#include "autoddl/models/hf_weights.hpp"
#include "autoddl/models/llama.hpp"
#include "autoddl/parse_number.hpp"
#include "autoddl/text_file.hpp"

namespace autoddl {

/// A spec `hf:PATH[:key=value,...]` split: the config's path and the overrides (seq, batch).
struct hf_spec {
  std::string path;
  std::optional<std::int64_t> seq, batch;
  std::optional<double> capacity;  ///< a mixture of experts' capacity factor (0: dropless)
};

inline bool is_hf_spec(std::string_view spec) { return spec.substr(0, 3) == "hf:"; }

namespace detail {

/// The value of `key=N` in an hf spec's overrides: a whole number from 1 to 2^40.
inline std::int64_t hf_override(const std::string& spec, const std::string& item) {
  const std::size_t eq = item.find('=');
  const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
  const std::int64_t n = parse_number<std::int64_t>(value, "model spec '" + detail::excerpt(spec) + "': " + key);
  if (n < 1 || n > (std::int64_t(1) << 40))
    detail::fail<parse_error>("model spec '" + detail::excerpt(spec) + "': " + item + " is not a positive whole number up to 2^40; write e.g. " +
                              key + "=4096");
  return n;
}

/// The value of `capacity=C`: a number >= 0 (0: dropless).
inline double hf_capacity(const std::string& spec, const std::string& item) {
  const double c = parse_number<double>(item.substr(9), "model spec '" + detail::excerpt(spec) + "': capacity");
  if (!(c >= 0) || c > 1e6)
    detail::fail<parse_error>("model spec '" + detail::excerpt(spec) + "': " + item +
                              " is not a capacity factor; give a number >= 0 (0: dropless routing), e.g. capacity=1.25");
  return c;
}

}  // namespace detail

/// Splits `hf:PATH[:seq=N,batch=N,capacity=C]`. @throws parse_error on another key or a bad number.
inline hf_spec parse_hf_spec(std::string_view spec) {
  const std::string s(spec);
  hf_spec r;
  std::string rest = s.substr(3);
  const std::size_t colon = rest.rfind(':');
  if (colon != std::string::npos && rest.find('=', colon) != std::string::npos) {
    std::string keys = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
    while (!keys.empty()) {
      const std::size_t comma = keys.find(',');
      const std::string item = keys.substr(0, comma);
      if (item.rfind("seq=", 0) == 0) r.seq = detail::hf_override(s, item);
      else if (item.rfind("batch=", 0) == 0) r.batch = detail::hf_override(s, item);
      else if (item.rfind("capacity=", 0) == 0) r.capacity = detail::hf_capacity(s, item);
      else detail::fail<parse_error>("model spec '" + detail::excerpt(s) + "': unknown key in '" + item +
                                     "'; an hf config takes seq=, batch= and capacity=");
      if (comma == std::string::npos) break;
      keys = keys.substr(comma + 1);
    }
  }
  if (rest.empty()) detail::fail<parse_error>("model spec '" + detail::excerpt(s) + "' names no file; write hf:path/to/config.json");
  r.path = rest;
  return r;
}

/// The text of an hf spec: hf:PATH, then :seq=N,batch=N where set.
inline std::string to_string(const hf_spec& h) {
  std::string s = "hf:" + h.path;
  std::string keys;
  if (h.seq) keys += "seq=" + std::to_string(*h.seq);
  if (h.batch) keys += std::string(keys.empty() ? "" : ",") + "batch=" + std::to_string(*h.batch);
  if (h.capacity) {
    char text[32];
    const std::to_chars_result end = std::to_chars(text, text + sizeof text, *h.capacity);  // the shortest that reads back
    keys += std::string(keys.empty() ? "" : ",") + "capacity=" + std::string(text, end.ptr);
  }
  return keys.empty() ? s : s + ":" + keys;
}

namespace detail {

struct hf_reader {
  const std::string& file;
  const nlohmann::json& j;
  [[noreturn]] void bad(const std::string& what) const { detail::fail<parse_error>("hf config " + file + ": " + what); }
  std::int64_t count(const char* field, std::optional<std::int64_t> dflt = std::nullopt) const {
    if (!j.contains(field) || j[field].is_null()) {
      if (dflt) return *dflt;
      bad("lacks the field '" + std::string(field) + "'");
    }
    const nlohmann::json& v = j[field];
    if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > (std::int64_t(1) << 40))
      bad("field '" + std::string(field) + "' is " + json_excerpt(v) + "; give a positive whole number");
    return v.get<std::int64_t>();
  }
  double number(const char* field, double dflt) const { return number_in(j, field, dflt, field); }
  double number_in(const nlohmann::json& o, const char* field, double dflt, const std::string& path) const {
    if (!o.contains(field) || o[field].is_null()) return dflt;
    const nlohmann::json& v = o[field];
    if (!v.is_number() || !(v.get<double>() > 0)) bad("field '" + path + "' is " + json_excerpt(v) + "; give a positive number");
    return v.get<double>();
  }
  /// rope_theta, else rope_parameters.rope_theta (transformers 5 writes only that), else 10000.
  double rope_theta() const {
    if (j.contains("rope_theta") && !j["rope_theta"].is_null()) return number("rope_theta", 10000);
    if (!j.contains("rope_parameters") || j["rope_parameters"].is_null()) return 10000;
    if (!j["rope_parameters"].is_object()) bad("field 'rope_parameters' is " + json_excerpt(j["rope_parameters"]) + "; give an object");
    return number_in(j["rope_parameters"], "rope_theta", 10000, "rope_parameters.rope_theta");
  }
  bool flag(const char* field, bool dflt) const {
    if (!j.contains(field) || j[field].is_null()) return dflt;
    if (!j[field].is_boolean()) bad("field '" + std::string(field) + "' is " + json_excerpt(j[field]) + "; give true or false");
    return j[field].get<bool>();
  }
};

/// A mixture of experts' fields (mixtral, qwen3_moe, qwen2_moe); every block routed.
inline void read_hf_experts(const hf_reader& r, const std::string& type, llama_config& c) {
  const bool mixtral = type == "mixtral";
  // (transformers 5 saves Qwen's num_experts as num_local_experts, Mixtral's name)
  const bool local = mixtral || (r.j.contains("num_local_experts") && !r.j.contains("num_experts"));
  c.experts = r.count(local ? "num_local_experts" : "num_experts");
  c.topk = r.count("num_experts_per_tok");
  c.moe_ffn = mixtral ? c.ffn : r.count("moe_intermediate_size");
  c.norm_topk = mixtral || r.flag("norm_topk_prob", false);
  c.aux_coef = 0.001;
  if (r.j.contains("router_aux_loss_coef") && !r.j["router_aux_loss_coef"].is_null()) {
    const nlohmann::json& v = r.j["router_aux_loss_coef"];
    if (!v.is_number() || !(v.get<double>() >= 0))
      r.bad("field 'router_aux_loss_coef' is " + json_excerpt(v) + "; give a number >= 0");
    c.aux_coef = v.get<double>();
  }
  if (mixtral) return;
  if (type == "qwen2_moe") {
    c.shared_ffn = r.count("shared_expert_intermediate_size");
    c.shared_gate = true;
  }
  const std::int64_t step = r.count("decoder_sparse_step", 1);
  std::vector<std::int64_t> dense;
  for (std::int64_t l = 0; l < c.layers; ++l)
    if ((l + 1) % step != 0) dense.push_back(l);
  if (r.j.contains("mlp_only_layers") && !r.j["mlp_only_layers"].is_null()) {
    const nlohmann::json& v = r.j["mlp_only_layers"];
    if (!v.is_array()) r.bad("field 'mlp_only_layers' is " + json_excerpt(v) + "; give a list of layer numbers");
    for (const nlohmann::json& l : v) {
      if (!l.is_number_integer()) r.bad("field 'mlp_only_layers' holds " + json_excerpt(l) + "; give layer numbers");
      dense.push_back(l.get<std::int64_t>());
    }
  }
  if (!dense.empty())
    r.bad("layer " + std::to_string(dense.front()) + " has a dense MLP (decoder_sparse_step " + std::to_string(step) +
          ", mlp_only_layers) beside routed ones; autoddl builds models whose every block is routed");
}

}  // namespace detail

/// The LLaMA-family configuration a config.json's text describes (`file` names it in errors).
inline llama_config parse_hf_config(std::string_view text, const std::string& file) {
  const nlohmann::json j = parse_json(text, "hf config " + file);
  const detail::hf_reader r{file, j};
  if (!j.is_object()) r.bad("is not a JSON object");
  if (!j.contains("model_type") || !j["model_type"].is_string()) r.bad("lacks the field 'model_type'");
  const std::string type = j["model_type"].get<std::string>();
  const std::vector<std::string> known{"llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen3_moe", "qwen2_moe"};
  if (std::find(known.begin(), known.end(), type) == known.end())
    r.bad("model_type '" + detail::excerpt(type) + "' is not one autoddl builds; it reads " + detail::join(known));
  llama_config c;
  c.hidden = r.count("hidden_size");
  c.ffn = r.count("intermediate_size");
  c.layers = r.count("num_hidden_layers");
  if (c.layers > detail::max_model_layers)
    r.bad("num_hidden_layers is " + std::to_string(c.layers) + "; autoddl builds at most " +
          std::to_string(detail::max_model_layers));
  c.heads = r.count("num_attention_heads");
  c.kv_heads = r.count("num_key_value_heads", c.heads);
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    c.head_dim = r.count("head_dim");
    if (c.hidden % c.heads == 0 && c.head_dim == c.hidden / c.heads) c.head_dim = 0;  // the default
  }
  c.vocab = r.count("vocab_size");
  c.tied = r.flag("tie_word_embeddings", false);
  // transformers: Qwen2's q, k and v always have biases and o none; attention_bias gives LLaMA's and
  // Qwen3's all four; Mistral's have none
  const bool all_biases = type != "qwen2" && type != "qwen2_moe" && type != "mistral" && type != "mixtral" &&
                          r.flag("attention_bias", false);
  c.qkv_bias = type == "qwen2" || type == "qwen2_moe" || all_biases;
  c.o_bias = all_biases;
  c.qk_norm = type == "qwen3" || type == "qwen3_moe";
  c.eps = r.number("rms_norm_eps", 1e-6);
  c.rope_theta = r.rope_theta();
  c.seq = std::min<std::int64_t>(r.count("max_position_embeddings", 8192), 8192);
  c.batch = 8;
  if (type == "mixtral" || type == "qwen3_moe" || type == "qwen2_moe") detail::read_hf_experts(r, type, c);
  detail::check_llama(c, "hf config " + file);
  return c;
}

/// The configuration of an hf spec: the file read, then its seq= and batch= applied.
/// @throws error when the file cannot be read; parse_error / error naming the file and field.
inline llama_config load_hf_config(const hf_spec& h) {
  std::error_code ec;
  if (const std::filesystem::path in_dir = std::filesystem::path(h.path) / "config.json";
      std::filesystem::is_directory(h.path, ec) && std::filesystem::is_regular_file(in_dir, ec))
    detail::fail<error>("hf config '" + h.path + "' is a directory, not a file; did you mean hf:" + in_dir.string() + "?");
  const std::optional<std::string> text = read_text_file(h.path, "hf config");
  if (!text) detail::fail<error>("cannot read hf config '" + h.path + "'");
  llama_config c = parse_hf_config(*text, h.path);
  if (h.seq) c.seq = *h.seq;
  if (h.batch) c.batch = *h.batch;
  if (h.capacity && c.experts == 0)
    detail::fail<parse_error>("hf config " + h.path + " has no experts; capacity= sets a mixture of experts' capacity factor");
  if (h.capacity) c.capacity = *h.capacity;
  return c;
}

/// What an hf spec leaves to defaults and what its config says beyond the model: the element
/// type the weights were saved in (`torch_dtype`, or `dtype` as transformers 4.56 on writes it;
/// "bf16", "fp16", "fp32" or "fp64", empty when absent or another type), and whether the
/// sequence and the batch were set (seq=, batch=) or taken by default.
struct hf_defaults {
  std::string saved_dtype;
  std::string saved_as;  ///< the config's own text ("bfloat16"), for messages
  bool seq_default = true, batch_default = true;
  std::int64_t seq = 0, batch = 0;  ///< what the model is planned with
};
inline hf_defaults hf_defaults_of(std::string_view spec) {
  const hf_spec h = parse_hf_spec(spec);
  const llama_config c = load_hf_config(h);
  hf_defaults d;
  d.seq_default = !h.seq;
  d.batch_default = !h.batch;
  d.seq = c.seq;
  d.batch = c.batch;
  const nlohmann::json j = parse_json(*read_text_file(h.path, "hf config"), "hf config " + h.path);
  for (const char* key : {"torch_dtype", "dtype"})
    if (j.contains(key) && j[key].is_string()) {
      d.saved_as = j[key].get<std::string>();
      break;
    }
  for (auto [torch, ours] : {std::pair{"bfloat16", "bf16"}, {"float16", "fp16"}, {"float32", "fp32"}, {"float64", "fp64"}})
    if (d.saved_as == torch) d.saved_dtype = ours;
  return d;
}

/// What transformers computes for an hf spec's config that autoddl's model does not: a scaled
/// rotary embedding (rope_parameters.rope_type or rope_scaling other than "default") or a sliding
/// window shorter than the sequence; one sentence, empty where the two compute the same function.
inline std::string hf_unmodelled(std::string_view spec) {
  const hf_spec h = parse_hf_spec(spec);
  const llama_config c = load_hf_config(h);
  const nlohmann::json j = parse_json(*read_text_file(h.path, "hf config"), "hf config " + h.path);
  for (const char* key : {"rope_parameters", "rope_scaling"})
    if (j.contains(key) && j[key].is_object() && j[key].contains("rope_type") && j[key]["rope_type"] != "default")
      return "hf config " + h.path + " scales its rotary embedding (" + key + ".rope_type " +
             json_excerpt(j[key]["rope_type"]) + "), which autoddl does not model: its model computes another function";
  if (j.contains("sliding_window") && j["sliding_window"].is_number_integer() && j["sliding_window"].get<std::int64_t>() < c.seq &&
      !(j.contains("use_sliding_window") && j["use_sliding_window"] == false))
    return "hf config " + h.path + " attends within a sliding window of " + std::to_string(j["sliding_window"].get<std::int64_t>()) +
           " positions, shorter than the sequence of " + std::to_string(c.seq) + "; autoddl's model attends to every earlier one";
  return "";
}

/// How model `spec` names a mixture's experts in its checkpoints: Qwen's for an hf config of
/// qwen3_moe or qwen2_moe, else Mixtral's.
inline hf_experts_naming hf_experts_naming_of(const std::string& spec) {
  if (!is_hf_spec(spec)) return hf_experts_naming::mixtral;
  const std::string path = parse_hf_spec(spec).path;
  const nlohmann::json j = parse_json(read_text_file(path, "hf config").value_or("{}"), "hf config " + path);
  const std::string type = j.is_object() && j.contains("model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>() : "";
  return type == "qwen3_moe" || type == "qwen2_moe" ? hf_experts_naming::qwen : hf_experts_naming::mixtral;
}

/// The model an hf spec names, with `microbatches` micro-batches (the graph is one of them).
inline graph build_hf_model(std::string_view spec, int microbatches = 1) {
  llama_config c = load_hf_config(parse_hf_spec(spec));
  check_microbatches(microbatches, c.batch);
  c.batch /= microbatches;
  return build_llama(c, "hf-llama");
}

}  // namespace autoddl
