#pragma once
// A hardware profile: devices (peak rates, memory) and the two link levels between them, and the
// rule that turns a mesh into a device_mesh. Profiles are JSON files (data/hardware/, see
// hardware_io.hpp and docs/cost-model.md); the struct itself needs no JSON and is constexpr.
#include <array>
#include <string>
#include <vector>

#include "autoddl/cost/dtype.hpp"
#include "autoddl/cost/measured.hpp"
#include "autoddl/cost/step_time.hpp"
#include "autoddl/mesh/device_mesh.hpp"
#include "autoddl/mesh/link.hpp"
#include "autoddl/text.hpp"
#include "autoddl/error.hpp"
#include "autoddl/sbp/mesh_shape.hpp"

namespace autoddl {

struct device_spec {
  std::string name;
  /// Peak FLOP/s per dtype (index = dtype); 0 = the device has no such arithmetic.
  std::array<double, dtype_count> peak_flops{};
  /// Achievable fraction of peak per work_kind (index = work_kind), in (0, 1].
  std::array<double, work_kind_count> efficiency{1, 1, 1, 1};
  double memory_bytes = 0;      ///< capacity of one device
  double memory_bandwidth = 0;  ///< bytes/s of streaming access (element-wise work)

  constexpr double peak(dtype t) const { return peak_flops[std::size_t(t)]; }
  constexpr double efficiency_of(work_kind k) const { return efficiency[std::size_t(k)]; }
};

struct hardware {
  std::string name;
  std::string description;
  std::vector<std::string> sources;  ///< public figures the numbers come from
  /// The CPU a calibrated profile was measured on (autoddl-calibrate writes /proc/cpuinfo's
  /// "model name"); empty: not recorded (the datasheet presets, older profiles).
  std::string cpu_model;
  int devices_per_node = 1;
  link intra_node{};  ///< between devices of one node (NVLink, shared memory)
  link inter_node{};  ///< between nodes, per device (node injection bandwidth / devices_per_node)
  device_spec device;
  /// What the executor on this hardware overlaps, so the planner prices what runs: the CPU
  /// trainer's MPI ring collectives block inside backward (none); NCCL executors synchronise
  /// gradients on a side stream while backward computes (grad_sync_with_backward).
  overlap_rule overlap = overlap_rule::grad_sync_with_backward;
  /// Optional measured kernel times, copy rate and optimizer rates (cost/measured.hpp); empty
  /// in the GPU presets, filled by autoddl-calibrate --model for CPU ranks.
  measured_costs measured{};
};

/// Which mesh axes run over the intra-node link, as a bit mask (bit i = axis i).
/// Rule: walking from the innermost axis outwards, an axis is intra-node while the product of
/// the extents taken so far (this one included) divides devices_per_node; the first axis that
/// breaks it and every axis outside it are inter-node. Ranks are placed row-major (axis 0
/// outermost), so these innermost axes are exactly the ones whose groups stay in one node.
///   2x4 on 8 devices per node: both intra.  2x8 on 8: axis 1 intra, axis 0 inter.
///   4x3 on 8: axis 1 (3 does not divide 8) and axis 0 inter.  8 on 1 (Piz Daint): inter.
constexpr unsigned intra_node_axes(const mesh_shape& shape, int devices_per_node) {
  if (devices_per_node < 1)
    detail::fail<error>("devices_per_node is " + detail::itos(devices_per_node) + "; give a positive count");
  unsigned mask = 0;
  std::int64_t p = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    p *= shape[i];
    if (devices_per_node % p != 0) break;
    mask |= 1u << unsigned(i);
  }
  return mask;
}

/// The mesh `shape` on `hw`, each axis given its link by intra_node_axes().
constexpr device_mesh make_device_mesh(const mesh_shape& shape, const hardware& hw) {
  const unsigned intra = intra_node_axes(shape, hw.devices_per_node);
  device_mesh m{shape, {}};
  for (int i = 0; i < shape.size(); ++i)
    m.links[std::size_t(i)] = checked((intra >> unsigned(i)) & 1u ? hw.intra_node : hw.inter_node);
  return m;
}

}  // namespace autoddl
