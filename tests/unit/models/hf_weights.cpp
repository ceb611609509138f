// The LLaMA family's Hugging Face names and layouts. Oracles: the names transformers' save_pretrained
// writes, spelled out here, and small matrices transposed by hand.
#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "autoddl/models/hf_weights.hpp"

using namespace autoddl;
using Catch::Matchers::ContainsSubstring;

namespace hf_weights_cases {

std::vector<std::string> names(const std::vector<hf_param_name>& h) {
  std::vector<std::string> out;
  for (const hf_param_name& n : h) out.push_back(n.name);
  return out;
}

TEST_CASE("dense parameters have one Hugging Face tensor each, linear weights transposed", "[models][hf-weights]") {
  const hf_param_name q = hf_names_of("h3.attn.q.W", {32, 64}).at(0);
  CHECK(q.name == "model.layers.3.self_attn.q_proj.weight");
  CHECK(q.transposed);
  CHECK(hf_shape_of(q, {32, 64}) == std::vector<std::int64_t>{64, 32});
  CHECK(to_hf_layout(q, {2, 3}, std::vector<int>{1, 2, 3, 4, 5, 6}) == std::vector<int>{1, 4, 2, 5, 3, 6});
  std::vector<int> back;
  from_hf_layout(q, {2, 3}, std::vector<int>{1, 4, 2, 5, 3, 6}, back);
  CHECK(back == std::vector<int>{1, 2, 3, 4, 5, 6});
  CHECK(names(hf_names_of("h0.attn.o.b", {32})) == std::vector<std::string>{"model.layers.0.self_attn.o_proj.bias"});
  CHECK(names(hf_names_of("h12.attn.k_norm.gamma", {8})) == std::vector<std::string>{"model.layers.12.self_attn.k_norm.weight"});
  CHECK(names(hf_names_of("h1.mlp_norm.gamma", {8})) == std::vector<std::string>{"model.layers.1.post_attention_layernorm.weight"});
  CHECK(names(hf_names_of("embed.W", {256, 32})) == std::vector<std::string>{"model.embed_tokens.weight"});
  CHECK_FALSE(hf_names_of("embed.W", {256, 32}).at(0).transposed);
  CHECK(hf_names_of("lm_head.W", {32, 256}).at(0).transposed);
  CHECK(hf_names_of("h0.attn.qkv.W", {32, 96}).empty());  // a GPT's
  CHECK(hf_names_of("h0.shared.mlp.gate.W", {32, 48}).empty());  // Mixtral's naming: no shared expert
  CHECK(hf_names_of("hx.attn.q.W", {32, 32}).empty());
  CHECK_THROWS_WITH(hf_names_or_fail("h0.attn.qkv.W", {32, 96}, hf_experts_naming::mixtral, "--export-weights"),
                    ContainsSubstring("--export-weights: parameter 'h0.attn.qkv.W' has no Hugging Face name"));
}

TEST_CASE("stacked experts are one Hugging Face tensor per expert, Mixtral's names or Qwen's", "[models][hf-weights][moe]") {
  const std::vector<std::int64_t> shape{2, 2, 3};  // [E, in, out]
  const std::vector<hf_param_name> m = hf_names_of("h1.moe.W_down", shape, hf_experts_naming::mixtral);
  CHECK(names(m) == std::vector<std::string>{"model.layers.1.block_sparse_moe.experts.0.w2.weight",
                                             "model.layers.1.block_sparse_moe.experts.1.w2.weight"});
  CHECK(names(hf_names_of("h1.moe.W_up", shape, hf_experts_naming::qwen)) ==
        std::vector<std::string>{"model.layers.1.mlp.experts.0.up_proj.weight", "model.layers.1.mlp.experts.1.up_proj.weight"});
  CHECK(names(hf_names_of("h0.moe.router.W", {32, 4}, hf_experts_naming::mixtral)) ==
        std::vector<std::string>{"model.layers.0.block_sparse_moe.gate.weight"});
  CHECK(names(hf_names_of("h0.moe.router.W", {32, 4}, hf_experts_naming::qwen)) ==
        std::vector<std::string>{"model.layers.0.mlp.gate.weight"});
  CHECK(hf_shape_of(m[1], shape) == std::vector<std::int64_t>{3, 2});
  // expert 1 is [[7, 8, 9], [10, 11, 12]]; its Hugging Face tensor the transpose
  const std::vector<int> stacked{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  CHECK(to_hf_layout(m[1], shape, stacked) == std::vector<int>{7, 10, 8, 11, 9, 12});
  std::vector<int> back;
  from_hf_layout(m[0], shape, std::vector<int>{1, 4, 2, 5, 3, 6}, back);
  from_hf_layout(m[1], shape, std::vector<int>{7, 10, 8, 11, 9, 12}, back);
  CHECK(back == stacked);
}

TEST_CASE("Qwen2-MoE's shared expert and its gate under Qwen's names, transposed", "[models][hf-weights][moe]") {
  CHECK(names(hf_names_of("h2.shared.mlp.gate.W", {32, 40}, hf_experts_naming::qwen)) ==
        std::vector<std::string>{"model.layers.2.mlp.shared_expert.gate_proj.weight"});
  CHECK(names(hf_names_of("h2.shared.mlp.up.W", {32, 40}, hf_experts_naming::qwen)) ==
        std::vector<std::string>{"model.layers.2.mlp.shared_expert.up_proj.weight"});
  const hf_param_name down = hf_names_of("h0.shared.mlp.down.W", {40, 32}, hf_experts_naming::qwen).at(0);
  CHECK(down.name == "model.layers.0.mlp.shared_expert.down_proj.weight");
  CHECK(hf_shape_of(down, {40, 32}) == std::vector<std::int64_t>{32, 40});
  // the gate's w [h, 1] is torch's Linear(h, 1) weight [1, h]: the same values in the same order
  const hf_param_name gate = hf_names_of("h0.shared.gate_logit.W", {3, 1}, hf_experts_naming::qwen).at(0);
  CHECK(gate.name == "model.layers.0.mlp.shared_expert_gate.weight");
  CHECK(gate.expert == -1);
  CHECK(hf_shape_of(gate, {3, 1}) == std::vector<std::int64_t>{1, 3});
  CHECK(to_hf_layout(gate, {3, 1}, std::vector<int>{4, 5, 6}) == std::vector<int>{4, 5, 6});
  CHECK(hf_names_of("h0.shared.gate_logit.W", {3, 1}, hf_experts_naming::mixtral).empty());
}

}  // namespace hf_weights_cases
