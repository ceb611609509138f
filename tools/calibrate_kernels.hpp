#pragma once
// autoddl-calibrate --model: the measured sections of a profile (cost/measured.hpp).
// - Kernels: every distinct kernel (ops/kernel_key.hpp) that any candidate signature of the
//   models' ops runs on this mesh (signatures(op, mesh), the planner's own candidates), run
//   forward (make_kernel_context + op_forward, as the trainer does per step) and backward
//   (op_backward) on the cpu_device with every rank running the same kernel at once; a barrier
//   before each measurement, the span from the first start to the last end per rep (busy_time),
//   the median over reps.
// - Copies: runtime/boxing.hpp's chunks_along and concat_along on 16 KiB..16 MiB; seconds =
//   alpha + bytes / bandwidth fitted on relative residuals (fit_kernel_time with no FLOPs).
// - Optimizer: the cpu_device's sgd_momentum and adam over 1 Ki..4 Mi elements, fitted likewise.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "autoddl/backend/cpu.hpp"
#include "autoddl/backend/mpi/c_api.hpp"
#include "autoddl/cost/measured.hpp"
#include "autoddl/models/zoo.hpp"
#include "autoddl/ops/kernel_key.hpp"
#include "autoddl/runtime/boxing.hpp"
#include "autoddl/runtime/data.hpp"
#include "autoddl/runtime/op_kernels.hpp"

