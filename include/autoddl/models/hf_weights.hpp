#pragma once
// The LLaMA family's parameters (models/llama.hpp) under their Hugging Face names, as
// transformers' LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM
// save them (layer N):
//   embed.W                 [vocab, h]   model.embed_tokens.weight                   as is
//   hN.attn_norm.gamma      [h]          model.layers.N.input_layernorm.weight       as is
//   hN.attn.q.W             [h, H d]     model.layers.N.self_attn.q_proj.weight      transposed
//   hN.attn.{k,v}.W         [h, K d]     model.layers.N.self_attn.{k,v}_proj.weight  transposed
//   hN.attn.{q,k,v}.b       [H d]        model.layers.N.self_attn.{q,k,v}_proj.bias  as is (Qwen2)
//   hN.attn.{q,k}_norm.gamma [d]         model.layers.N.self_attn.{q,k}_norm.weight  as is (Qwen3)
//   hN.attn.o.W             [H d, h]     model.layers.N.self_attn.o_proj.weight      transposed
//   hN.mlp_norm.gamma       [h]          model.layers.N.post_attention_layernorm.weight
//   hN.mlp.{gate,up,down}.W              model.layers.N.mlp.{gate,up,down}_proj.weight  transposed
//   norm.gamma              [h]          model.norm.weight
//   lm_head.W               [h, vocab]   lm_head.weight                              transposed
// A linear's weight is [in, out] here and [out, in] (torch.nn.Linear) there. A tied model has
// no lm_head.W (the head reads embed.W); its file may hold lm_head.weight, a copy, or not.
// A mixture of experts (Mixtral; Qwen3-MoE) stacks its experts, one tensor per expert there:
//   hN.moe.router.W [h, E]   model.layers.N.block_sparse_moe.gate.weight; mlp.gate.weight   transposed
//   hN.moe.W_gate [E, h, f]  ...block_sparse_moe.experts.e.w1.weight; mlp.experts.e.gate_proj.weight
//   hN.moe.W_up   [E, h, f]  ...block_sparse_moe.experts.e.w3.weight; mlp.experts.e.up_proj.weight
//   hN.moe.W_down [E, f, h]  ...block_sparse_moe.experts.e.w2.weight; mlp.experts.e.down_proj.weight
// expert e's matrix [h, f] (or [f, h]) transposed. Qwen2-MoE's shared expert and its gate:
//   hN.shared.mlp.{gate,up,down}.W     model.layers.N.mlp.shared_expert.{gate,up,down}_proj.weight  transposed
//   hN.shared.gate_logit.W  [h, 1]     model.layers.N.mlp.shared_expert_gate.weight [1, h]         transposed
// The rotation pairs element i of a head with element i + d/2 (backend/cpu/device.hpp's rotary),
// as transformers' rotate_half does, so q_proj and k_proj rows keep their order.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "autoddl/error.hpp"
#include "autoddl/index.hpp"
#include "autoddl/text.hpp"

