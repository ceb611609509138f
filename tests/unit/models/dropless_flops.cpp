// A dropless mixture of experts counts the FLOPs of the rows it routes, not of padded slots.
// Oracle: Qwen3-30B-A3B's published configuration (Qwen/Qwen3-30B-A3B config.json: 48 layers,
// hidden 2048, 32 query heads of 128, 4 key/value heads, 128 experts of width 768, top 8,
// vocabulary 151,936, untied), written here as numbers: a training step's FLOPs are
// 6 x (parameters a token passes through, the input embedding table left out: a lookup, no
// product) x tokens (Kaplan et al. 2020), plus causal attention's QK^T and PV, 2 x 2 x s^2/2 x
// 4096 per sequence and layer forward, 3 x that for training. The count must lie within 5%.
#include <cstdint>

#include <catch2/catch_test_macros.hpp>

#include <catch2/matchers/catch_matchers_string.hpp>

#include "autoddl/models/zoo.hpp"
#include "autoddl/ops/work.hpp"

using namespace autoddl;

namespace dropless_flops_cases {

TEST_CASE("Qwen3-30B-A3B dropless counts 6 x active parameters x tokens plus attention, within 5%", "[models][moe]") {
  const double layers = 48, hidden = 2048, q_dim = 32 * 128, kv_dim = 4 * 128, experts = 128, topk = 8, width = 768,
               vocab = 151936, seq = 4096, batch = 256;
  const double attention_weights = hidden * q_dim + 2 * hidden * kv_dim + q_dim * hidden;
  const double norms = 2 * hidden + 2 * 128;  // two RMSNorms and q/k norms per layer
  const double active_experts = topk * 3 * hidden * width, router = hidden * experts;
  const double active = layers * (attention_weights + norms + active_experts + router) + hidden + vocab * hidden;
  const double tokens = seq * batch;
  const double attention = 3 * layers * batch * 2 * 2 * (seq * seq / 2) * q_dim;
  const double oracle = 6 * active * tokens + attention;

  const graph g = build_model("llama:size=qwen3-30b-a3b,capacity=0,seq=4096,batch=256");
  const double counted = forward_flops(g) + backward_flops(g);
  INFO("counted " << counted << " FLOP per step, oracle " << oracle);
  CHECK(counted / oracle > 0.95);
  CHECK(counted / oracle < 1.05);
  // The same model at capacity 1.25 pads every expert to its slots: more than the routed rows.
  const graph padded = build_model("llama:size=qwen3-30b-a3b,seq=4096,batch=256");
  CHECK(forward_flops(padded) + backward_flops(padded) > counted);
}

// Qwen1.5-MoE-A2.7B's shapes (Qwen/Qwen1.5-MoE-A2.7B config.json: 24 layers, hidden 2048, 16
// heads of 128 with biases on q, k and v, 60 experts of 1408, top 4, a shared SwiGLU of 5632
// behind a sigmoid gate, vocabulary 151,936), dropless: 6 x the parameters a token passes through
// x tokens, plus causal attention, within 5%.
TEST_CASE("a Qwen2-MoE step counts its routed and shared experts: 6 x active parameters x tokens plus attention",
          "[models][moe]") {
  const double layers = 24, hidden = 2048, experts = 60, topk = 4, width = 1408, shared = 5632, vocab = 151936,
               seq = 4096, batch = 64;
  const double attention_weights = 4 * hidden * hidden + 3 * hidden, norms = 2 * hidden;
  const double routed = topk * 3 * hidden * width, router = hidden * experts, shared_mlp = 3 * hidden * shared + hidden;
  const double active = layers * (attention_weights + norms + routed + router + shared_mlp) + hidden + vocab * hidden;
  const double tokens = seq * batch;
  const double attention = 3 * layers * batch * 2 * 2 * (seq * seq / 2) * hidden;
  const double oracle = 6 * active * tokens + attention;
  const graph g = build_model("llama:layers=24,hidden=2048,heads=16,kv_heads=16,ffn=5632,vocab=151936,qkv_bias=1,experts=60,"
                              "topk=4,moe_ffn=1408,shared_ffn=5632,shared_gate=1,norm_topk=0,capacity=0,seq=4096,batch=64");
  const double counted = forward_flops(g) + backward_flops(g);
  INFO("counted " << counted << " FLOP per step, oracle " << oracle);
  CHECK(counted / oracle > 0.95);
  CHECK(counted / oracle < 1.05);
}

// The shared expert's gate over X [2, 3, 8] and Z [2, 3, 1]: a product per element and a sigmoid
// per token forward (48 + 4 x 6), a product and a multiply-add per element and the sigmoid with its
// derivative per token backward (3 x 48 + 4 x 6); on a mesh of 2 splitting the hidden dim, each
// device scales its 24 elements and computes all 6 sigmoids.
TEST_CASE("sigmoid_gate counts a product per element and a sigmoid per token", "[models][moe]") {
  op_node op;
  op.kind = op_kind::sigmoid_gate;
  op.inputs = {{2, 3, 8}, {2, 3, 1}};
  op.outputs = {{2, 3, 8}};
  CHECK(forward_flops(op) == 72);
  CHECK(backward_flops(op) == 168);
  signature sig;
  sig.inputs = {nd_sbp{S(2)}, nd_sbp{B}};
  sig.outputs = {nd_sbp{S(2)}};
  CHECK(device_work(op, sig, mesh_shape{2}, 4).fwd_flops == 24 + 24);
  CHECK(device_work(op, sig, mesh_shape{2}, 4).activation_bytes == (24 + 6) * 4);
}

// On a device holding one of 4 experts over 8 tokens of top-2 routing, balanced routing gives it
// 8 x 2 / 4 = 4 rows; imbalance 1.5 prices 6, imbalance 3 the most it can get, every token once: 8.
// Each row costs 6 h F + 5 F + 2 h forward (three GEMMs, SwiGLU's product, the weighted sum).
TEST_CASE("routed_experts prices the busiest device's rows: balanced routing times the imbalance, capped", "[models][moe]") {
  const double h = 6, f = 5, per_row = 6 * h * f + 5 * f + 2 * h;
  for (const auto& [imbalance, rows] : {std::pair{1.0, 4.0}, std::pair{1.5, 6.0}, std::pair{3.0, 8.0}}) {
    op_node op;
    op.kind = op_kind::routed_experts;
    op.attrs.topk = 2;
    op.attrs.imbalance = imbalance;
    op.inputs = {{1, 8, 6}, {1, 8, 4}};
    op.params = {{4, 6, 5}, {4, 6, 5}, {4, 5, 6}};
    op.outputs = {{1, 8, 6}};
    signature sig;  // X B, G B, every weight S(0) on a mesh of 4: one expert per device
    sig.inputs = {nd_sbp{B}, nd_sbp{B}};
    sig.params = {nd_sbp{S(0)}, nd_sbp{S(0)}, nd_sbp{S(0)}};
    sig.outputs = {nd_sbp{P}};
    CAPTURE(imbalance);
    CHECK(device_work(op, sig, mesh_shape{4}, 4).fwd_flops == rows * per_row);
  }
}

TEST_CASE("an imbalance below 1, or one without dropless routing, is refused in one sentence", "[models][moe]") {
  const std::string tiny = "llama:layers=1,hidden=32,heads=4,kv_heads=2,ffn=32,seq=16,batch=8,vocab=64,experts=4,topk=2";
  CHECK_THROWS_WITH(build_model(tiny + ",capacity=0,imbalance=0.5"), Catch::Matchers::ContainsSubstring("imbalance=0.5") &&
                                                                         Catch::Matchers::ContainsSubstring("must be at least 1"));
  CHECK_THROWS_WITH(build_model(tiny + ",imbalance=1.2"), Catch::Matchers::ContainsSubstring("imbalance prices dropless routing"));
  CHECK_NOTHROW(build_model(tiny + ",capacity=0,imbalance=1.2"));
}

}  // namespace dropless_flops_cases
