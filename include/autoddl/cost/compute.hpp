#pragma once
// Compute time of one device. Rule (one, for every work kind):
//   compute_time(flops, kind, t, dev) = flops / (peak[t] * efficiency[kind])
// and element-wise work, which is memory bound, is priced by the roofline
// (Williams, Waterman & Patterson 2009, "Roofline", CACM 52(4)):
//   elementwise_time(flops, bytes, t, dev) = max(compute_time(flops, elementwise, t, dev),
//                                                bytes / memory_bandwidth)
// Peaks are vendor datasheet figures (dense, no sparsity) or the calibrated GEMM rate; the
// efficiencies are the achievable fractions the profile states (docs/cost-model.md).
#include <string>

#include "autoddl/cost/dtype.hpp"
#include "autoddl/cost/hardware.hpp"
#include "autoddl/error.hpp"

namespace autoddl {

/// @pre dev has a positive peak for `t` (else error naming the device and dtype).
constexpr double compute_time(double flops, work_kind kind, dtype t, const device_spec& dev) {
  const double peak = dev.peak(t);
  if (!(peak > 0))
    detail::fail<error>("device '" + dev.name + "' has no " + std::string(to_string(t)) +
                        " peak in its profile; price the work in a dtype it lists, or add peak_flops." +
                        std::string(to_string(t)));
  const double eff = dev.efficiency_of(kind);
  if (!(eff > 0))
    detail::fail<error>("device '" + dev.name + "' has efficiency." + std::string(to_string(kind)) + " <= 0; give a value in (0, 1]");
  return flops / (peak * eff);
}

/// Seconds to stream `bytes` through device memory.
constexpr double memory_time(double bytes, const device_spec& dev) {
  if (!(dev.memory_bandwidth > 0))
    detail::fail<error>("device '" + dev.name + "' has memory_bandwidth <= 0; give bytes per second");
  return bytes / dev.memory_bandwidth;
}

/// Roofline time of element-wise work reading and writing `bytes`.
constexpr double elementwise_time(double flops, double bytes, dtype t, const device_spec& dev) {
  const double c = compute_time(flops, work_kind::elementwise, t, dev);
  const double m = memory_time(bytes, dev);
  return c > m ? c : m;
}

/// Seconds of one GEMM [m, k] x [k, n] run on its own: the roofline of its arithmetic intensity
/// (Williams, Waterman & Patterson 2009), its operands read and its result written once:
///   max(2 m k n / (peak[t] * efficiency.gemm), (m k + k n + m n) e / memory_bandwidth)
/// A GEMM whose intensity 2 m k n / ((m k + k n + m n) e) falls below the device's balance point
/// peak[t] * efficiency.gemm / memory_bandwidth (about 207 FLOP per byte for bf16 on dgx-h100)
/// runs at the memory's rate. Example (dgx-h100, bf16): m = 64, k = n = 4096: 2.1 GFLOP, 34.6 MB,
/// 10.3 us at the memory's rate against 3.1 us at the GEMM rate.
constexpr double gemm_roofline_time(double m, double k, double n, int elem_bytes, dtype t, const device_spec& dev) {
  const double c = compute_time(2.0 * m * k * n, work_kind::gemm, t, dev);
  const double b = memory_time((m * k + k * n + m * n) * elem_bytes, dev);
  return c > b ? c : b;
}

/// Forward seconds of `experts` SwiGLU experts run one at a time, each on `rows` rows of width
/// `hidden` with intermediate width `width`: per expert gate and up [rows, hidden] x [hidden,
/// width] and down [rows, width] x [width, hidden], each by gemm_roofline_time. Their backward is
/// twice this: the input and the weight gradient of each GEMM read and write operands of the
/// forward's sizes.
constexpr double expert_gemms_time(double experts, double rows, double hidden, double width, int elem_bytes, dtype t,
                                   const device_spec& dev) {
  const double up = gemm_roofline_time(rows, hidden, width, elem_bytes, t, dev);
  const double down = gemm_roofline_time(rows, width, hidden, elem_bytes, t, dev);
  return experts * (2.0 * up + down);
}

}  // namespace autoddl
