// Hugging Face configs, --seq / --batch and model files of the LLaMA family. Oracles: the
// published parameter counts and closed forms written from the config fields here.
#include <cstdint>
#include <string>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "autoddl/models/model_file.hpp"

using namespace autoddl;
using Catch::Matchers::ContainsSubstring;

namespace hf_config_cases {

// The fields of meta-llama/Meta-Llama-3-8B's config.json that autoddl reads (and some it does not).
const char* llama3_8b = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
  "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
  "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
  "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": false,
  "attention_bias": false, "hidden_act": "silu", "torch_dtype": "bfloat16"})";

// Qwen/Qwen2-7B: q, k and v carry biases; 131,072 positions, planned at 8192 unless seq= says.
const char* qwen2_7b = R"({
  "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
  "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
  "max_position_embeddings": 131072, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "tie_word_embeddings": false})";

// Qwen/Qwen3-0.6B: head_dim 128 with hidden 1024 and 16 heads, per-head q/k norms, tied.
const char* qwen3_06b = R"({
  "model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
  "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
  "max_position_embeddings": 40960, "rms_norm_eps": 1e-06, "rope_theta": 1000000,
  "tie_word_embeddings": true, "attention_bias": false})";

TEST_CASE("hf configs build the published models", "[models][hf]") {
  const llama_config c = parse_hf_config(llama3_8b, "llama3-8b/config.json");
  CHECK(c.kv_heads == 8);
  CHECK(c.seq == 8192);
  CHECK(c.rope_theta == 500000.0);
  CHECK(param_count(build_llama(c)) == 8'030'261'248);  // Meta-Llama-3-8B
  const llama_config q = parse_hf_config(qwen2_7b, "qwen2/config.json");
  CHECK(q.qkv_bias);
  CHECK(q.seq == 8192);
  CHECK(param_count(build_llama(q)) == 7'615'616'512);  // Qwen2-7B
  // Qwen3-0.6B: tied V H + per layer (q H A D, k and v H G D, o A D H, 3 H F, two norms of H, the
  // q and k norms of D each) + the final norm; 0.44B of it not embedding, as published
  const std::int64_t V = 151936, H = 1024, A = 16, G = 8, D = 128, F = 3072, L = 28;
  const std::int64_t per_layer = H * A * D + 2 * H * G * D + A * D * H + 3 * H * F + 2 * H + 2 * D;
  const graph q3 = build_llama(parse_hf_config(qwen3_06b, "qwen3/config.json"));
  CHECK(param_count(q3) == V * H + L * per_layer + H);
  CHECK(L * per_layer + H > 435'000'000);
  CHECK(L * per_layer + H < 445'000'000);
}

// A config.json as transformers 5 saves it: the rotary base only under rope_parameters.
const char* saved_by_transformers5 = R"({
  "model_type": "qwen2", "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 64,
  "rms_norm_eps": 1e-06, "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
  "tie_word_embeddings": false, "transformers_version": "5.25.0"})";

TEST_CASE("hf configs read rope_parameters.rope_theta where transformers 5 leaves out rope_theta", "[models][hf]") {
  CHECK(parse_hf_config(saved_by_transformers5, "q/config.json").rope_theta == 1000000.0);
  std::string no_base = saved_by_transformers5;
  const std::string base = "\"rope_theta\": 1000000.0, ";
  no_base.replace(no_base.find(base), base.size(), "");
  CHECK(parse_hf_config(no_base, "q/config.json").rope_theta == 10000.0);  // transformers' default base
  std::string bad = saved_by_transformers5;
  bad.replace(bad.find("1000000.0"), 9, "-1");
  CHECK_THROWS_WITH(parse_hf_config(bad, "q/config.json"), ContainsSubstring("field 'rope_parameters.rope_theta' is -1"));
}

TEST_CASE("attention_bias puts biases on q, k, v and o of LLaMA and Qwen3, none on Mistral's", "[models][hf]") {
  // per layer: the biases of q (A D), k and v (G D each) and o (H), as torch.nn.Linear(bias=True) holds them
  const std::int64_t H = 32, A = 4, G = 2, D = 8, L = 2, biases = L * (A * D + 2 * G * D + H);
  auto count = [](std::string type, bool bias) {
    std::string text = saved_by_transformers5;
    text.replace(text.find("qwen2"), 5, type);
    text.insert(text.size() - 1, std::string(", \"attention_bias\": ") + (bias ? "true" : "false"));
    return param_count(build_llama(parse_hf_config(text, type + "/config.json")));
  };
  CHECK(count("llama", true) == count("llama", false) + biases);
  CHECK(count("qwen3", true) == count("qwen3", false) + biases);
  CHECK(count("mistral", true) == count("mistral", false));
  CHECK(count("qwen2", true) == count("qwen2", false));  // q, k, v always, o never
  CHECK(count("qwen2", false) == count("llama", false) + L * (A * D + 2 * G * D));
}

