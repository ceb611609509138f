// Search speed and quality: time to build the priced problem and to search it, and the gap of the
// coordinate descent to the exact series-parallel optimum, as layers and devices grow.
//   build/benchmarks/bench_search [--quick]
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "autoddl/cost/hardware_io.hpp"
#include "autoddl/models/zoo.hpp"
#include "autoddl/search.hpp"
#include "autoddl/search/micro_batches.hpp"
#include "autoddl/search/pipeline.hpp"
#include "support/heap.hpp"

using namespace autoddl;

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void run(const std::string& spec, const std::string& mesh, const std::string& hw_name, dtype t, bool lift_memory = false) {
  plan_options o;
  o.mesh = parse_mesh(mesh);
  o.hw = load_hardware(hw_name);
  o.type = t;
  if (lift_memory) o.memory_limit = 1e30;  // scaling rows: the search alone, no memory limit
  double t0 = now();
  graph g = build_model(spec);
  double t1 = now();
  plan_problem problem(g, o);
  double t2 = now();
  plan_result r = solve_plan(problem, strategy::automatic{});
  double t3 = now();
  auto ratio = [&](const char* e) -> std::string {
    try {
      return std::to_string(solve_plan(problem, parse_strategy(e)).time / r.time).substr(0, 5) + "x";
    } catch (const error&) {
      return "n/a";  // e.g. dp cannot split a batch smaller than the mesh
    }
  };
  // gap: to the exact optimum where the reference fits its budget, else "<= x% (bound)": this
  // plan's additive step time over the reference's lower bound
  const std::string gap = r.optimal_gap ? std::to_string(*r.optimal_gap * 100).substr(0, 6) + "%"
                          : r.bound_gap ? "<=" + std::to_string(*r.bound_gap * 100).substr(0, 6) + "% (bound)"
                                        : "n/a";
  std::printf("%-44s %-7s %6zu ops  build %6.3f s  price %6.3f s  search %6.3f s  total %6.3f s  gap %s  vs dp %s  vs megatron %s%s\n",
              spec.c_str(), mesh.c_str(), g.ops.size(), t1 - t0, t2 - t1, r.search_s, t3 - t0, gap.c_str(),
              ratio("dp").c_str(), ratio("megatron").c_str(), r.feasible ? "" : "  (over memory)");
  std::fflush(stdout);
}
// dgx-a100, bf16, Adam, the device's memory as the limit: the published configurations' setting.
plan_options dgx_a100_bf16(const std::string& mesh) {
  plan_options o;
  o.mesh = parse_mesh(mesh);
  o.hw = load_hardware("dgx-a100");
  o.type = dtype::bf16;
  return o;
}

// A published configuration with micro-batches and recomputation chosen with the layouts
// (search/micro_batches.hpp), against Megatron-LM's layouts with full recomputation.
void run_micro_batched(const std::string& spec, const std::string& mesh, int tp) {
  const plan_options o = dgx_a100_bf16(mesh);
  auto build = [&](int m) { return build_model(spec, m); };
  const std::int64_t batch = graph_batch(build_model(spec));
  const double t0 = now();
  const micro_batched_plan a = plan_micro_batched(build, batch, o, strategy::automatic{}, {});
  const double t1 = now();
  const std::string expert = "megatron:tp=" + std::to_string(tp) + ",recompute=full";
  const micro_batched_plan e = plan_micro_batched(build, batch, o, parse_strategy(expert), {});
  std::printf("%-62s %-6s auto: %2d x %-4lld %-9s search %6.3f s (%d settings) total %6.3f s  step %7.3f s  peak %5.1f GB%s"
              "  | %s: %d micro-batches, step %7.3f s%s  -> auto %.2fx\n",
              spec.c_str(), mesh.c_str(), a.microbatches, static_cast<long long>(batch / a.microbatches),
              std::string(to_string(a.recompute)).c_str(), a.result.search_s, a.settings_tried, t1 - t0, a.result.time,
              a.result.totals.peak_memory() / 1e9, a.result.feasible ? "" : " (over memory)", expert.c_str(),
              e.microbatches, e.result.time, e.result.feasible ? "" : " (over memory)", e.result.time / a.result.time);
  std::fflush(stdout);
}
// The pipeline search (search/pipeline.hpp): stages, micro-batches, recomputation and the stage
// layouts searched together, 80 GiB dgx-a100, bf16, Adam, against Megatron-LM's published
// tensor x pipeline layout with full recomputation; gap: the winner's stage layouts to the exact
// reference (attach_optimal_gap).
void run_pipeline(const std::string& spec, const std::string& mesh, int tp, int pp) {
  const plan_options o = dgx_a100_bf16(mesh);
  auto build = [&](int m) { return build_model(spec, m); };
  const std::int64_t batch = graph_batch(build_model(spec));
  const double t0 = now();
  const std::optional<pipeline_plan> a = search_pipeline(build, batch, o, {});
  const double t1 = now();
  const std::string expert = "megatron:tp=" + std::to_string(tp) + ",pp=" + std::to_string(pp) + ",recompute=full";
  const pipeline_plan e = plan_megatron_pipeline(build, batch, o, parse_strategy(expert), {});
  if (!a) {
    std::printf("%-40s %-6s no pipeline fits this mesh and model\n", spec.c_str(), mesh.c_str());
    return;
  }
  const plan_result& r = a->layouts.result;
  char gap[32];
  if (r.optimal_gap)
    std::snprintf(gap, sizeof gap, "%.3f%%", *r.optimal_gap * 100);
  else
    std::snprintf(gap, sizeof gap, "%s", std::string(to_string(r.exact)).c_str());
  std::printf("%-40s %-6s auto: %2d stages x %4d micro-batches  search %6.3f s  step %7.3f s%s  gap %s"
              "  | %s: step %7.3f s%s  -> auto %.2fx\n",
              spec.c_str(), mesh.c_str(), a->shape.stages, a->shape.microbatches, t1 - t0, a->time,
              a->feasible ? "" : " (over memory)",
              gap,
              expert.c_str(), e.time, e.feasible ? "" : " (over memory)", e.time / a->time);
  std::fflush(stdout);
}
}  // namespace

