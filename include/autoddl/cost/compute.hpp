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

}  // namespace autoddl
