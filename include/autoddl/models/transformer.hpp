#pragma once
// Transformer language models as graphs.
// - gpt: GPT-2 architecture (Radford et al. 2019): learned positions, pre-layernorm, biases on
//   every linear, GeLU MLP of 4 x hidden, causal attention, a final layernorm, and the output
//   head tied to the token embedding (W stored [vocab, hidden], used transposed, no bias).
//   Per layer 12 h^2 + 13 h parameters: GPT-2 small = 124,439,808.
// - bert: BERT encoder (Devlin et al. 2019): post-layernorm, bidirectional attention, embedding
//   layernorm, masked-LM head (dense + GeLU + layernorm + tied decoder with a vocab bias). No
//   token-type embedding and no pooler: bert-base = 109,512,762 (HF BertForMaskedLM's
//   109,514,298 less its 2 x 768 token-type table).
// Attention q, k, v are three [h, h] linears (same parameters as GPT-2's fused c_attn [h, 3h]).
// Each layer is one repeated block (graph::block).
#include <cstdint>
#include <string>

#include "autoddl/models/detail/builder.hpp"
#include "autoddl/models/detail/spec.hpp"

namespace autoddl {

struct transformer_config {
  std::int64_t layers = 12, hidden = 768, heads = 12, seq = 1024, batch = 8, vocab = 50257;
  double dropout = 0.1;
  bool unfused_attention = false;  ///< attention=unfused: the attention cores keep their probabilities
};

namespace detail {
struct transformer_preset {
  const char* name;
  std::int64_t layers, hidden, heads, seq, vocab;
};
inline constexpr transformer_preset gpt_presets[] = {
    {"gpt2", 12, 768, 12, 1024, 50257},        {"gpt2-medium", 24, 1024, 16, 1024, 50257},
    {"gpt2-large", 36, 1280, 20, 1024, 50257}, {"gpt2-xl", 48, 1600, 25, 1024, 50257},
    {"gpt3-175b", 96, 12288, 96, 2048, 50257},
};
inline constexpr transformer_preset bert_presets[] = {
    {"bert-base", 12, 768, 12, 512, 30522},
    {"bert-large", 24, 1024, 16, 512, 30522},
};

template <std::size_t N>
transformer_config read_transformer(const model_spec& s, const transformer_preset (&presets)[N], const char* dflt) {
  spec_reader r(s, {"size", "layers", "hidden", "heads", "seq", "batch", "vocab", "dropout", "attention"});
  std::string size = r.text("size", dflt);
  const transformer_preset* p = nullptr;
  std::vector<std::string> names;
  for (const transformer_preset& q : presets) {
    names.push_back(q.name);
    if (size == q.name) p = &q;
  }
  if (!p) fail<parse_error>("model spec '" + s.text + "': unknown size '" + size + "'; valid sizes: " + join(names));
  transformer_config c;
  c.layers = r.count("layers", p->layers, max_model_layers);
  c.hidden = r.count("hidden", p->hidden);
  c.heads = r.count("heads", p->heads);
  c.seq = r.count("seq", p->seq);
  c.batch = r.count("batch", 8);
  c.vocab = r.count("vocab", p->vocab);
  c.dropout = r.fraction("dropout", c.dropout);
  c.unfused_attention = r.one_of("attention", "fused", {"fused", "unfused"}) == "unfused";
  if (c.hidden % c.heads != 0)
    fail<error>("model spec '" + s.text + "': heads=" + itos(c.heads) + " does not divide hidden=" + itos(c.hidden) +
                "; choose a head count that divides the hidden size");
  return c;
}

/// The attention sub-layer: q, k, v linears, the core, the output projection and dropout.
inline tensor_ref attention_block(graph_builder& b, const std::string& pre, tensor_ref x, const transformer_config& c,
                                  bool causal) {
  tensor_ref q = b.linear(pre + "attn.q", x, c.hidden);
  tensor_ref k = b.linear(pre + "attn.k", x, c.hidden);
  tensor_ref v = b.linear(pre + "attn.v", x, c.hidden);
  op_attrs a;
  a.heads = int(c.heads);
  a.causal = causal;
  a.dropout = c.dropout;
  a.unfused_attention = c.unfused_attention;
  tensor_ref o = b.op(pre + "attn.core", op_kind::attention, a, {q, k, v});
  o = b.linear(pre + "attn.proj", o, c.hidden);
  return b.unary(pre + "attn.drop", op_kind::dropout, o, c.dropout);
}

inline tensor_ref mlp_block(graph_builder& b, const std::string& pre, tensor_ref x, const transformer_config& c) {
  tensor_ref m = b.linear(pre + "mlp.fc", x, 4 * c.hidden);
  m = b.unary(pre + "mlp.gelu", op_kind::gelu, m);
  m = b.linear(pre + "mlp.proj", m, c.hidden);
  return b.unary(pre + "mlp.drop", op_kind::dropout, m, c.dropout);
}

/// Token + position embedding; returns the embedding output and the token table's id.
inline tensor_ref embed(graph_builder& b, tensor_ref tokens, const transformer_config& c, int& wte) {
  wte = b.param("wte", {c.vocab, c.hidden});
  int wpe = b.param("wpe", {c.seq, c.hidden});
  op_attrs a;
  a.positions = true;
  return b.op("embed", op_kind::embedding, a, {tokens}, {wte, wpe});
}

inline tensor_ref tied_head(graph_builder& b, const std::string& name, tensor_ref x, int wte, int bias) {
  op_attrs a;
  a.transpose_w = true;
  a.bias = bias >= 0;
  std::vector<int> p{wte};
  if (bias >= 0) p.push_back(bias);
  return b.op(name, op_kind::linear, a, {x}, p);
}
}  // namespace detail

/// GPT-2-style decoder; inputs tokens [batch, seq] and labels [batch, seq].
inline graph build_gpt(const transformer_config& c, std::string name = "gpt") {
  detail::graph_builder b(std::move(name));
  tensor_ref tokens = b.input({c.batch, c.seq}), labels = b.input({c.batch, c.seq});
  int wte = -1;
  tensor_ref x = detail::embed(b, tokens, c, wte);
  x = b.unary("embed.drop", op_kind::dropout, x, c.dropout);
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const std::string pre = "h" + detail::itos(l) + ".";
    b.begin_block(int(l));
    x = b.op(pre + "attn.res", op_kind::add, {}, {x, detail::attention_block(b, pre, b.layernorm(pre + "ln1", x), c, true)});
    x = b.op(pre + "mlp.res", op_kind::add, {}, {x, detail::mlp_block(b, pre, b.layernorm(pre + "ln2", x), c)});
    b.end_block();
  }
  x = b.layernorm("ln_f", x);
  tensor_ref logits = detail::tied_head(b, "lm_head", x, wte, -1);
  return b.finish(b.op("loss", op_kind::cross_entropy, {}, {logits, labels}));
}

