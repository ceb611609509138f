// One transformer layer's activation memory, as the replayed step holds it, against the closed
// forms of Korthikanti et al. 2022 ("Reducing activation recomputation in large transformer
// models", table 2) for Megatron-LM's kernels with FlashAttention. A layer's bytes are the
// difference of two layer counts: the replayed high-water mark of the step's own buffers
// (step_memory::peak_live) of a 3-layer GPT less that of a 2-layer one, under Megatron-LM's
// layouts on t devices (megatron:tp=t), with and without sequence parallelism, with and without
// selective recomputation.
//
// Korthikanti's per-layer bytes (2-byte activations, s sequence, b batch, h hidden, a heads):
//   tensor parallel               sbh (10 + 24/t + 5as/(ht))
//   + sequence parallel           sbh/t (34 + 5as/h)
// The 5as/h terms are the attention's probabilities (2 bytes), their dropout mask (1 byte) and
// the dropped probabilities (2 bytes); FlashAttention keeps none of them, only one float
// log-sum-exp per row (4asb/t bytes), and selective recomputation then has nothing left to
// drop, so it keeps the same. With sequence parallelism the executor, as Megatron-LM does, keeps
// each column-parallel linear's input as its sequence shard and gathers it again in backward
// (plan::regather_inputs, pinned on here). The executor differs from those forms in two
// documented places:
//   - no dropout mask is kept (masks are a counter-based hash recomputed in backward): Megatron
//     keeps 1 byte per element after the attention projection and after the MLP, 2sbh (2sbh/t
//     with sequence parallelism, where those dropouts run on sequence shards);
//   + each layernorm keeps its mean and 1/std per row in float: 2 x 2 x 4 sb = 16sb (16sb/t).
// The check allows 10 % for what the high-water mark holds beside the kept activations.
#include <cmath>
#include <string>

#include <catch2/catch_test_macros.hpp>

#include "autoddl/models.hpp"
#include "autoddl/search.hpp"

using namespace autoddl;

namespace layer_memory_cases {
namespace {

constexpr double s = 256, b = 4, h = 64, a = 4;  // Korthikanti's symbols for spec() below
constexpr double sbh = s * b * h, sb = s * b;

std::string spec(int layers) {
  return "gpt:layers=" + std::to_string(layers) + ",hidden=64,heads=4,seq=256,batch=4,vocab=128";
}

double peak_live(int layers, int t, bool sp, recompute_mode r) {
  plan_options o;
  o.mesh = mesh_shape{t};
  o.hw = load_hardware("dgx-a100");
  o.type = dtype::bf16;
  o.recompute = r;
  const graph g = build_model(spec(layers));
  o.regather_inputs = true;
  plan_problem problem(g, o);
  const std::string strategy = "megatron:tp=" + std::to_string(t) + (sp ? ",sp=1" : "") +
                               (r == recompute_mode::selective ? ",recompute=selective" : ",recompute=none");
  const plan_result res = solve_plan(problem, parse_strategy(strategy));
  return double(replay_step_memory(problem, res.pick).peak_live);
}

}  // namespace

TEST_CASE("a GPT layer keeps what Megatron-LM's kernels keep (Korthikanti's closed forms, FlashAttention)",
          "[search][memory][closed-form]") {
  for (int t : {2, 4})
    for (bool sp : {false, true})
      for (recompute_mode r : {recompute_mode::none, recompute_mode::selective}) {
        const double lse = 4 * a * s * b / t;
        const double want = sp ? sbh / t * 34 - 2 * sbh / t + 16 * sb / t + lse
                               : sbh * (10 + 24.0 / t) - 2 * sbh + 16 * sb + lse;
        const double layer = peak_live(3, t, sp, r) - peak_live(2, t, sp, r);
        INFO("tp " << t << " sp " << sp << " recompute " << to_string(r) << ": one layer keeps " << layer
                   << " bytes, the closed form " << want << " (ratio " << layer / want << ")");
        CHECK(std::abs(layer / want - 1) <= 0.10);
      }
}

}  // namespace layer_memory_cases