TEST_CASE("capacity= sets an hf mixture's capacity factor, 0 for dropless routing as transformers routes", "[models][hf][moe]") {
  CHECK(parse_hf_spec("hf:m/config.json:capacity=0").capacity == 0.0);
  CHECK(parse_hf_spec("hf:m/config.json:seq=8,capacity=1.5").capacity == 1.5);
  CHECK(to_string(parse_hf_spec("hf:m/config.json:capacity=1.5,batch=4")) == "hf:m/config.json:batch=4,capacity=1.5");
  CHECK_THROWS_WITH(parse_hf_spec("hf:m/config.json:capacity=-1"), ContainsSubstring("capacity=-1 is not a capacity factor"));
  CHECK_THROWS_WITH(parse_hf_spec("hf:m/config.json:experts=2"), ContainsSubstring("takes seq=, batch= and capacity="));
}

TEST_CASE("a qwen3_moe config as transformers 5 saves it names its experts num_local_experts", "[models][hf][moe]") {
  std::string saved = saved_by_transformers5;
  saved.replace(saved.find("qwen2"), 5, "qwen3_moe");
  saved.insert(saved.size() - 1, R"(, "num_experts_per_tok": 2, "moe_intermediate_size": 24, "num_local_experts": 4)");
  CHECK(parse_hf_config(saved, "m/config.json").experts == 4);
  std::string published = saved;
  published.replace(published.find("num_local_experts"), 17, "num_experts");
  CHECK(parse_hf_config(published, "m/config.json").experts == 4);
}

TEST_CASE("hf configs refuse what autoddl cannot build, naming the file, the field and the value", "[models][hf][errors]") {
  CHECK_THROWS_WITH(parse_hf_config(R"({"model_type": "gpt_neox", "hidden_size": 64})", "x/config.json"),
                    ContainsSubstring("hf config x/config.json: model_type 'gpt_neox' is not one autoddl builds"));
  CHECK_THROWS_WITH(parse_hf_config(R"({"model_type": "llama", "hidden_size": 64})", "x/config.json"),
                    ContainsSubstring("hf config x/config.json: lacks the field 'intermediate_size'"));
  CHECK_THROWS_WITH(parse_hf_config(R"({"model_type": "llama",)", "x/config.json"),
                    ContainsSubstring("hf config x/config.json is not valid JSON"));
  CHECK_THROWS_WITH(parse_hf_config(R"({"hidden_size": 64})", "x/config.json"), ContainsSubstring("lacks the field 'model_type'"));
  const std::string small = R"("model_type": "mistral", "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 2, "vocab_size": 96)";
  CHECK_THROWS_WITH(parse_hf_config("{" + small + R"(, "num_attention_heads": 4, "num_key_value_heads": 3})", "m.json"),
                    ContainsSubstring("kv_heads=3 does not divide heads=4"));
  CHECK_THROWS_WITH(parse_hf_config("{" + small + R"(, "num_attention_heads": 6})", "m.json"),
                    ContainsSubstring("heads=6 does not divide hidden=64"));
  CHECK_THROWS_WITH(parse_hf_config("{" + small + R"(, "num_attention_heads": "four"})", "m.json"),
                    ContainsSubstring("field 'num_attention_heads' is \"four\""));
  CHECK_NOTHROW(parse_hf_config("{" + small + R"(, "num_attention_heads": 4})", "m.json"));
  CHECK_THROWS_WITH(load_model("hf:/no/such/config.json"), ContainsSubstring("cannot read hf config '/no/such/config.json'"));
  CHECK_THROWS_WITH(load_model("hf:x.json:steps=3"), ContainsSubstring("unknown key in 'steps=3'"));
  CHECK_THROWS_WITH(load_model("hf:x.json:seq=0"), ContainsSubstring("seq=0 is not a positive whole number"));
}

// mistralai/Mixtral-8x7B-v0.1 and Qwen/Qwen3-30B-A3B (the fields autoddl reads).
const char* mixtral_8x7b = R"({
  "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
  "num_attention_heads": 32, "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
  "vocab_size": 32000, "max_position_embeddings": 32768, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
  "router_aux_loss_coef": 0.02, "tie_word_embeddings": false})";