/// BERT-style encoder with a masked-LM head; inputs tokens [batch, seq] and labels [batch, seq].
inline graph build_bert(const transformer_config& c, std::string name = "bert") {
  detail::graph_builder b(std::move(name));
  tensor_ref tokens = b.input({c.batch, c.seq}), labels = b.input({c.batch, c.seq});
  int wte = -1;
  tensor_ref x = detail::embed(b, tokens, c, wte);
  x = b.layernorm("embed.ln", x);
  x = b.unary("embed.drop", op_kind::dropout, x, c.dropout);
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const std::string pre = "h" + detail::itos(l) + ".";
    b.begin_block(int(l));
    x = b.layernorm(pre + "ln1", b.op(pre + "attn.res", op_kind::add, {}, {x, detail::attention_block(b, pre, x, c, false)}));
    x = b.layernorm(pre + "ln2", b.op(pre + "mlp.res", op_kind::add, {}, {x, detail::mlp_block(b, pre, x, c)}));
    b.end_block();
  }
  tensor_ref t = b.linear("mlm.dense", x, c.hidden);
  t = b.unary("mlm.gelu", op_kind::gelu, t);
  t = b.layernorm("mlm.ln", t);
  tensor_ref logits = detail::tied_head(b, "mlm.decoder", t, wte, b.param("mlm.decoder.b", {c.vocab}));
  return b.finish(b.op("loss", op_kind::cross_entropy, {}, {logits, labels}));
}

}  // namespace autoddl
