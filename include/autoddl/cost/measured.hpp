#pragma once
// Measured costs of what an executor runs besides collectives (docs/cost-model.md, "Measured
// kernels"): a table of kernel times per distinct (op, local shapes, dtype), the copy rate of the
// boxing pack/unpack buffers, and the optimizer update per storage shard. autoddl-calibrate
// --model fills them on the machine at hand; the planner prices a kernel from the table where it
// has the entry, from a per-op-kind fit of the table (time = a + flops * c_f + bytes * c_b) where
// it has entries of that kind but not that shape, and by the analytical formula otherwise.
// Everything here is optional: a profile without it (the GPU presets) prices every
// kernel, copy and optimizer update analytically.
#include <cstdint>
#include <string>
#include <vector>

#include "autoddl/cost/dtype.hpp"

namespace autoddl {

/// One measured kernel: forward and backward seconds of op `op` (to_string(op_kind)) whose local
/// shapes and attributes are `key` (ops/kernel_key.hpp), in `type`; its FLOPs and forward bytes
/// moved (ops/work.hpp, per device) let the per-kind fit price shapes the table lacks.
///   {"linear", "linear bias=1 ... in=[64,512] ...", fp32, 3.4e7, 6.7e7, 1.3e6, 4.1e-4, 8.8e-4}
struct kernel_entry {
  std::string op;
  std::string key;
  dtype type = dtype::fp32;
  double forward_flops = 0, backward_flops = 0, bytes = 0;
  double forward_s = 0, backward_s = 0;
};

/// seconds = alpha + bytes / bandwidth for one pack or unpack copy of `bytes` (runtime/boxing.hpp's
/// chunks_along / concat_along, which allocate the destination and copy). bandwidth 0: not
/// measured, copies cost nothing (the GPU presets: NCCL executors pack inside their kernels).
struct copy_rate {
  double alpha = 0;
  double bandwidth = 0;
  constexpr bool measured() const { return bandwidth > 0; }
  constexpr double time(double bytes) const { return measured() && bytes > 0 ? alpha + bytes / bandwidth : 0.0; }
};

/// seconds = alpha + elements * per_element for one optimizer update of a storage shard.
struct optimizer_rate {
  double alpha = 0;
  double per_element = 0;
  constexpr bool measured() const { return per_element > 0; }
  constexpr double time(double elements) const { return alpha + elements * per_element; }
};

struct measured_costs {
  std::vector<kernel_entry> kernels;
  copy_rate copy{};
  optimizer_rate sgd_momentum{};
  optimizer_rate adam{};
};

/// time = a + flops * per_flop + bytes * per_byte, all coefficients >= 0.
struct kernel_fit {
  double a = 0, per_flop = 0, per_byte = 0;
  int samples = 0;
  constexpr double time(double flops, double bytes) const { return a + flops * per_flop + bytes * per_byte; }
};

namespace detail {

struct fit_row {
  double flops = 0, bytes = 0, seconds = 0;
};

/// Weighted least squares over the coefficients in `use` (bit 0: a, 1: flops, 2: bytes), on
/// relative residuals (weight 1/seconds^2, as cost/calibration.hpp fits links, so small and
/// large kernels weigh alike). Gaussian elimination on the at most 3x3 normal equations.
/// Returns ok == false when the system is singular or a coefficient comes out negative.
struct subset_fit {
  kernel_fit f;
  double error = 0;
  bool ok = false;
};
constexpr subset_fit fit_subset(const std::vector<fit_row>& rows, unsigned use) {
  int idx[3]{}, k = 0;
  for (int i = 0; i < 3; ++i)
    if (use >> unsigned(i) & 1u) idx[k++] = i;
  double m[3][4]{};
  for (const auto& r : rows) {
    const double x[3] = {1.0, r.flops, r.bytes};
    const double w = 1 / (r.seconds * r.seconds);
    for (int i = 0; i < k; ++i) {
      for (int j = 0; j < k; ++j) m[i][j] += w * x[idx[i]] * x[idx[j]];
      m[i][k] += w * x[idx[i]] * r.seconds;
    }
  }
  for (int c = 0; c < k; ++c) {
    int p = c;
    for (int r = c + 1; r < k; ++r)
      if ((m[r][c] < 0 ? -m[r][c] : m[r][c]) > (m[p][c] < 0 ? -m[p][c] : m[p][c])) p = r;
    if (!(m[p][c] != 0)) return {};
    for (int j = 0; j <= k; ++j) std::swap(m[c][j], m[p][j]);
    for (int r = 0; r < k; ++r) {
      if (r == c) continue;
      const double f = m[r][c] / m[c][c];
      for (int j = 0; j <= k; ++j) m[r][j] -= f * m[c][j];
    }
  }
  double coef[3]{};
  for (int i = 0; i < k; ++i) {
    coef[idx[i]] = m[i][k] / m[i][i];
    if (!(coef[idx[i]] >= 0)) return {};
  }
  subset_fit s{{coef[0], coef[1], coef[2], int(rows.size())}, 0, true};
  for (const auto& r : rows) {
    const double e = (s.f.time(r.flops, r.bytes) - r.seconds) / r.seconds;
    s.error += e * e;
  }
  return s;
}

}  // namespace detail

/// Non-negative relative least-squares fit of time = a + flops * c_f + bytes * c_b: every
/// non-empty subset of the three coefficients is fitted and the feasible one of least error kept
/// (an exhaustive non-negative least squares, 7 small systems). @pre every seconds > 0.
///   fit_kernel_time({{1e6, 0, 2e-5}, {2e6, 0, 3e-5}}) == {1e-5, 1e-11, 0}.
constexpr kernel_fit fit_kernel_time(const std::vector<detail::fit_row>& rows) {
  detail::subset_fit best;
  for (unsigned use = 1; use < 8; ++use) {
    const detail::subset_fit s = detail::fit_subset(rows, use);
    if (s.ok && (!best.ok || s.error < best.error - 1e-15 * best.error)) best = s;
  }
  best.f.samples = int(rows.size());
  return best.f;
}

}  // namespace autoddl
