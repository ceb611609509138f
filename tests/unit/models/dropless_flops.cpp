// A dropless mixture of experts counts the FLOPs of the rows it routes, not of padded slots.
// Oracle: Qwen3-30B-A3B's published configuration (Qwen/Qwen3-30B-A3B config.json: 48 layers,
// hidden 2048, 32 query heads of 128, 4 key/value heads, 128 experts of width 768, top 8,
// vocabulary 151,936, untied), written here as numbers: a training step's FLOPs are
// 6 x (parameters a token passes through, the input embedding table left out: a lookup, no
// product) x tokens (Kaplan et al. 2020), plus causal attention's QK^T and PV, 2 x 2 x s^2/2 x
// 4096 per sequence and layer forward, 3 x that for training. The count must lie within 5%.
#include <cstdint>

#include <catch2/catch_test_macros.hpp>

#include "autoddl/models/zoo.hpp"

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

}  // namespace dropless_flops_cases
