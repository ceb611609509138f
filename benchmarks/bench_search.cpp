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
  plan_problem pp(g, o);
  double t2 = now();
  plan_result r = solve_plan(pp, strategy::automatic{});
  double t3 = now();
  auto ratio = [&](const char* e) -> std::string {
    try {
      return std::to_string(solve_plan(pp, parse_strategy(e)).time / r.time).substr(0, 5) + "x";
    } catch (const error&) {
      return "n/a";  // e.g. dp cannot split a batch smaller than the mesh
    }
  };
  std::printf("%-44s %-7s %6zu ops  build %6.3f s  price %6.3f s  search %6.3f s  total %6.3f s  gap %s  vs dp %s  vs megatron %s%s\n",
              spec.c_str(), mesh.c_str(), g.ops.size(), t1 - t0, t2 - t1, r.search_s, t3 - t0,
              r.optimal_gap ? (std::to_string(*r.optimal_gap * 100).substr(0, 6) + "%").c_str() : "n/a",
              ratio("dp").c_str(), ratio("megatron").c_str(), r.feasible ? "" : "  (over memory)");
  std::fflush(stdout);
}
}  // namespace

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  std::puts("# search time and gap to the exact optimum (one core)");
  std::puts("# headline: GPT-3 175B on 128x8 dgx-a100, bf16, the device's memory as the limit");
  run("gpt:size=gpt3-175b,batch=128", "128x8", "dgx-a100", dtype::bf16);
  if (quick) return 0;
  std::puts("# layers 12 -> 96 -> 384 on 128x8 (memory limit lifted: the search alone)");
  for (int layers : {12, 96, 384})
    run("gpt:size=gpt3-175b,layers=" + std::to_string(layers) + ",batch=128", "128x8", "dgx-a100", dtype::bf16, true);
  std::puts("# devices 8 -> 8192, GPT-3 175B, global batch 8192 (memory limit lifted)");
  for (const char* mesh : {"1x8", "8x8", "64x8", "128x8", "1024x8"})
    run("gpt:size=gpt3-175b,batch=8192", mesh, "dgx-a100", dtype::bf16, true);
  std::puts("# mesh rank 3 (issue 19's rows; 4-D meshes are not yet affordable: 2401 candidates per op)");
  run("gpt:layers=2,hidden=64,heads=4,seq=32,batch=8,vocab=128", "2x2x2", "dgx-a100", dtype::bf16);
  run("gpt:size=gpt2,batch=64", "4x4x8", "dgx-a100", dtype::bf16);
  run("gpt:size=gpt3-175b,batch=128", "16x8x8", "dgx-a100", dtype::bf16);
  std::puts("# other models, real memory limits");
  run("vgg16:batch=256", "4x8", "dgx1-v100", dtype::fp32);
  run("bert:size=bert-large,batch=256,seq=512", "4x8", "dgx1-v100", dtype::fp16);
  return 0;
}