const char* qwen3_30b_a3b = R"({
  "model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
  "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
  "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": true, "decoder_sparse_step": 1,
  "mlp_only_layers": [], "router_aux_loss_coef": 0.001, "vocab_size": 151936, "max_position_embeddings": 40960,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": false})";

// Qwen/Qwen1.5-MoE-A2.7B (model_type qwen2_moe): 60 experts of 1408, top 4 without
// renormalisation, a shared expert of 5632 behind a sigmoid gate, biases on q, k and v.
const char* qwen15_moe_a27b = R"({
  "model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632, "moe_intermediate_size": 1408,
  "shared_expert_intermediate_size": 5632, "num_hidden_layers": 24, "num_attention_heads": 16,
  "num_key_value_heads": 16, "num_experts": 60, "num_experts_per_tok": 4, "norm_topk_prob": false,
  "decoder_sparse_step": 1, "mlp_only_layers": [], "router_aux_loss_coef": 0.001, "vocab_size": 151936,
  "max_position_embeddings": 8192, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": false})";

TEST_CASE("qwen2_moe configs build Qwen1.5-MoE-A2.7B: routed and shared experts, the shared gate", "[models][hf][moe]") {
  const llama_config c = parse_hf_config(qwen15_moe_a27b, "qwen2-moe/config.json");
  CHECK((c.experts == 60 && c.topk == 4 && !c.norm_topk && c.qkv_bias && !c.qk_norm && c.expert_ffn() == 1408));
  CHECK((c.shared_gate && c.shared_expert_ffn() == 5632 && c.aux_coef == 0.001));
  const graph g = build_llama(c);
  // per layer: q, k, v H H each with biases H, o H H, the router H E, E experts of 3 H F, the
  // shared SwiGLU 3 H S and its gate H, two norms of H; untied embedding and head V H, final norm H
  const std::int64_t V = 151936, H = 2048, E = 60, F = 1408, S = 5632, L = 24;
  const std::int64_t layer = 4 * H * H + 3 * H + H * E + E * 3 * H * F + 3 * H * S + H + 2 * H;
  CHECK(param_count(g) == 2 * V * H + L * layer + H);
  CHECK(param_count(g) > 14'250'000'000);  // "14.3B parameters in total" (Qwen, Qwen1.5-MoE blog)
  CHECK(param_count(g) < 14'350'000'000);
  const std::int64_t active = param_count(g) - L * (E - 4) * 3 * H * F;
  CHECK(active_param_count(g) == active);
  CHECK(active > 2'650'000'000);  // "2.7B activated parameters"
  CHECK(active < 2'750'000'000);
  std::size_t gates = 0;
  for (const op_node& op : g.ops) gates += op.kind == op_kind::sigmoid_gate;
  CHECK(gates == std::size_t(L));
  // norm_topk_prob true renormalises the top k, as Mixtral and Qwen3-MoE do
  std::string renorm = qwen15_moe_a27b;
  renorm.replace(renorm.find("\"norm_topk_prob\": false"), 23, "\"norm_topk_prob\": true");
  CHECK(parse_hf_config(renorm, "q.json").norm_topk);
}

TEST_CASE("mixture-of-experts configs build the published models, total and active", "[models][hf][moe]") {
  // per layer: q H A D, k and v H G D, o A D H, the router H E, E experts of 3 H F, two norms of
  // H (+ the q and k norms of D); untied embedding and head V H each, the final norm H
  auto closed = [](std::int64_t V, std::int64_t H, std::int64_t A, std::int64_t G, std::int64_t D, std::int64_t F,
                   std::int64_t E, std::int64_t L, bool qk_norm) {
    const std::int64_t attn = H * A * D + 2 * H * G * D + A * D * H;
    return 2 * V * H + L * (attn + H * E + E * 3 * H * F + 2 * H + (qk_norm ? 2 * D : 0)) + H;
  };
  const llama_config m = parse_hf_config(mixtral_8x7b, "mixtral/config.json");
  CHECK((m.experts == 8 && m.topk == 2 && m.norm_topk && m.aux_coef == 0.02 && m.expert_ffn() == 14336));
  const graph gm = build_llama(m);
  CHECK(param_count(gm) == closed(32000, 4096, 32, 8, 128, 14336, 8, 32, false));
  CHECK(param_count(gm) == 46'702'792'704);  // "46.7B total parameters" (Mistral AI, Mixtral of experts)
  CHECK(param_count(build_model("llama:size=mixtral-8x7b")) == param_count(gm));
  const llama_config q = parse_hf_config(qwen3_30b_a3b, "qwen3-moe/config.json");
  CHECK((q.experts == 128 && q.topk == 8 && q.norm_topk && q.qk_norm && q.expert_ffn() == 768));
  const graph gq = build_llama(q);
  CHECK(param_count(gq) == closed(151936, 2048, 32, 4, 128, 768, 128, 48, true));
  CHECK(param_count(gq) > 30'450'000'000);  // "30.5B in total", Qwen3 technical report
  CHECK(param_count(gq) < 30'550'000'000);
  CHECK(param_count(build_model("llama:size=qwen3-30b-a3b")) == param_count(gq));
  // active per token: all but the unrouted experts' share
  const std::int64_t qa = param_count(gq) - std::int64_t(48) * (128 - 8) * 3 * 2048 * 768;
  CHECK(active_param_count(gq) == qa);
  CHECK(qa > 3'250'000'000);  // "3.3B activated"
  CHECK(qa < 3'400'000'000);
  CHECK(active_param_count(gm) == param_count(gm) - std::int64_t(32) * 6 * 3 * 4096 * 14336);  // 12.9B active
}

TEST_CASE("mixture-of-experts specs and configs refuse what autoddl cannot build", "[models][hf][moe][errors]") {
  const std::string tiny = "llama:layers=2,hidden=64,heads=4,kv_heads=2,ffn=64,seq=16,batch=8,vocab=96";
  CHECK_THROWS_WITH(build_model(tiny + ",experts=4,topk=5"), ContainsSubstring("topk=5 must lie in [1, experts=4]"));
  CHECK_THROWS_WITH(build_model(tiny + ",experts=4,capacity=-1"),
                    ContainsSubstring("capacity=-1 is not a non-negative decimal"));
  CHECK_THROWS_WITH(build_model(tiny + ",topk=2"), ContainsSubstring("need experts=E"));
  // dispatch and combine route by the router's topk: a graph whose dispatch says otherwise is
  // refused by validate, and its twin with the router's topk passes
  graph g = build_model(tiny + ",experts=4,topk=2");
  REQUIRE_NOTHROW(validate(g));
  for (op_node& op : g.ops)
    if (op.kind == op_kind::dispatch) op.attrs.topk = 1;
  CHECK_THROWS_WITH(validate(g), ContainsSubstring("routes by topk=1 but its router 'h0.moe.gates' picks topk=2"));
  std::string dense = qwen3_30b_a3b;
  dense.replace(dense.find("\"mlp_only_layers\": []"), 21, "\"mlp_only_layers\": [3]");
  CHECK_THROWS_WITH(parse_hf_config(dense, "q.json"), ContainsSubstring("layer 3 has a dense MLP"));
  CHECK_NOTHROW(build_model(tiny + ",experts=4,topk=2,capacity=0,shared_experts=2,moe_ffn=32"));
  CHECK_THROWS_WITH(build_model(tiny + ",experts=4,topk=2,shared_gate=1"),
                    ContainsSubstring("shared_gate scales a shared expert's output; give shared_experts=N or shared_ffn=F"));
  CHECK_THROWS_WITH(build_model(tiny + ",shared_gate=1"), ContainsSubstring("need experts=E"));
  CHECK_NOTHROW(build_model(tiny + ",experts=4,topk=2,shared_ffn=48,shared_gate=1"));
  std::string no_shared = qwen15_moe_a27b;
  no_shared.replace(no_shared.find("\"shared_expert_intermediate_size\": 5632, "), 41, "");
  CHECK_THROWS_WITH(parse_hf_config(no_shared, "q.json"), ContainsSubstring("lacks the field 'shared_expert_intermediate_size'"));
  std::string zero_experts = qwen15_moe_a27b;
  zero_experts.replace(zero_experts.find("\"num_experts\": 60"), 17, "\"num_experts\": 0");
  CHECK_THROWS_WITH(parse_hf_config(zero_experts, "q.json"), ContainsSubstring("field 'num_experts' is 0"));
  std::string too_many = qwen15_moe_a27b;
  too_many.replace(too_many.find("\"num_experts_per_tok\": 4"), 24, "\"num_experts_per_tok\": 61");
  CHECK_THROWS_WITH(parse_hf_config(too_many, "q.json"), ContainsSubstring("topk=61 must lie in [1, experts=60]"));
}

TEST_CASE("mixtures of experts round-trip through model files", "[models][moe][model-file]") {
  const graph g = build_model("llama:layers=2,hidden=64,heads=4,kv_heads=2,ffn=64,seq=16,batch=8,vocab=96,experts=4,"
                              "topk=2,capacity=1.5,norm_topk=0,aux=0.02,shared_experts=1,shared_gate=1");
  const graph back = parse_model_file(model_file_json(g).dump(1), "moe.json");
  REQUIRE(back.ops.size() == g.ops.size());
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    CAPTURE(g.ops[i].name);
    CHECK(back.ops[i].kind == g.ops[i].kind);
    CHECK(back.ops[i].attrs.topk == g.ops[i].attrs.topk);
    CHECK(back.ops[i].attrs.capacity == g.ops[i].attrs.capacity);
    CHECK(back.ops[i].attrs.renormalize == g.ops[i].attrs.renormalize);
    if (g.ops[i].kind == op_kind::load_balance) CHECK(back.ops[i].attrs.aux_coef == 0.02);
    CHECK(back.ops[i].outputs == g.ops[i].outputs);
  }
  CHECK(back.loss_op == g.loss_op);
  CHECK(active_param_count(back) == active_param_count(g));
}

TEST_CASE("--seq and --batch rewrite any model's spec", "[models][hf][resize]") {
  CHECK(resize_model_spec("llama:size=llama3-8b,seq=4096", 2048, std::nullopt) == "llama:size=llama3-8b,seq=2048");
  CHECK(resize_model_spec("gpt", 64, 16) == "gpt:seq=64,batch=16");
  CHECK(resize_model_spec("vgg11:batch=4", std::nullopt, 32) == "vgg11:batch=32");
  CHECK(resize_model_spec("hf:a/config.json", 512, std::nullopt) == "hf:a/config.json:seq=512");
  CHECK(resize_model_spec("hf:a/config.json:seq=512", std::nullopt, 64) == "hf:a/config.json:seq=512,batch=64");
  CHECK(resize_model_spec("hf:a/config.json:capacity=0", 32, std::nullopt) == "hf:a/config.json:seq=32,capacity=0");
  CHECK(resize_model_spec("m.json", std::nullopt, 64) == "m.json:batch=64");
  CHECK(resize_model_spec("m.json:batch=8", std::nullopt, 64) == "m.json:batch=64");
  CHECK_THROWS_WITH(resize_model_spec("mlp", 64, std::nullopt), ContainsSubstring("model mlp has no sequence"));
  CHECK_THROWS_WITH(resize_model_spec("m.json", 64, std::nullopt), ContainsSubstring("model file 'm.json' fixes its shapes"));
  CHECK_THROWS_WITH(resize_model_spec("gpt", std::nullopt, 0), ContainsSubstring("--batch 0 is not a positive whole number"));
  const graph g = build_model(resize_model_spec("llama:layers=1,hidden=64,heads=4,kv_heads=2,ffn=96,vocab=96", 24, 6));
  CHECK(g.inputs[0] == tensor_shape{6, 24});
}

TEST_CASE("LLaMA models round-trip through model files, and a file's batch rescales", "[models][hf][model-file]") {
  const graph g = build_model("llama:layers=2,hidden=64,heads=4,kv_heads=2,ffn=96,seq=16,batch=8,vocab=96,qk_norm=1");
  const std::string text = model_file_json(g).dump(1);
  CHECK_THAT(text, ContainsSubstring("\"kv_heads\": 2"));
  CHECK_THAT(text, ContainsSubstring("\"rope_theta\": 500000"));
  const graph back = parse_model_file(text, "llama.json");
  REQUIRE(back.ops.size() == g.ops.size());
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    CHECK(back.ops[i].kind == g.ops[i].kind);
    CHECK(back.ops[i].attrs.kv_heads == g.ops[i].attrs.kv_heads);
    CHECK(back.ops[i].attrs.eps == g.ops[i].attrs.eps);
    CHECK(back.ops[i].attrs.rope_theta == g.ops[i].attrs.rope_theta);
    CHECK(back.ops[i].outputs == g.ops[i].outputs);
  }
  CHECK(param_count(back) == param_count(g));
  const graph big = parse_model_file(text, "llama.json", 2, 32);  // --batch 32, 2 micro-batches
  CHECK(big.inputs[0] == tensor_shape{16, 16});
  CHECK(big.ops.back().inputs[0][0] == 16);
}

}  // namespace hf_config_cases
