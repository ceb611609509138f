// Gathering again for backward (plan::regather_inputs, plan::reshard_after_forward): what the
// replayed step (search/step_memory.hpp) saves, against closed forms from the model's shapes,
// and what the pricing adds, against the boxing table's all-gather bytes.
#include <catch2/catch_test_macros.hpp>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "autoddl/cost/hardware_io.hpp"
#include "autoddl/models/zoo.hpp"
#include "autoddl/search.hpp"
#include "autoddl/search/step_memory.hpp"

using namespace autoddl;

namespace regather_cases {

namespace {

// fp32 on dgx-a100, mesh `mesh`, m micro-batches, with regathering and resharding as given.
struct flags {
  bool regather = true, reshard = true;
};
plan_options options_of(const mesh_shape& mesh, int m, flags f) {
  plan_options o;
  o.mesh = mesh;
  o.hw = load_hardware("dgx-a100");
  o.type = dtype::fp32;
  o.microbatches = m;
  o.regather_inputs = f.regather;
  o.reshard_after_forward = f.reshard;
  return o;
}

// The replayed step and the priced bytes of the plan `strategy` picks on g, under flags f.
struct priced {
  step_memory step;
  double bytes = 0;
};
priced price(const graph& g, const mesh_shape& mesh, int m, const std::string& strategy, flags f) {
  const plan_problem problem(g, options_of(mesh, m, f));
  const plan_result r = solve_plan(problem, parse_strategy(strategy));
  return {replay_step_memory(problem, r.pick), r.totals.bytes};
}

}  // namespace

TEST_CASE("a sequence-parallel layout keeps its sequence shards, not their gathered copies", "[search][memory][regather]") {
  // gpt with L layers, micro-batch b, sequence s, hidden h, Megatron-LM's sequence-parallel
  // layout on t devices: each block all-gathers its two layernorm outputs [b, s, h] from sequence
  // shards (for q, k and v at once, and for the MLP's first linear), whose weight gradients read
  // them: 2 L gathered copies of b s h elements, each boxed from b s h / t. (A vocabulary of 65,
  // which the t devices do not divide: the tied LM head takes its input split on the hidden dim,
  // no larger than its source.) Regathering keeps the shards instead. Both steps peak at one op's
  // backward after the last block's MLP, before any copy is gathered again: the peak falls by the
  // 2 L copies less their shards, and each copy's all-gather, (t - 1) / t of it per device, runs
  // once more. With a vocabulary they divide (64), the head is column parallel over it and
  // gathers the final layernorm's output as Megatron-LM does: a (2 L + 1)th copy gathered again.
  const int layers = 2, b = 8, s = 16, h = 32, t = 2;
  const graph g = build_model("gpt:layers=2,hidden=32,heads=4,seq=16,batch=8,vocab=65");
  const double copy = double(b) * s * h * 4, shard = copy / t;
  const priced keep = price(g, mesh_shape{t}, 1, "megatron:sp=1", {.regather = false});
  const priced again = price(g, mesh_shape{t}, 1, "megatron:sp=1", {.regather = true});
  std::printf("sp on %d: peak %lld B keeping copies, %lld B regathering; bytes %.0f, %.0f\n", t,
              static_cast<long long>(keep.step.peak()), static_cast<long long>(again.step.peak()), keep.bytes, again.bytes);
  int last_fc = 0;
  for (int i = 0; i < int(g.ops.size()); ++i)
    if (g.ops[std::size_t(i)].name == "h1.mlp.fc") last_fc = i;
  INFO("peak at op '" << g.ops[std::size_t(again.step.peak_op)].name << "'");
  REQUIRE(again.step.peak_op == keep.step.peak_op);
  REQUIRE(again.step.peak_in_backward);
  REQUIRE(again.step.peak_op > last_fc);
  CHECK(double(keep.step.peak() - again.step.peak()) == 2 * layers * (copy - shard));
  CHECK(again.bytes - keep.bytes == 2 * layers * copy * (t - 1) / t);
  const graph split_vocab = build_model("gpt:layers=2,hidden=32,heads=4,seq=16,batch=8,vocab=64");
  const priced keep64 = price(split_vocab, mesh_shape{t}, 1, "megatron:sp=1", {.regather = false});
  const priced again64 = price(split_vocab, mesh_shape{t}, 1, "megatron:sp=1", {.regather = true});
  CHECK(again64.bytes - keep64.bytes == (2 * layers + 1) * copy * (t - 1) / t);
}

TEST_CASE("ZeRO-3 resharding after forward holds one op's gathered parameters at a time", "[search][memory][regather]") {
  // an MLP of hidden 64 (in 16, out 8), ZeRO-3 on 4 devices, 2 micro-batches: every weight and
  // bias is stored in quarters and gathered whole for its op. Kept to the last backward, the
  // gathered parameters live until their op's last backward; resharded, only the op in flight's
  // do. Both steps peak at the backward of one op p: the peak falls by the parameters of the ops
  // before p (those after it are freed by then either way), and each gather, 3/4 of its
  // parameters per device, runs 2 m times a step instead of once.
  const graph g = build_model("mlp:layers=3,hidden=64,batch=16,in=16,out=8");
  const int m = 2;
  const priced keep = price(g, mesh_shape{4}, m, "zero", {.reshard = false});
  const priced again = price(g, mesh_shape{4}, m, "zero", {.reshard = true});
  std::printf("zero-3: peak %lld B keeping gathered parameters, %lld B resharding (at op %d); bytes %.0f, %.0f\n",
              static_cast<long long>(keep.step.peak()), static_cast<long long>(again.step.peak()), again.step.peak_op,
              keep.bytes, again.bytes);
  REQUIRE(again.step.peak_op == keep.step.peak_op);
  REQUIRE(again.step.peak_in_backward);
  double before = 0, all = 0;
  for (int i = 0; i < int(g.ops.size()); ++i)
    for (const tensor_shape& p : g.ops[std::size_t(i)].params) {
      all += double(p.elements()) * 4;
      if (i < again.step.peak_op) before += double(p.elements()) * 4;
    }
  CHECK(double(keep.step.peak() - again.step.peak()) == before);
  CHECK(again.bytes - keep.bytes == (2 * m - 1) * all * 3 / 4);
}

}  // namespace regather_cases
