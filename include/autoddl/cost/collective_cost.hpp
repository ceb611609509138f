#pragma once
// Alpha-beta time of the ring collectives the executor runs (backend/mpi/ring_comm.hpp), and of nd
// boxing paths. Sources:
//   - ring all-gather / reduce-scatter: (n-1) alpha + (n-1)/n * T / beta; ring all-reduce as
//     reduce-scatter + all-gather: 2(n-1) alpha + 2(n-1)/n * T / beta
//     (Thakur, Rabenseifner & Gropp 2005, "Optimization of collective communication operations
//     in MPICH", IJHPCA 19(1); Patarasuk & Yuan 2009 for the all-reduce);
//   - pairwise-exchange all-to-all: (n-1) alpha + (n-1)/n * (T/n) / beta, each device sending
//     one T/n^2 block per step (Thakur et al. 2005);
//   - the byte factors are nccl-tests PERFORMANCE.md's bus-bandwidth factors (bytes_factor in
//     sbp/boxing.hpp), so the bytes priced are the bytes the executor counts.
//   - the reduction: gamma * (n-1)/n * T for reduce-scatter and all-reduce (each device adds
//     n-1 received chunks of T/n; Thakur et al. 2005's gamma term), with gamma from the link
//     (0 in the GPU presets, measured for CPU ranks).
//   - the optional second regime of a link (mesh/link.hpp): bytes of a buffer beyond
//     large_bytes move at beta_large and are reduced at gamma_large. It is not from a paper: it
//     follows the measured cache cliff of CPU ranks (docs/cost-model.md) and is fitted by
//     calibration (cost/calibration.hpp).
#include <cstdint>

#include "autoddl/index.hpp"
#include "autoddl/cost/boxing_path.hpp"
#include "autoddl/mesh/device_mesh.hpp"
#include "autoddl/mesh/link.hpp"
#include "autoddl/sbp/boxing.hpp"

namespace autoddl {

/// Bytes each device reduces in `c`: (n-1)/n * T for reduce-scatter and all-reduce, else 0.
constexpr std::int64_t reduced_bytes(collective c, std::int64_t n, std::int64_t group_bytes) {
  if (c != collective::reduce_scatter && c != collective::all_reduce) return 0;
  return bytes_factor(collective::reduce_scatter, n).of(group_bytes);
}

/// Seconds of collective `c` on an axis of `n` devices whose group holds `group_bytes` (T):
/// ring_steps(c, n) * alpha + bytes_factor(c, n).of(T) / beta + reduced_bytes(c, n, T) * gamma,
/// with the bytes beyond l.large_bytes of T priced in the link's second regime if it has one
/// (link::time). Local steps cost 0.
///   collective_time(all_reduce, 4, 1 MiB, {1e-5, 1e9}) == 6e-5 + 1.5 MiB / 1e9.
constexpr double collective_time(collective c, std::int64_t n, std::int64_t group_bytes, const link& l) {
  if (!communicates(c) || n <= 1) return 0;
  return l.time(double(ring_steps(c, n)), double(bytes_factor(c, n).of(group_bytes)),
                double(reduced_bytes(c, n, group_bytes)), double(group_bytes));
}

/// The bytes the executor's buffer for step `s` holds: T, except an all-reduce of a count not
/// divisible by n, which runs on a buffer zero-padded to the next multiple of n elements
/// (runtime/boxing.hpp; boxing_step::bytes_per_device counts the same). 10 fp32 on 4: 48.
constexpr std::int64_t executed_group_bytes(const boxing_step& s) {
  const std::int64_t unit = s.group * s.elem_bytes;
  if (s.op == collective::all_reduce && unit > 0 && s.group_bytes % unit != 0) return (s.group_bytes / unit + 1) * unit;
  return s.group_bytes;
}

/// One boxing step priced on the link of its axis, on the (padded) bytes it sends.
constexpr double step_time(const boxing_step& s, const device_mesh& m) {
  return collective_time(s.op, s.group, executed_group_bytes(s), m.axis_link(s.axis));
}

/// Step cost for cheapest_boxing: seconds under the alpha-beta model on `mesh`.
struct alpha_beta_cost {
  device_mesh mesh;
  constexpr double operator()(const boxing_step& s) const { return step_time(s, mesh); }
};

/// `p` with every reduce-scatter P -> S(d) directly followed by the all-gather S(d) -> B on the
/// same axis replaced by one all-reduce P -> B. Ring all-reduce is that very pair (Thakur et al.
/// 2005; same steps and bytes), so the cost is unchanged; the search finds either form (their
/// prices differ only by rounding) and this names the collective once.
constexpr boxing_path merge_ring_all_reduce(const boxing_path& p, const device_mesh& mesh) {
  boxing_path out;
  for (int i = 0; i < p.size(); ++i) {
    const boxing_step& s = p[i];
    if (i + 1 < p.size()) {
      const boxing_step& t = p[i + 1];
      if (s.op == collective::reduce_scatter && t.op == collective::all_gather && s.axis == t.axis &&
          s.to == t.from && s.group_bytes == t.group_bytes) {
        out.push_back(boxing_step{s.axis, s.from, t.to, collective::all_reduce, s.group, s.group_bytes, s.elem_bytes});
        ++i;
        continue;
      }
    }
    out.push_back(s);
  }
  out.cost = 0;
  for (const auto& s : out) out.cost += step_time(s, mesh);
  return out;
}

/// The path the executor runs for `req` and its time in seconds (path.cost).
/// @pre req.mesh == mesh.shape (else layout_error).
///   boxing_cost({{P,P},{B,B},{2,4},{1024,1024},4}, dgx) runs reduce-scatter on axis 1,
///   all-reduce on axis 0, all-gather on axis 1.
constexpr boxing_path boxing_cost(const boxing_request& req, const device_mesh& mesh) {
  if (!(req.mesh == mesh.shape))
    detail::fail<layout_error>("boxing on mesh " + to_string(req.mesh) + " priced on a device mesh " +
                               to_string(mesh.shape) + "; build the device_mesh for the same mesh");
  return merge_ring_all_reduce(cheapest_boxing(req, alpha_beta_cost{mesh}), mesh);
}

/// Seconds of a path already chosen (e.g. priced on another mesh's links).
constexpr double path_time(const boxing_path& p, const device_mesh& mesh) {
  double t = 0;
  for (const auto& s : p) t += step_time(s, mesh);
  return t;
}

/// Path p run on elements of `elem_bytes` bytes instead of its own (the same collectives on the
/// same elements: gradient sums kept in fp32 beside a 16-bit model are boxed as fp32), its bytes
/// scaled by the ratio and its cost on `mesh`'s links.
///   with_element_bytes(an all-reduce of 96 bf16 bytes on 2 devices, 4, m): of 192 bytes, 192 sent.
constexpr boxing_path with_element_bytes(const boxing_path& p, std::int64_t elem_bytes, const device_mesh& mesh) {
  boxing_path out;
  for (boxing_step s : p) {
    s.group_bytes = s.group_bytes / s.elem_bytes * elem_bytes;
    s.elem_bytes = elem_bytes;
    out.push_back(s);
    out.cost += step_time(s, mesh);
  }
  return out;
}

}  // namespace autoddl
