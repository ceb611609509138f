#pragma once
// Models by name and size: build_model("gpt:layers=2,hidden=64,heads=4,seq=32,batch=8,vocab=128").
//   gpt    size (gpt2 gpt2-medium gpt2-large gpt2-xl gpt3-175b; default gpt2), layers, hidden,
//          heads, seq, batch (8), vocab, dropout (0.1)
//   bert   size (bert-base bert-large; default bert-base), layers, hidden, heads, seq, batch, vocab,
//          dropout (0.1)
//   vgg11 vgg13 vgg16 vgg19   image (224), classes (1000), batch (8), fc (4096), width (64: the
//          first convs' channels; later stages double it up to 8 x width)
//   mlp    layers (3), hidden (256), batch (32), in (784), out (10)
//   llama  size (llama3-8b llama3-70b llama3-405b mistral-7b qwen2-7b mixtral-8x7b qwen3-30b-a3b;
//          default llama3-8b), layers, hidden, heads, kv_heads (the preset's, or heads where heads
//          alone is given), ffn, seq, batch (8), vocab, head_dim (hidden / heads), tied, qkv_bias,
//          qk_norm (0 or 1); a mixture of experts: experts, topk (2), capacity (1.25; 0 dropless),
//          moe_ffn (ffn), shared_experts (0), shared_ffn (shared_experts x moe_ffn), shared_gate (0:
//          1 scales the shared experts' output by sigmoid(x w), Qwen2-MoE's gate), norm_topk (1),
//          aux (0.01)
// Explicit keys override a preset. Builders only describe shapes: nothing is allocated.
// A model file (a user's own network as JSON) is read by load_model (models/model_file.hpp),
// which takes zoo specs too; it is not in this header because nlohmann-json's <memory> brings
// POSIX ::link along (mesh/link.hpp).
#include <string>
#include <string_view>
#include <vector>

#include "autoddl/models/llama.hpp"
#include "autoddl/models/mlp.hpp"
#include "autoddl/models/transformer.hpp"
#include "autoddl/models/vgg.hpp"

namespace autoddl {

inline std::vector<std::string> model_names() {
  return {"gpt", "bert", "llama", "vgg11", "vgg13", "vgg16", "vgg19", "mlp"};
}

/// Builds the graph a spec names. Throws parse_error for an unknown model or key (listing the
/// valid ones) and error for sizes that make no model (0, heads not dividing hidden, ...).
inline graph build_model(std::string_view spec) {
  detail::model_spec s = detail::parse_spec(spec);
  if (s.model == "gpt") return build_gpt(detail::read_transformer(s, detail::gpt_presets, "gpt2"));
  if (s.model == "bert") return build_bert(detail::read_transformer(s, detail::bert_presets, "bert-base"));
  if (s.model == "llama") return build_llama(detail::read_llama(s));
  for (int depth : {11, 13, 16, 19}) {
    if (s.model != "vgg" + detail::itos(depth)) continue;
    detail::spec_reader r(s, {"image", "classes", "batch", "fc", "width"});
    vgg_config c;
    c.depth = depth;
    c.image = r.count("image", 224);
    c.classes = r.count("classes", 1000);
    c.batch = r.count("batch", 8);
    c.fc = r.count("fc", 4096);
    c.width = r.count("width", 64, std::int64_t(1) << 16);
    return build_vgg(c);
  }
  if (s.model == "mlp") {
    detail::spec_reader r(s, {"layers", "hidden", "batch", "in", "out"});
    mlp_config c;
    c.layers = r.count("layers", 3, detail::max_model_layers);
    c.hidden = r.count("hidden", 256);
    c.batch = r.count("batch", 32);
    c.in = r.count("in", 784);
    c.out = r.count("out", 10);
    return build_mlp(c);
  }
  detail::fail<parse_error>("unknown model '" + s.model + "' in '" + s.text + "'; valid models: " +
                            detail::join(model_names()));
}

/// The step's batch of a model graph: dim 0 of its first input (every zoo model's inputs lead
/// with the batch).
inline std::int64_t graph_batch(const graph& g) { return g.inputs.empty() ? 1 : at(g.inputs, 0)[0]; }

/// One micro-batch of the model a spec names: its batch is the spec's batch / microbatches.
///   build_model("mlp:batch=32", 4) == build_model("mlp:batch=8")
/// Throws error when microbatches is below 1 or does not divide the batch.
inline graph build_model(std::string_view spec, int microbatches) {
  graph full = build_model(spec);  // validates the spec first
  if (microbatches == 1) return full;
  const std::int64_t batch = graph_batch(full);
  check_microbatches(microbatches, batch);
  detail::model_spec s = detail::parse_spec(spec);
  std::string text = s.model + ":batch=" + detail::itos(batch / microbatches);
  for (const auto& [k, v] : s.kv)
    if (k != "batch") text += "," + k + "=" + v;
  return build_model(text);
}

}  // namespace autoddl
