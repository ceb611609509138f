// bench_attention: the fused attention kernel (the default, FlashAttention-2's algorithm) against
// the unfused one (op_attrs::unfused_attention), forward + backward of one attention core on one
// rank in float: b = 1, heads 8, head size 64, causal, at sequence 512, 1024, 2048 and 4096 (or
// the lengths given). The two alternate round by round (interleaved.hpp); each is reported by its
// median and inter-quartile range, with the ratio of medians, and by the peak of the CPU
// device's counted bytes (peak_bytes_in_use: operands, output, what the kernels allocate inside)
// over one forward + backward. Run it with OPENBLAS_NUM_THREADS=1 for one core:
//   OPENBLAS_NUM_THREADS=1 build/benchmarks/bench_attention [512 1024 ...] [--rounds N] [--warmup N]
//   (--only fused|unfused runs one of them alone, for a profiler)
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "autoddl/backend/cpu.hpp"
#include "autoddl/backend/mpi.hpp"
#include "autoddl/ops/shapes.hpp"
#include "autoddl/runtime/op_kernels.hpp"
#include "interleaved.hpp"

using namespace autoddl;

namespace {

/// One attention core's operands on the CPU device, and a forward + backward of it.
struct attention_run {
  op_node op;
  kernel_context<float> ctx;
  cpu_device dev;
  std::vector<cpu_device::buffer<float>> operand;  // q, k, v, dO
  std::int64_t peak = 0;

  attention_run(std::int64_t seq, bool unfused) {
    const std::int64_t heads = 8, d = 64;
    op.name = unfused ? "unfused" : "fused";
    op.kind = op_kind::attention;
    op.attrs.heads = int(heads);
    op.attrs.causal = true;
    op.attrs.unfused_attention = unfused;
    op.inputs = {{1, seq, heads * d}, {1, seq, heads * d}, {1, seq, heads * d}};
    op.outputs = infer_outputs(op);
    ctx = make_kernel_context<float>(op, all_broadcast(op, 1), mesh_shape{1}, {}, 1, 1);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    for (int i = 0; i < 4; ++i) {
      operand.push_back(dev.alloc<float>(std::size_t(seq * heads * d)));
      for (float& x : operand.back()) x = u(rng);
    }
  }
  void step() {
    operands<float> in;
    for (int i = 0; i < 3; ++i) in.inputs.push_back(dev.view(std::as_const(operand[std::size_t(i)])));
    dev.reset_peak_bytes_in_use();
    const auto f = op_forward(dev, ctx, in);
    const auto g = op_backward(dev, ctx, in, f, dev.view(std::as_const(operand[3])));
    peak = dev.peak_bytes_in_use();
  }
};

}  // namespace

int main(int argc, char** argv) {
  (void)autoddl::mpi::init(&argc, &argv);
  const int rc = tools::guarded("bench_attention", [&] {
    std::vector<std::int64_t> seqs;
    int rounds = 7, warmup = 1;
    std::string only;
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--rounds" && i + 1 < argc) rounds = std::atoi(argv[++i]);
      else if (arg == "--warmup" && i + 1 < argc) warmup = std::atoi(argv[++i]);
      else if (arg == "--only" && i + 1 < argc) only = argv[++i];  // one kernel alone, for a profiler
      else if (arg.rfind("--", 0) != 0 && std::atoll(argv[i]) > 0) seqs.push_back(std::atoll(argv[i]));
      else throw error("unexpected argument '" + arg + "'; use [seq ...] [--rounds N] [--warmup N] [--only fused|unfused]");
    }
    if (rounds < 5 || warmup < 0) throw error("give --rounds >= 5 and --warmup >= 0");
    if (seqs.empty()) seqs = {512, 1024, 2048, 4096};
    std::printf("attention core fwd+bwd, float, b 1, heads 8, d 64, causal, one rank; %d interleaved rounds after %d warm-up\n",
                rounds, warmup);
    std::printf("%6s  %22s  %22s  %7s  %8s  %12s  %12s\n", "seq", "fused ms (IQR)", "unfused ms (IQR)", "ratio", "ordered",
                "fused peak", "unfused peak");
    for (const std::int64_t seq : seqs) {
      attention_run fused(seq, false), unfused(seq, true);
      const auto seconds = bench::time_interleaved(2, warmup, rounds, [&](std::size_t which, int) {
        if (only.empty() || only == (which == 0 ? "fused" : "unfused")) (which == 0 ? fused : unfused).step();
      });
      const bench::spread_summary f = bench::summarize(seconds[0]), u = bench::summarize(seconds[1]);
      std::printf("%6lld  %10.1f (%8.1f)  %10.1f (%8.1f)  %7.3f  %8s  %9.1f MiB  %9.1f MiB\n", static_cast<long long>(seq),
                  f.median * 1e3, f.iqr() * 1e3, u.median * 1e3, u.iqr() * 1e3, f.median / u.median,
                  bench::separated(f, u) ? "yes" : "no", double(fused.peak) / (1 << 20), double(unfused.peak) / (1 << 20));
    }
  });
  MPI_Finalize();
  return rc;
}