namespace autoddl {

/// Where a parameter lives in a Hugging Face checkpoint: the tensor's name, and whether it is
/// the transpose of autoddl's matrix.
struct hf_param_name {
  std::string name;
  bool transposed = false;
  std::int64_t expert = -1;  ///< >= 0: expert `expert`'s matrix of a stacked [E, in, out] weight
};

/// How a mixture of experts names its router and experts: as Mixtral, or as Qwen3-MoE (and
/// Qwen2-MoE) do.
enum class hf_experts_naming : std::uint8_t { mixtral, qwen };

namespace detail {

/// "h12.rest" -> (12, "rest"); nullopt for another name.
inline std::optional<std::pair<std::int64_t, std::string>> layer_of(std::string_view p) {
  if (p.size() < 3 || p[0] != 'h') return std::nullopt;
  std::size_t i = 1;
  std::int64_t n = 0;
  while (i < p.size() && p[i] >= '0' && p[i] <= '9' && i < 12) n = n * 10 + (p[i++] - '0');
  if (i == 1 || i >= p.size() || p[i] != '.') return std::nullopt;
  return std::pair{n, std::string(p.substr(i + 1))};
}

}  // namespace detail

/// The Hugging Face name of LLaMA-family parameter `param` stored whole, or nullopt where it has
/// none (another model's parameter, or a mixture of experts' router and experts: hf_names_of).
inline std::optional<hf_param_name> hf_name_of(std::string_view param) {
  if (param == "embed.W") return hf_param_name{"model.embed_tokens.weight", false};
  if (param == "norm.gamma") return hf_param_name{"model.norm.weight", false};
  if (param == "lm_head.W") return hf_param_name{"lm_head.weight", true};
  const auto layer = detail::layer_of(param);
  if (!layer) return std::nullopt;
  const std::string pre = "model.layers." + detail::itos(layer->first) + ".";
  const std::string& rest = layer->second;
  if (rest == "attn_norm.gamma") return hf_param_name{pre + "input_layernorm.weight", false};
  if (rest == "mlp_norm.gamma") return hf_param_name{pre + "post_attention_layernorm.weight", false};
  for (const char* m : {"q", "k", "v", "o"}) {
    if (rest == "attn." + std::string(m) + ".W") return hf_param_name{pre + "self_attn." + m + "_proj.weight", true};
    if (rest == "attn." + std::string(m) + ".b") return hf_param_name{pre + "self_attn." + m + "_proj.bias", false};
  }
  for (const char* m : {"q", "k"})
    if (rest == "attn." + std::string(m) + "_norm.gamma") return hf_param_name{pre + "self_attn." + m + "_norm.weight", false};
  for (const char* m : {"gate", "up", "down"})
    if (rest == "mlp." + std::string(m) + ".W") return hf_param_name{pre + "mlp." + m + "_proj.weight", true};
  return std::nullopt;
}

namespace detail {
/// The Hugging Face tensors of a mixture's router or stacked experts (`rest` after "hN."), or none.
inline std::vector<hf_param_name> hf_expert_names(const std::string& pre, const std::string& rest, std::int64_t experts,
                                                  hf_experts_naming naming) {
  const bool mixtral = naming == hf_experts_naming::mixtral;
  const std::string block = pre + (mixtral ? "block_sparse_moe." : "mlp.");
  if (rest == "moe.router.W") return {{block + "gate.weight", true, -1}};
  const char* kinds[3][3] = {{"moe.W_gate", "w1", "gate_proj"}, {"moe.W_up", "w3", "up_proj"}, {"moe.W_down", "w2", "down_proj"}};
  for (const auto& k : kinds) {
    if (rest != k[0]) continue;
    std::vector<hf_param_name> out;
    for (std::int64_t e = 0; e < experts; ++e)
      out.push_back({block + "experts." + itos(e) + "." + (mixtral ? k[1] : k[2]) + ".weight", true, e});
    return out;
  }
  return {};
}
}  // namespace detail

namespace detail {
/// Qwen2-MoE's shared expert and its sigmoid gate (`rest` after "hN."), or nullopt.
inline std::optional<hf_param_name> hf_shared_expert_name(const std::string& pre, const std::string& rest) {
  for (const char* m : {"gate", "up", "down"})
    if (rest == "shared.mlp." + std::string(m) + ".W") return hf_param_name{pre + "mlp.shared_expert." + m + "_proj.weight", true};
  if (rest == "shared.gate_logit.W") return hf_param_name{pre + "mlp.shared_expert_gate.weight", true};
  return std::nullopt;
}
}  // namespace detail

/// Every Hugging Face tensor that holds parameter `param` of shape `shape`: one, or one per
/// expert of a stacked expert weight; empty where it has none (another model's parameter, or a
/// shared expert outside Qwen's naming: Mixtral has none).
inline std::vector<hf_param_name> hf_names_of(std::string_view param, const std::vector<std::int64_t>& shape,
                                              hf_experts_naming naming = hf_experts_naming::mixtral) {
  if (std::optional<hf_param_name> h = hf_name_of(param)) return {*h};
  const auto layer = detail::layer_of(param);
  if (!layer || shape.empty()) return {};
  const std::string pre = "model.layers." + detail::itos(layer->first) + ".";
  if (naming == hf_experts_naming::qwen)
    if (std::optional<hf_param_name> h = detail::hf_shared_expert_name(pre, layer->second)) return {*h};
  return detail::hf_expert_names(pre, layer->second, shape[0], naming);
}

/// hf_names_of, or error naming the parameter where it has no Hugging Face name.
inline std::vector<hf_param_name> hf_names_or_fail(std::string_view param, const std::vector<std::int64_t>& shape,
                                                   hf_experts_naming naming, std::string_view what) {
  std::vector<hf_param_name> h = hf_names_of(param, shape, naming);
  if (!h.empty()) return h;
  detail::fail<error>(std::string(what) + ": parameter '" + detail::excerpt(param) +
                      "' has no Hugging Face name; Hugging Face weights map the LLaMA family's parameters "
                      "(llama, mistral, qwen2, qwen3, mixtral, qwen3_moe, qwen2_moe; not GPT or BERT)");
}

/// The matrix [rows, cols] (row-major) transposed: [cols, rows].
template <class T>
std::vector<T> transposed(const std::vector<T>& v, std::int64_t rows, std::int64_t cols) {
  std::vector<T> out(v.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) at(out, c * rows + r) = at(v, r * cols + c);
  return out;
}

/// The shape the Hugging Face tensor has for an autoddl parameter of shape `shape`.
inline std::vector<std::int64_t> hf_shape_of(const hf_param_name& h, std::vector<std::int64_t> shape) {
  if (h.expert >= 0) shape.erase(shape.begin());
  if (h.transposed && shape.size() == 2) std::swap(shape[0], shape[1]);
  return shape;
}

/// The Hugging Face tensor's values from an autoddl parameter's (shape `shape`).
template <class T>
std::vector<T> to_hf_layout(const hf_param_name& h, const std::vector<std::int64_t>& shape, const std::vector<T>& v) {
  if (h.expert < 0) return h.transposed && shape.size() == 2 ? transposed(v, shape[0], shape[1]) : v;
  const std::int64_t rows = shape.at(1), cols = shape.at(2), n = rows * cols;
  return transposed(std::vector<T>(v.begin() + h.expert * n, v.begin() + (h.expert + 1) * n), rows, cols);
}

/// The Hugging Face tensor's values `hv` placed into the autoddl parameter's `v` (shape `shape`).
template <class T>
void from_hf_layout(const hf_param_name& h, const std::vector<std::int64_t>& shape, const std::vector<T>& hv, std::vector<T>& v) {
  if (h.expert < 0) {
    v = h.transposed && shape.size() == 2 ? transposed(hv, shape[1], shape[0]) : hv;
    return;
  }
  const std::int64_t rows = shape.at(1), cols = shape.at(2), n = rows * cols;
  const std::vector<T> m = transposed(hv, cols, rows);
  v.resize(std::size_t(shape.at(0) * n));
  std::copy(m.begin(), m.end(), v.begin() + h.expert * n);
}

}  // namespace autoddl
