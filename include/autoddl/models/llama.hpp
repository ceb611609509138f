#pragma once
// The LLaMA family as graphs (LLaMA, Touvron et al. 2023; Llama 3, Dubey et al. 2024; Mistral 7B,
// Jiang et al. 2023; Qwen2, Yang et al. 2024; Qwen3): pre-norm decoder blocks of
//   x = x + o(attention(rotary(q(n1)), rotary(k(n1)), v(n1)))      n1 = rmsnorm(x)
//   x = x + down(silu(gate(n2)) * up(n2))                           n2 = rmsnorm(x)  (SwiGLU)
// with grouped-query attention (kv_heads key/value heads shared by heads / kv_heads query heads
// each), causal, rotary position embeddings on q and k (no learned positions), no dropout, no
// biases except Qwen2's on q, k and v, optionally Qwen3's per-head RMSNorm of q and k before the
// rotation, a final RMSNorm and an output head untied from the token embedding (tied=1 ties it,
// as the small Qwen models do). Each layer is one repeated block (graph::block).
// Per layer h (2 heads d + 2 kv d) + 3 h ffn + 2 h parameters (+ heads d + 2 kv d with q/k/v
// biases, + h with an o bias, + 2 d with q/k norms), d = head_dim; Llama-3-8B: 8,030,261,248.
#include <cstdint>
#include <string>
#include <vector>

#include "autoddl/models/detail/builder.hpp"
#include "autoddl/models/detail/spec.hpp"

