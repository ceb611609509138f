// Where a serial training step's kernel time goes, by op kind, forward and backward, beside the
// FLOPs and bytes the cost model counts (ops/work.hpp's device_work).
//
// Every op of the model runs alone on one cpu_device in fp32 under its serial signature (all B on
// mesh 1), as autoddl-calibrate measures a kernel (tools/calibrate_kernels.hpp, measure_kernel:
// 2 MiB of cache evicted before each rep, the median over reps); ops with the same kernel key are
// measured once and counted as often as the model has them. Per kind: the number of ops, the
// forward and backward milliseconds, their share of the step's kernel time, GFLOP/s over the
// counted FLOPs and GB/s over the forward's counted bytes moved.
//   build/benchmarks/bench_op_profile --model SPEC [--model SPEC]... [--reps N] [--json]
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "calibrate_kernels.hpp"

using namespace autoddl;

namespace {

struct kind_row {
  int ops = 0;
  double fwd_s = 0, bwd_s = 0, fwd_flops = 0, bwd_flops = 0, bytes = 0;
};

std::map<std::string, kind_row> profile_model(const std::string& spec, int reps) {
  const graph g = build_model(spec);
  const mesh_shape mesh{1};
  std::map<std::string, kernel_entry> measured;
  std::map<std::string, kind_row> rows;
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    std::vector<bool> grads;
    for (const tensor_ref& r : g.op_inputs[i]) grads.push_back(r.op >= 0);
    const signature s = all_broadcast(g.ops[i], 1);
    const std::string key = kernel_key(g.ops[i], s, mesh, grads);
    if (!measured.count(key))
      measured.emplace(key, tools::measure_kernel(tools::kernel_case{g.ops[i], s, grads, key, device_work(g.ops[i], s, mesh, 4)},
                                                  mesh, mesh_coord{}, reps));
    const kernel_entry& e = measured.at(key);
    kind_row& r = rows[e.op];
    r.ops += 1;
    r.fwd_s += e.forward_s;
    r.bwd_s += e.backward_s;
    r.fwd_flops += e.forward_flops;
    r.bwd_flops += e.backward_flops;
    r.bytes += e.bytes;
  }
  return rows;
}

void print_table(const std::string& spec, const std::map<std::string, kind_row>& rows) {
  double total = 0;
  for (const auto& [k, r] : rows) total += r.fwd_s + r.bwd_s;
  std::printf("\n%s: kernels %.1f ms (fp32, one core)\n", spec.c_str(), total * 1e3);
  std::printf("| op | ops | fwd ms | bwd ms | share | fwd GFLOP/s | bwd GFLOP/s | fwd GB/s |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& [k, r] : rows)
    std::printf("| %s | %d | %.2f | %.2f | %.0f %% | %.1f | %.1f | %.1f |\n", k.c_str(), r.ops, r.fwd_s * 1e3, r.bwd_s * 1e3,
                100 * (r.fwd_s + r.bwd_s) / total, r.fwd_s > 0 ? r.fwd_flops / r.fwd_s * 1e-9 : 0.0,
                r.bwd_s > 0 ? r.bwd_flops / r.bwd_s * 1e-9 : 0.0, r.fwd_s > 0 ? r.bytes / r.fwd_s * 1e-9 : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  std::vector<std::string> models;
  int reps = 7;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model" && i + 1 < argc) models.push_back(argv[++i]);
    else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (a == "--json") json = true;
    else {
      std::fprintf(stderr, "bench_op_profile: unknown option '%s'; use --model SPEC [--reps N] [--json]\n", a.c_str());
      MPI_Finalize();
      return 2;
    }
  }
  try {
    nlohmann::json out = nlohmann::json::array();
    for (const std::string& spec : models) {
      const auto rows = profile_model(spec, reps);
      if (!json) print_table(spec, rows);
      for (const auto& [k, r] : rows)
        out.push_back({{"model", spec}, {"op", k}, {"ops", r.ops}, {"fwd_s", r.fwd_s}, {"bwd_s", r.bwd_s},
                       {"fwd_flops", r.fwd_flops}, {"bwd_flops", r.bwd_flops}, {"fwd_bytes", r.bytes}});
    }
    if (json) std::printf("%s\n", out.dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_op_profile: %s\n", e.what());
    MPI_Finalize();
    return 1;
  }
  MPI_Finalize();
  return 0;
}