namespace autoddl::tools {

/// One kernel to measure: the op, one candidate signature that runs it, and its key.
struct kernel_case {
  op_node op;
  signature sig;
  std::vector<bool> input_grads;
  std::string key;
  op_work work;
};

/// The distinct kernels of every candidate of every op of `specs` on `mesh`, in a fixed order
/// (the same on every rank).
inline std::vector<kernel_case> kernel_cases(const std::vector<std::string>& specs, const mesh_shape& mesh) {
  std::map<std::string, kernel_case> by_key;
  for (const auto& spec : specs) {
    const graph g = build_model(spec);
    for (std::size_t i = 0; i < g.ops.size(); ++i) {
      std::vector<bool> grads;
      for (const tensor_ref& r : g.op_inputs[i]) grads.push_back(r.op >= 0);
      for (const signature& s : signatures(g.ops[i], mesh)) {
        std::string key = kernel_key(g.ops[i], s, mesh, grads);
        if (by_key.count(key)) continue;
        by_key.emplace(key, kernel_case{g.ops[i], s, grads, key, device_work(g.ops[i], s, mesh, 4)});
      }
    }
  }
  std::vector<kernel_case> out;
  for (auto& [k, c] : by_key) out.push_back(std::move(c));
  return out;
}

namespace detail {
inline double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

/// Writes `bytes` of scratch memory, so that what runs next finds its operands where a step
/// leaves them rather than in the cache the previous rep warmed. A step runs other ops between
/// two runs of one kernel (kernels: 2 MiB, twice the per-core L2 of the EPYC this was tuned on)
/// and touches every parameter, gradient and optimizer state once between two updates of one
/// (optimizer: 64 MiB, past the shared L3 slice).
inline void evict_cache(std::size_t bytes) {
  static std::vector<float> scratch;
  static float round = 0;
  if (scratch.size() < bytes / sizeof(float)) scratch.resize(bytes / sizeof(float));
  round += 1;
  std::fill(scratch.begin(), scratch.begin() + std::ptrdiff_t(bytes / sizeof(float)), round);
}
constexpr std::size_t kernel_evict_bytes = std::size_t(2) << 20;
constexpr std::size_t optimizer_evict_bytes = std::size_t(64) << 20;

/// Whether every rank runs on this node, so that their steady clocks are one clock.
inline bool ranks_share_a_clock() {
  static const bool shared = [] {
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int here = 0, all = 0;
    MPI_Comm_size(node, &here);
    MPI_Comm_size(MPI_COMM_WORLD, &all);
    MPI_Comm_free(&node);
    return here == all;
  }();
  return shared;
}

/// Seconds of `f` with every rank running it at once: per rep `evict` bytes written
/// (evict_cache), a barrier, then the span from the first rank's start to the last rank's end
/// (ranks on one node; across nodes, the longest rank's own time); the median over `reps` reps
/// (one unmeasured warm-up first). The span, not each rank's own time, is what a step sees when
/// ranks share a core: with 4 ranks on 2 cores the scheduler runs two ranks' short kernels one
/// after the other, each rank's timer starting when it gets the core, and the per-rank time
/// priced 4-rank steps at half what they took.
inline double busy_time(const std::function<void()>& f, int reps, std::size_t evict = kernel_evict_bytes) {
  using clock = std::chrono::steady_clock;
  auto seconds = [](clock::time_point p) { return std::chrono::duration<double>(p.time_since_epoch()).count(); };
  f();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    evict_cache(evict);
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = seconds(clock::now());
    f();
    const double t1 = seconds(clock::now());
    double local[3] = {-t0, t1, t1 - t0}, worst[3] = {};
    MPI_Allreduce(local, worst, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    t.push_back(ranks_share_a_clock() ? worst[0] + worst[1] : worst[2]);
  }
  return median_of(t);
}
}  // namespace detail

/// Forward and backward seconds of one kernel on this rank's coordinates (the trainer's calls).
inline kernel_entry measure_kernel(const kernel_case& c, const mesh_shape& mesh, const mesh_coord& coord, int reps) {
  cpu_device dev;
  const op_shards sh = make_op_shards(c.op, c.sig, mesh, coord);
  // Values spread like a step's (uniform in [-1, 1), parameters at 0.02 of that, ids over the
  // whole vocabulary or class range): element-wise kernels with transcendental functions (GELU's
  // tanh) and gathers run up to 2x faster on a constant input than on these.
  auto values = [](std::size_t n, std::uint64_t stream, float scale) {
    std::vector<float> v(n);
    for (std::size_t k = 0; k < n; ++k) v[k] = scale * float(hashed_uniform(7, stream, k));
    return v;
  };
  std::vector<std::vector<float>> ins, prs;
  std::vector<std::int64_t> idx;
  for (std::size_t i = 0; i < sh.inputs.size(); ++i) {
    const std::size_t n = std::size_t(sh.inputs[i].local.elements());
    const bool index = is_index_input(c.op.kind, i);
    if (index) {
      const std::int64_t bound = c.op.kind == op_kind::embedding ? c.op.params[0][0] : c.op.inputs[0][c.op.inputs[0].rank() - 1];
      idx.resize(n);
      for (std::size_t k = 0; k < n; ++k) idx[k] = std::int64_t((hashed_uniform(7, 100, k) + 1) / 2 * double(bound)) % bound;
    }
    ins.push_back(index ? std::vector<float>{} : values(n, i, 1.0f));
  }
  for (std::size_t j = 0; j < sh.params.size(); ++j) prs.push_back(values(std::size_t(sh.params[j].local.elements()), 10 + j, 0.02f));
  operands<float> in;
  for (const auto& v : ins) in.inputs.push_back(v);
  for (const auto& v : prs) in.params.push_back(v);
  in.indices = idx;
  const std::vector<float> dy = values(std::size_t(sh.outputs[0].local.elements()), 20, 0.1f);
  auto context = [&] {
    kernel_context<float> ctx = make_kernel_context<float>(c.op, c.sig, mesh, coord, 1, 0);
    ctx.input_grad_wanted = c.input_grads;
    ctx.row_all_reduce = [](std::span<float>, reduce_kind) {};  // the collective is priced apart
    return ctx;
  };
  kernel_context<float> ctx = context();
  forward_result<cpu_device, float> fwd = op_forward(dev, ctx, in);
  kernel_entry e{std::string(to_string(c.op.kind)), c.key, dtype::fp32, c.work.fwd_flops, c.work.bwd_flops,
                 double(c.work.fwd_bytes_moved), 0, 0};
  e.forward_s = detail::busy_time([&] { fwd = op_forward(dev, ctx = context(), in); }, reps);
  e.backward_s = detail::busy_time([&] { (void)op_backward(dev, ctx, in, fwd, std::span<const float>(dy)); }, reps);
  return e;
}

/// alpha + bytes / bandwidth of the boxing pack/unpack copies.
inline copy_rate measure_copy_rate(int reps) {
  std::vector<autoddl::detail::fit_row> rows;
  for (std::int64_t bytes = std::int64_t(16) << 10; bytes <= std::int64_t(16) << 20; bytes *= 4) {
    const std::int64_t elems = bytes / 4;
    const tensor_shape s{2, elems / 2};
    cpu_device dev;
    std::vector<float> src(std::size_t(elems), 1.0f);
    const std::span<const float> in(src);
    volatile float sink = 0;
    rows.push_back({0, double(bytes), detail::busy_time([&] { sink = sink + autoddl::detail::chunks_along<float>(dev, in, s, 1, 2)[0]; }, reps)});
    rows.push_back({0, double(bytes), detail::busy_time([&] { sink = sink + autoddl::detail::concat_along<float>(dev, in, tensor_shape{2, elems / 4}, 1, 2)[0]; }, reps)});
  }
  const kernel_fit f = fit_kernel_time(rows);
  return {f.a, f.per_byte > 0 ? 1 / f.per_byte : 1e12};
}

/// alpha + elements * per_element of one optimizer update of a shard.
inline optimizer_rate measure_optimizer(bool adam, int reps) {
  std::vector<autoddl::detail::fit_row> rows;
  cpu_device dev;
  for (std::int64_t n = 1024; n <= (std::int64_t(4) << 20); n *= 8) {
    std::vector<float> g(std::size_t(n), 1e-3f), m(g.size(), 0.0f), v(g.size(), 0.0f), p(g.size(), 1.0f);
    optimizer_step os;
    rows.push_back({0, double(n), detail::busy_time([&] {
                      if (adam) dev.adam<float>(os, g, m, v, p);
                      else dev.sgd_momentum<float>(os, g, m, p);
                    }, reps, detail::optimizer_evict_bytes)});
  }
  const kernel_fit f = fit_kernel_time(rows);
  return {f.a, f.per_byte > 0 ? f.per_byte : 1e-12};
}

}  // namespace autoddl::tools
