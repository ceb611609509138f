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
// The rotation pairs element i of a head with element i + d/2 (backend/cpu/device.hpp's rotary),
// as transformers' rotate_half does, so q_proj and k_proj rows keep their order.
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
};

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

/// The Hugging Face name of LLaMA-family parameter `param`, or nullopt where it has none (another
/// model's parameter, or a mixture of experts' router and experts).
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

/// hf_name_of, or error naming the parameter.
inline hf_param_name hf_name_or_fail(std::string_view param, std::string_view what) {
  if (std::optional<hf_param_name> h = hf_name_of(param)) return *h;
  detail::fail<error>(std::string(what) + ": parameter '" + detail::excerpt(param) +
                      "' has no Hugging Face name; Hugging Face weights map the dense LLaMA family's parameters "
                      "(llama, mistral, qwen2, qwen3; not a mixture of experts, GPT or BERT)");
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
  if (h.transposed && shape.size() == 2) std::swap(shape[0], shape[1]);
  return shape;
}

/// An autoddl parameter's values (shape `shape`) in the Hugging Face tensor's layout, and back.
template <class T>
std::vector<T> to_hf_layout(const hf_param_name& h, const std::vector<std::int64_t>& shape, const std::vector<T>& v) {
  return h.transposed && shape.size() == 2 ? transposed(v, shape[0], shape[1]) : v;
}
template <class T>
std::vector<T> from_hf_layout(const hf_param_name& h, const std::vector<std::int64_t>& shape, const std::vector<T>& v) {
  return h.transposed && shape.size() == 2 ? transposed(v, shape[1], shape[0]) : v;
}

}  // namespace autoddl