namespace autoddl {

struct llama_config {
  std::int64_t layers = 32, hidden = 4096, heads = 32, kv_heads = 8, ffn = 14336, seq = 8192, batch = 8, vocab = 128256;
  std::int64_t head_dim = 0;  ///< 0: hidden / heads
  bool tied = false;          ///< the output head uses the token embedding
  bool qkv_bias = false;      ///< biases on q, k, v (Qwen2)
  bool o_bias = false;        ///< a bias on o too (transformers' attention_bias of LLaMA and Qwen3)
  bool qk_norm = false;       ///< RMSNorm of each head of q and k before the rotation (Qwen3)
  double eps = 1e-5;          ///< RMSNorm's epsilon
  double rope_theta = 500000;
  // mixture of experts (ops/moe.hpp): with experts > 0 every block's MLP is routed
  std::int64_t experts = 0;         ///< routed experts per block (0: a dense SwiGLU MLP)
  std::int64_t topk = 2;            ///< experts per token
  double capacity = 1.25;           ///< capacity factor (slots per expert per sequence); 0: dropless
  std::int64_t moe_ffn = 0;         ///< each expert's SwiGLU width (0: ffn)
  std::int64_t shared_experts = 0;  ///< experts every token passes through, one SwiGLU of shared * moe_ffn
  std::int64_t shared_ffn = 0;      ///< the shared SwiGLU's width where given (0: shared_experts * moe_ffn)
  bool shared_gate = false;         ///< the shared SwiGLU's output scaled by sigmoid(x w), w [h, 1] (Qwen2-MoE)
  bool norm_topk = true;            ///< the k gate weights are scaled to sum to 1
  double aux_coef = 0.01;           ///< the balancing loss's coefficient per block (0: none)
  /// dropless: the busiest device's routed rows over balanced routing's (prices only; 1: balanced)
  double imbalance = 1;
  bool unfused_attention = false;   ///< attention=unfused: the attention cores keep their probabilities
  std::int64_t dims_per_head() const { return head_dim > 0 ? head_dim : hidden / heads; }
  std::int64_t expert_ffn() const { return moe_ffn > 0 ? moe_ffn : ffn; }
  /// the shared SwiGLU's width, 0 without one
  std::int64_t shared_expert_ffn() const { return shared_ffn > 0 ? shared_ffn : shared_experts * expert_ffn(); }
};

namespace detail {

struct llama_preset {
  const char* name;
  llama_config c;
};

/// Published configurations (each model's Hugging Face config.json).
inline const std::vector<llama_preset>& llama_presets() {
  static const std::vector<llama_preset> p = [] {
    auto make = [](std::int64_t layers, std::int64_t hidden, std::int64_t heads, std::int64_t kv, std::int64_t ffn,
                   std::int64_t seq, std::int64_t vocab, double theta, double eps, bool qkv_bias) {
      llama_config c;
      c.layers = layers;
      c.hidden = hidden;
      c.heads = heads;
      c.kv_heads = kv;
      c.ffn = ffn;
      c.seq = seq;
      c.vocab = vocab;
      c.rope_theta = theta;
      c.eps = eps;
      c.qkv_bias = qkv_bias;
      return c;
    };
    auto moe = [](llama_config c, std::int64_t experts, std::int64_t topk, std::int64_t moe_ffn, double aux) {
      c.experts = experts;
      c.topk = topk;
      c.moe_ffn = moe_ffn;
      c.aux_coef = aux;
      return c;
    };
    auto qwen3_moe = [](llama_config c) {
      c.head_dim = 128;
      c.qk_norm = true;
      return c;
    };
    return std::vector<llama_preset>{
        {"llama3-8b", make(32, 4096, 32, 8, 14336, 8192, 128256, 500000, 1e-5, false)},
        {"llama3-70b", make(80, 8192, 64, 8, 28672, 8192, 128256, 500000, 1e-5, false)},
        {"llama3-405b", make(126, 16384, 128, 8, 53248, 8192, 128256, 500000, 1e-5, false)},
        {"mistral-7b", make(32, 4096, 32, 8, 14336, 8192, 32000, 10000, 1e-5, false)},
        {"qwen2-7b", make(28, 3584, 28, 4, 18944, 32768, 152064, 1000000, 1e-6, true)},
        {"mixtral-8x7b", moe(make(32, 4096, 32, 8, 14336, 4096, 32000, 1000000, 1e-5, false), 8, 2, 14336, 0.02)},
        {"qwen3-30b-a3b", qwen3_moe(moe(make(48, 2048, 32, 4, 6144, 4096, 151936, 1000000, 1e-6, false), 128, 8, 768, 0.001))},
    };
  }();
  return p;
}

/// The checks a configuration must pass, whatever wrote it (a spec, a preset, an hf config):
/// `where` names the source in the sentence.
inline void check_llama(const llama_config& c, const std::string& where) {
  if (c.head_dim <= 0 && c.hidden % c.heads != 0)
    fail<error>(where + ": heads=" + itos(c.heads) + " does not divide hidden=" + itos(c.hidden) +
                "; choose a head count that divides the hidden size (or give head_dim)");
  if (c.heads % c.kv_heads != 0)
    fail<error>(where + ": kv_heads=" + itos(c.kv_heads) + " does not divide heads=" + itos(c.heads) +
                "; grouped-query attention shares each key/value head among heads / kv_heads query heads");
  if (c.dims_per_head() % 2 != 0)
    fail<error>(where + ": the head size " + itos(c.dims_per_head()) +
                " is odd; rotary embeddings turn pairs of a head's dims, so choose an even head size");
  if (!(c.eps > 0) || !(c.rope_theta > 0)) fail<error>(where + ": eps and rope_theta must be positive");
  if (c.experts > 0 && (c.topk < 1 || c.topk > c.experts))
    fail<error>(where + ": topk=" + itos(c.topk) + " must lie in [1, experts=" + itos(c.experts) +
                "]; each token goes to at least one and at most every expert");
  if (c.experts > 0 && !(c.capacity >= 0))
    fail<error>(where + ": capacity=" + std::to_string(c.capacity) +
                " must be a positive capacity factor, or 0 for dropless routing");
  if (c.experts > 0 && !(c.aux_coef >= 0)) fail<error>(where + ": the balancing loss's coefficient must be >= 0");
  if (c.shared_gate && c.shared_expert_ffn() == 0)
    fail<error>(where + ": shared_gate scales a shared expert's output; give shared_experts=N or shared_ffn=F");
  if (c.experts > 0 && !(c.imbalance >= 1))
    fail<error>(where + ": imbalance=" + std::to_string(c.imbalance) +
                " must be at least 1, the busiest device's routed tokens over balanced routing's");
}

inline tensor_ref rmsnorm(graph_builder& b, const std::string& name, tensor_ref x, const llama_config& c,
                          std::int64_t groups = 1) {
  const tensor_shape& s = shape_of(b.current(), x);
  op_attrs a;
  a.heads = int(groups);
  a.eps = c.eps;
  return b.op(name, op_kind::rmsnorm, a, {x}, {b.param(name + ".gamma", {s[s.rank() - 1] / groups})});
}

inline tensor_ref rotary(graph_builder& b, const std::string& name, tensor_ref x, std::int64_t heads, const llama_config& c) {
  op_attrs a;
  a.heads = int(heads);
  a.rope_theta = c.rope_theta;
  return b.op(name, op_kind::rotary, a, {x});
}

/// q, k, v, their optional per-head norms and rotations, the grouped-query core and o.
inline tensor_ref llama_attention(graph_builder& b, const std::string& pre, tensor_ref x, const llama_config& c) {
  const std::int64_t d = c.dims_per_head();
  tensor_ref q = b.linear(pre + "attn.q", x, c.heads * d, c.qkv_bias);
  tensor_ref k = b.linear(pre + "attn.k", x, c.kv_heads * d, c.qkv_bias);
  tensor_ref v = b.linear(pre + "attn.v", x, c.kv_heads * d, c.qkv_bias);
  if (c.qk_norm) {
    q = rmsnorm(b, pre + "attn.q_norm", q, c, c.heads);
    k = rmsnorm(b, pre + "attn.k_norm", k, c, c.kv_heads);
  }
  q = rotary(b, pre + "attn.q_rope", q, c.heads, c);
  k = rotary(b, pre + "attn.k_rope", k, c.kv_heads, c);
  op_attrs a;
  a.heads = int(c.heads);
  a.kv_heads = c.kv_heads == c.heads ? 0 : int(c.kv_heads);
  a.causal = true;
  a.unfused_attention = c.unfused_attention;
  a.balanced_context = !c.unfused_attention && c.experts == 0;  // positions only through rotary and the mask
  tensor_ref o = b.op(pre + "attn.core", op_kind::attention, a, {q, k, v});
  return b.linear(pre + "attn.o", o, c.hidden, c.o_bias);
}

/// SwiGLU (Shazeer 2020): down(silu(gate(x)) * up(x)).
inline tensor_ref swiglu(graph_builder& b, const std::string& pre, tensor_ref x, const llama_config& c) {
  tensor_ref gate = b.linear(pre + "mlp.gate", x, c.ffn, false);
  tensor_ref up = b.linear(pre + "mlp.up", x, c.ffn, false);
  tensor_ref m = b.op(pre + "mlp.swiglu", op_kind::swiglu, {}, {gate, up});
  return b.linear(pre + "mlp.down", m, c.hidden, false);
}

/// A routed MLP (ops/moe.hpp): router logits, top-k gates, the balancing loss (into `aux`
/// where its coefficient is positive), dispatch, the experts, combine (dropless, capacity 0: one
/// routed_experts op instead of the three), and the shared experts (their output gated per token
/// by sigmoid(x w_gate) where c.shared_gate).
inline tensor_ref moe_mlp(graph_builder& b, const std::string& pre, tensor_ref x, const llama_config& c,
                          std::vector<tensor_ref>& aux) {
  const std::int64_t f = c.expert_ffn(), e = c.experts;
  tensor_ref logits = b.linear(pre + "moe.router", x, e, false);
  op_attrs r;
  r.topk = int(c.topk);
  r.renormalize = c.norm_topk;
  r.aux_coef = c.aux_coef;
  tensor_ref gates = b.op(pre + "moe.gates", op_kind::router, r, {logits});
  if (c.aux_coef > 0) aux.push_back(b.op(pre + "moe.balance", op_kind::load_balance, r, {logits}));
  op_attrs d;
  d.topk = int(c.topk);
  d.imbalance = c.imbalance;
  const auto weights = [&] {
    return std::vector<int>{b.param(pre + "moe.W_gate", {e, c.hidden, f}), b.param(pre + "moe.W_up", {e, c.hidden, f}),
                            b.param(pre + "moe.W_down", {e, f, c.hidden})};
  };
  tensor_ref y;
  if (c.capacity == 0) {  // dropless: the routed rows only, no slots
    y = b.op(pre + "moe.experts", op_kind::routed_experts, d, {x, gates}, weights());
  } else {
    d.capacity = capacity_slots(int(c.seq), int(e), int(c.topk), c.capacity);
    tensor_ref buf = b.op(pre + "moe.dispatch", op_kind::dispatch, d, {x, gates});
    tensor_ref out = b.op(pre + "moe.experts", op_kind::experts, {}, {buf}, weights());
    op_attrs k;
    k.topk = int(c.topk);
    y = b.op(pre + "moe.combine", op_kind::combine, k, {out, gates});
  }
  if (c.shared_expert_ffn() == 0) return y;
  llama_config sc = c;
  sc.ffn = c.shared_expert_ffn();
  tensor_ref shared = swiglu(b, pre + "shared.", x, sc);
  if (c.shared_gate)
    shared = b.op(pre + "shared.gated", op_kind::sigmoid_gate, {}, {shared, b.linear(pre + "shared.gate_logit", x, 1, false)});
  return b.op(pre + "moe.shared_res", op_kind::add, {}, {y, shared});
}

}  // namespace detail

/// A LLaMA-family decoder; inputs tokens [batch, seq] and labels [batch, seq].
inline graph build_llama(const llama_config& c, std::string name = "llama") {
  detail::check_llama(c, "model '" + name + "'");
  detail::graph_builder b(std::move(name));
  tensor_ref tokens = b.input({c.batch, c.seq}), labels = b.input({c.batch, c.seq});
  const int embed_w = b.param("embed.W", {c.vocab, c.hidden});
  tensor_ref x = b.op("embed", op_kind::embedding, {}, {tokens}, {embed_w});
  std::vector<tensor_ref> aux;  // the blocks' balancing losses, added to the loss at the end
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const std::string pre = "h" + detail::itos(l) + ".";
    b.begin_block(int(l));
    x = b.op(pre + "attn.res", op_kind::add, {},
             {x, detail::llama_attention(b, pre, detail::rmsnorm(b, pre + "attn_norm", x, c), c)});
    const tensor_ref n2 = detail::rmsnorm(b, pre + "mlp_norm", x, c);
    x = b.op(pre + "mlp.res", op_kind::add, {},
             {x, c.experts > 0 ? detail::moe_mlp(b, pre, n2, c, aux) : detail::swiglu(b, pre, n2, c)});
    b.end_block();
  }
  x = detail::rmsnorm(b, "norm", x, c);
  op_attrs head;
  head.bias = false;
  head.transpose_w = c.tied;
  tensor_ref logits = c.tied ? b.op("lm_head", op_kind::linear, head, {x}, {embed_w})
                             : b.linear("lm_head", x, c.vocab, false);
  tensor_ref loss = b.op(aux.empty() ? "loss" : "xent", op_kind::cross_entropy, {}, {logits, labels});
  for (std::size_t l = 0; l < aux.size(); ++l)
    loss = b.op(l + 1 == aux.size() ? "loss" : "loss.h" + detail::itos(std::int64_t(l)), op_kind::add, {}, {loss, aux[l]});
  return b.finish(loss);
}

