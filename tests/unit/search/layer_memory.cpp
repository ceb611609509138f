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

// A LLaMA layer (RMSNorm, grouped-query attention with rotary q and k, SwiGLU MLP) under
// Megatron-LM's tensor parallelism on t devices, from what each kernel's backward reads
// (2-byte activations, float statistics; s sequence, b batch, h hidden, a heads, F the MLP's
// width, kv the key/value width kv_heads * h / a):
//   two RMSNorms: input and output (read by the linears after it) 2 x 4sbh, 1/rms per row 2 x 4sb;
//   attention: q 2sbh/t, k and v 2 x 2sb kv/t, its output (the o projection's input) 2sbh/t, one
//   float log-sum-exp per row and head 4asb/t (none under selective recomputation, whose rerun
//   makes it again);
//   SwiGLU MLP: gate and up, 2 x 2sbF/t, and not their product silu(gate) * up: the down
//   projection's weight gradient reads it recomputed from gate and up. Korthikanti's accounting
//   (every op keeps the inputs its backward reads) gives the MLP 3F elements per token beside its
//   input (gate, up and the product, 6sbF/t bytes); recomputing the product keeps 2F (4sbF/t).
// The two rotaries and the two residual adds keep nothing. The replayed layer is exactly that.
namespace llama_layer {
namespace {

constexpr double kv = 32, f = 160;  // and s, b, h, a as the GPT's above

double peak_live(int layers, int t, recompute_mode r) {
  plan_options o;
  o.mesh = mesh_shape{t};
  o.hw = load_hardware("dgx-a100");
  o.type = dtype::bf16;
  o.recompute = r;
  const graph g = build_model("llama:layers=" + std::to_string(layers) + ",hidden=64,heads=4,kv_heads=2,ffn=160,seq=256,batch=4,vocab=128");
  plan_problem problem(g, o);
  const std::string strategy = "megatron:tp=" + std::to_string(t) + ",recompute=" + std::string(to_string(r));
  const plan_result res = solve_plan(problem, parse_strategy(strategy));
  return double(replay_step_memory(problem, res.pick).peak_live);
}

}  // namespace
}  // namespace llama_layer

TEST_CASE("a LLaMA layer keeps SwiGLU's gate and up, 2F per token, and recomputes their product",
          "[search][memory][closed-form][llama]") {
  using namespace llama_layer;
  for (int t : {2, 4})
    for (recompute_mode r : {recompute_mode::none, recompute_mode::selective}) {
      const double mlp = 2 * 2 * sb * f / t;  // gate and up: 2F elements per token
      const double lse = r == recompute_mode::selective ? 0 : 4 * a * sb / t;  // selective reruns the core for it
      const double want = 8 * sbh + 8 * sb + 4 * sbh / t + 4 * sb * kv / t + lse + mlp;
      const double layer = peak_live(3, t, r) - peak_live(2, t, r);
      INFO("tp " << t << " recompute " << to_string(r) << ": one layer keeps " << layer << " bytes, the closed form "
                 << want << " (ratio " << layer / want << "); the product would add " << mlp / 2);
      CHECK(std::abs(layer / want - 1) <= 1e-9);
    }
}

TEST_CASE("the step reruns a LLaMA block's SwiGLU product before the down projection's backward, not under full",
          "[search][memory][schedule][llama]") {
  const graph g = build_model("llama:layers=2,hidden=64,heads=4,kv_heads=2,ffn=160,seq=256,batch=4,vocab=128");
  auto op = [&](const std::string& name) {
    for (int i = 0; i < int(g.ops.size()); ++i)
      if (g.ops[std::size_t(i)].name == name) return i;
    FAIL("no op " << name);
    return -1;
  };
  for (recompute_mode r : {recompute_mode::none, recompute_mode::selective, recompute_mode::full}) {
    plan_options o;
    o.mesh = mesh_shape{2};
    o.hw = load_hardware("dgx-a100");
    o.recompute = r;
    plan_problem problem(g, o);
    const plan p = plan_of(problem, solve_plan(problem, parse_strategy("megatron:tp=2")).pick);
    const step_schedule sc(p);
    for (const std::string pre : {"h0.", "h1."}) {
      INFO(pre << " recompute " << to_string(r));
      const int swiglu = op(pre + "mlp.swiglu"), down = op(pre + "mlp.down"), core = op(pre + "attn.core");
      const std::vector<int> reruns = sc.reruns_before(down);
      if (r == recompute_mode::full) {  // the block's rerun makes the product again and holds it
        CHECK(reruns.empty());
        CHECK(sc.held(swiglu, true));
        continue;
      }
      CHECK(reruns == std::vector<int>{swiglu});
      CHECK_FALSE(sc.held(swiglu, false));
      CHECK(sc.held(op(pre + "mlp.gate"), false));
      CHECK(sc.held(op(pre + "mlp.up"), false));
      CHECK(sc.reruns_before(core) == (r == recompute_mode::selective ? std::vector<int>{core} : std::vector<int>{}));
    }
  }
}

}  // namespace layer_memory_cases
