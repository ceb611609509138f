#pragma once
// autoddl-calibrate --model: the measured sections of a profile (cost/measured.hpp).
// - Kernels: every distinct kernel (ops/kernel_key.hpp) that any candidate signature of the
//   models' ops runs on this mesh (signatures(op, mesh), the planner's own candidates), run
//   forward (make_kernel_context + op_forward, as the trainer does per step) and backward
//   (op_backward) on the cpu_device with every rank running the same kernel at once; a barrier
//   before each measurement, the max over ranks per rep, the median over reps.
// - Copies: runtime/boxing.hpp's chunks_along and concat_along on 16 KiB..16 MiB; seconds =
//   alpha + bytes / bandwidth fitted on relative residuals (fit_kernel_time with no FLOPs).
// - Optimizer: the cpu_device's sgd_momentum and adam over 1 Ki..4 Mi elements, fitted likewise.
#include <algorithm>
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

/// Seconds of `f` with every rank running it at once: per rep a barrier, the time, the max over
/// ranks; the median over `reps` reps (one unmeasured warm-up first).
inline double busy_time(const std::function<void()>& f, int reps) {
  f();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    f();
    double local = MPI_Wtime() - t0, worst = 0;
    MPI_Allreduce(&local, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    t.push_back(worst);
  }
  return median_of(t);
}
}  // namespace detail

/// Forward and backward seconds of one kernel on this rank's coordinates (the trainer's calls).
inline kernel_entry measure_kernel(const kernel_case& c, const mesh_shape& mesh, const mesh_coord& coord, int reps) {
  cpu_device dev;
  const op_shards sh = make_op_shards(c.op, c.sig, mesh, coord);
  std::vector<std::vector<float>> ins, prs;
  std::vector<std::int64_t> idx;
  for (std::size_t i = 0; i < sh.inputs.size(); ++i) {
    const std::size_t n = std::size_t(sh.inputs[i].local.elements());
    if (is_index_input(c.op.kind, i)) idx.assign(n, 0);  // token 0, label 0: valid everywhere
    ins.emplace_back(is_index_input(c.op.kind, i) ? 0 : n, 0.25f);
  }
  for (const auto& s : sh.params) prs.emplace_back(std::size_t(s.local.elements()), 0.01f);
  operands<float> in;
  for (const auto& v : ins) in.inputs.push_back(v);
  for (const auto& v : prs) in.params.push_back(v);
  in.indices = idx;
  std::vector<float> dy(std::size_t(sh.outputs[0].local.elements()), 0.1f);
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
    std::vector<float> src(std::size_t(elems), 1.0f);
    volatile float sink = 0;
    rows.push_back({0, double(bytes), detail::busy_time([&] { sink = sink + autoddl::detail::chunks_along<float>(src, s, 1, 2)[0]; }, reps)});
    rows.push_back({0, double(bytes), detail::busy_time([&] { sink = sink + autoddl::detail::concat_along<float>(src, tensor_shape{2, elems / 4}, 1, 2)[0]; }, reps)});
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
                    }, reps)});
  }
  const kernel_fit f = fit_kernel_time(rows);
  return {f.a, f.per_byte > 0 ? f.per_byte : 1e-12};
}

}  // namespace autoddl::tools