int main(int argc, char** argv) {
  const std::size_t huge = autoddl::tools::reserve_huge_page_heap();  // as autoddl-plan does
  bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  std::puts("# search time and gap to the exact optimum (one core)");
  std::printf("# heap on 2 MiB pages: %zu MiB (src/support/heap.hpp)\n", huge >> 20);
  std::puts("# headline: GPT-3 175B on 128x8 dgx-a100, bf16, the device's memory as the limit");
  run("gpt:size=gpt3-175b,batch=128", "128x8", "dgx-a100", dtype::bf16);
  std::puts("# micro-batches and recomputation chosen with the layouts, 80 GiB dgx-a100, bf16, Adam: GPT-3 175B at its");
  std::puts("# batch of 1536, then Narayanan et al. 2021 Table 1's models with their tensor-parallel size");
  run_micro_batched("gpt:size=gpt3-175b,batch=1536", "128x8", 8);
  std::puts("# pipelines searched with the layouts (every coordinate free), against Megatron-LM's tp=8 x pp=P");
  run_pipeline("gpt:size=gpt3-175b,batch=1536", "128x8", 8, 16);
  if (quick) return 0;
  run_pipeline("gpt:layers=48,hidden=8192,heads=64,seq=2048,batch=1536,vocab=51200", "64x8", 8, 2);
  run_micro_batched("gpt:layers=24,hidden=2304,heads=24,seq=2048,batch=512,vocab=51200", "4x8", 1);
  run_micro_batched("gpt:layers=30,hidden=3072,heads=32,seq=2048,batch=512,vocab=51200", "8x8", 2);
  run_micro_batched("gpt:layers=36,hidden=4096,heads=32,seq=2048,batch=512,vocab=51200", "16x8", 4);
  run_micro_batched("gpt:layers=40,hidden=6144,heads=48,seq=2048,batch=1024,vocab=51200", "32x8", 8);
  std::puts("# layers 12 -> 96 -> 384 on 128x8 (memory limit lifted: the search alone)");
  for (int layers : {12, 96, 384})
    run("gpt:size=gpt3-175b,layers=" + std::to_string(layers) + ",batch=128", "128x8", "dgx-a100", dtype::bf16, true);
  std::puts("# devices 8 -> 8192, GPT-3 175B, global batch 8192 (memory limit lifted)");
  for (const char* mesh : {"1x8", "8x8", "64x8", "128x8", "1024x8"})
    run("gpt:size=gpt3-175b,batch=8192", mesh, "dgx-a100", dtype::bf16, true);
  std::puts("# mesh rank 3 and 4 (bench_search's rows; 2401 candidates per op on 2x2x2x2)");
  run("gpt:layers=2,hidden=64,heads=4,seq=32,batch=8,vocab=128", "2x2x2", "dgx-a100", dtype::bf16);
  run("mlp:layers=3,hidden=64,batch=8,in=16,out=4", "2x2x2", "dgx-a100", dtype::bf16);
  run("gpt:size=gpt2,batch=64", "4x4x8", "dgx-a100", dtype::bf16);
  run("gpt:size=gpt3-175b,batch=128", "16x8x8", "dgx-a100", dtype::bf16);
  run("gpt:layers=12,hidden=64,heads=4,seq=32,batch=16,vocab=128", "2x2x2x2", "dgx-a100", dtype::bf16);
  std::puts("# mesh rank 1 -> 4 on 16 devices: a 12-layer GPT-2-sized model, batch 64 (memory limit lifted)");
  for (const char* mesh : {"16", "4x4", "2x2x4", "2x2x2x2"})
    run("gpt:size=gpt2,batch=64", mesh, "dgx-a100", dtype::bf16, true);
  std::puts("# other models, real memory limits");
  run("vgg16:batch=256", "4x8", "dgx1-v100", dtype::fp32);
  run("bert:size=bert-large,batch=256,seq=512", "4x8", "dgx1-v100", dtype::fp16);
  return 0;
}