namespace detail {

/// The llama spec's keys over a preset: size, layers, hidden, heads, kv_heads, ffn, seq, batch,
/// vocab, head_dim, tied, qkv_bias, qk_norm; and of a mixture of experts: experts, topk,
/// capacity, moe_ffn, shared_experts, shared_ffn, shared_gate, norm_topk, aux, imbalance (dropless only); and attention=fused
/// (the default) or unfused.
inline llama_config read_llama(const model_spec& s) {
  spec_reader r(s, {"size", "layers", "hidden", "heads", "kv_heads", "ffn", "seq", "batch", "vocab", "head_dim", "tied",
                    "qkv_bias", "qk_norm", "experts", "topk", "capacity", "moe_ffn", "shared_experts", "shared_ffn", "shared_gate", "norm_topk", "aux", "imbalance",
                    "attention"});
  const std::string size = r.text("size", "llama3-8b");
  const llama_preset* p = nullptr;
  std::vector<std::string> names;
  for (const llama_preset& q : llama_presets()) {
    names.push_back(q.name);
    if (size == q.name) p = &q;
  }
  if (!p) fail<parse_error>("model spec '" + detail::excerpt(s.text) + "': unknown size '" + size + "'; valid sizes: " + join(names));
  llama_config c = p->c;
  c.layers = r.count("layers", c.layers, max_model_layers);
  c.hidden = r.count("hidden", c.hidden);
  c.heads = r.count("heads", c.heads, std::int64_t(1) << 20);
  c.kv_heads = r.count("kv_heads", r.find("heads") && !r.find("kv_heads") ? c.heads : c.kv_heads, std::int64_t(1) << 20);
  c.ffn = r.count("ffn", c.ffn);
  c.seq = r.count("seq", c.seq);
  c.batch = r.count("batch", 8);
  c.vocab = r.count("vocab", c.vocab);
  c.head_dim = r.find("head_dim") ? r.count("head_dim", 0) : c.head_dim;
  c.tied = r.flag("tied", c.tied);
  c.qkv_bias = r.flag("qkv_bias", c.qkv_bias);
  c.qk_norm = r.flag("qk_norm", c.qk_norm);
  c.experts = r.find("experts") ? r.count("experts", 0, std::int64_t(1) << 16) : c.experts;
  c.topk = r.find("topk") ? r.count("topk", 0, std::int64_t(1) << 16) : c.topk;
  c.capacity = r.decimal("capacity", c.capacity);
  c.moe_ffn = r.find("moe_ffn") ? r.count("moe_ffn", 0) : c.moe_ffn;
  c.shared_experts = r.find("shared_experts") ? r.count("shared_experts", 0, 64) : c.shared_experts;
  c.shared_ffn = r.find("shared_ffn") ? r.count("shared_ffn", 0) : c.shared_ffn;
  c.shared_gate = r.flag("shared_gate", c.shared_gate);
  c.norm_topk = r.flag("norm_topk", c.norm_topk);
  c.aux_coef = r.decimal("aux", c.aux_coef);
  c.imbalance = r.decimal("imbalance", c.imbalance);
  c.unfused_attention = r.one_of("attention", "fused", {"fused", "unfused"}) == "unfused";
  if (c.experts == 0 && (r.find("topk") || r.find("capacity") || r.find("moe_ffn") || r.find("shared_experts") ||
                         r.find("shared_ffn") || r.find("shared_gate")))
    fail<parse_error>("model spec '" + detail::excerpt(s.text) +
                      "': topk, capacity, moe_ffn, shared_experts, shared_ffn and shared_gate need experts=E");
  if (r.find("imbalance") && !(c.experts > 0 && c.capacity == 0))
    fail<parse_error>("model spec '" + detail::excerpt(s.text) + "': imbalance prices dropless routing; it needs experts=E and capacity=0");
  check_llama(c, "model spec '" + detail::excerpt(s.text) + "'");
  return c;
}

}  // namespace detail

}  // namespace autoddl
