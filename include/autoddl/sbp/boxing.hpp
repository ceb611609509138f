#pragma once
// Boxing on one mesh axis: converting a tensor's SBP on that axis, for an axis of n devices and
// a tensor whose part held by the axis group is T bytes. The
// all-reduce / all-gather / reduce-scatter factors are the bus-bandwidth factors documented in
// nccl-tests PERFORMANCE.md, and the ring step counts follow Thakur, Rabenseifner & Gropp (2005).
//
//   S(d) -> B     all-gather       (n-1)/n   * T   n-1 steps
//   P    -> B     all-reduce      2(n-1)/n   * T   2(n-1) steps
//   P    -> S(d)  reduce-scatter   (n-1)/n   * T   n-1 steps
//   S(d) -> S(e)  all-to-all       (n-1)/n^2 * T   n-1 steps
//   B    -> S(d)  local slice      0
//   B, S -> P     local (zero-fill on all but one device / keep shard, zero elsewhere)  0
//   x    -> x     identity         0
#include <cstdint>
#include <string_view>

#include "autoddl/sbp/mesh_shape.hpp"
#include "autoddl/sbp/nd_sbp.hpp"
#include "autoddl/sbp/sbp.hpp"

namespace autoddl {

enum class collective : std::uint8_t {
  none,            ///< identity
  local_slice,     ///< B -> S(d): keep one's own chunk
  local_partial,   ///< B -> P or S(d) -> P: no communication, zero-fill
  all_gather,      ///< S(d) -> B
  all_reduce,      ///< P -> B
  reduce_scatter,  ///< P -> S(d)
  all_to_all,      ///< S(d) -> S(e), d != e
};

constexpr std::string_view to_string(collective c) {
  switch (c) {
    case collective::none: return "identity";
    case collective::local_slice: return "local-slice";
    case collective::local_partial: return "local-partial";
    case collective::all_gather: return "all-gather";
    case collective::all_reduce: return "all-reduce";
    case collective::reduce_scatter: return "reduce-scatter";
    case collective::all_to_all: return "all-to-all";
  }
  return "?";
}

/// True for the collectives that move bytes between devices.
constexpr bool communicates(collective c) {
  return c == collective::all_gather || c == collective::all_reduce || c == collective::reduce_scatter ||
         c == collective::all_to_all;
}

/// The collective that converts `from` to `to` on one mesh axis.
constexpr collective classify(sbp from, sbp to) {
  if (from == to) return collective::none;
  if (to.is_partial()) return collective::local_partial;
  if (from.is_broadcast()) return collective::local_slice;  // to is S(d)
  if (from.is_partial()) return to.is_broadcast() ? collective::all_reduce : collective::reduce_scatter;
  // from is S(d)
  return to.is_broadcast() ? collective::all_gather : collective::all_to_all;
}

/// Bytes-per-device factor as a fraction num/den of T on an axis of n devices.
struct byte_factor {
  std::int64_t num = 0;
  std::int64_t den = 1;
  /// factor * T, rounded down (T is always a multiple of n^2 for even shards of our sizes;
  /// the rounding only matters for odd byte counts and is the same in executor and model).
  constexpr std::int64_t of(std::int64_t bytes) const { return num == 0 ? 0 : bytes * num / den; }
  constexpr double value() const { return double(num) / double(den); }
};

constexpr byte_factor bytes_factor(collective c, std::int64_t n) {
  switch (c) {
    case collective::all_gather:
    case collective::reduce_scatter: return {n - 1, n};
    case collective::all_reduce: return {2 * (n - 1), n};
    case collective::all_to_all: return {n - 1, n * n};
    default: return {0, 1};
  }
}

/// Ring steps (latency terms) of the collective on n devices.
constexpr std::int64_t ring_steps(collective c, std::int64_t n) {
  switch (c) {
    case collective::all_gather:
    case collective::reduce_scatter:
    case collective::all_to_all: return n - 1;
    case collective::all_reduce: return 2 * (n - 1);
    default: return 0;
  }
}

/// One single-axis boxing step, fully described: what the executor runs and the model prices.
struct boxing_step {
  int axis = 0;
  sbp from;
  sbp to;
  collective op = collective::none;
  std::int64_t group = 1;          ///< devices on the axis (n)
  std::int64_t group_bytes = 0;    ///< T: bytes of the tensor part held by the axis group
  std::int64_t elem_bytes = 1;     ///< bytes per element: the ring's unit of chunking
  /// Bytes each device sends. The ring splits its buffer into n equal chunks of whole elements;
  /// an all-reduce of a count not divisible by n runs on a buffer zero-padded up to the next
  /// multiple (splits always divide, so only all-reduce pads). Example: 10 fp32 over 4 ranks
  /// pads to 12: 2*3/4*48 = 72 bytes.
  constexpr std::int64_t bytes_per_device() const {
    std::int64_t t = group_bytes;
    const std::int64_t unit = group * elem_bytes;
    if (op == collective::all_reduce && unit > 0 && t % unit != 0) t = (t / unit + 1) * unit;
    return bytes_factor(op, group).of(t);
  }
  constexpr std::int64_t steps() const { return ring_steps(op, group); }
  friend constexpr bool operator==(const boxing_step&, const boxing_step&) = default;
};

/// Whether changing axis `axis` of `state` to `to` is one exact single-axis collective.
/// Several axes splitting one dim nest with the outer axis most significant, so the step is
/// exact only when no inner axis (j > axis) splits a dim that the step splits or gathers.
/// Example: [S(0),S(0)] -> [S(0),B] is an all-gather on axis 1; [S(0),S(0)] -> [B,S(0)] is not
/// single-axis (device (a,b) would need rows held across axis 1) and takes a longer path.
constexpr bool single_axis_step_exact(const nd_sbp& state, int axis, sbp to) {
  sbp from = state[axis];
  for (int j = axis + 1; j < state.size(); ++j) {
    sbp o = state[j];
    if (!o.is_split()) continue;
    if ((from.is_split() && from.dim == o.dim) || (to.is_split() && to.dim == o.dim)) return false;
  }
  return true;
}

/// T of the table above: bytes of the tensor part held by the group of devices along `axis`
/// in `state`, for a tensor of `total_bytes` (axes other than `axis` that split shrink it).
constexpr std::int64_t group_bytes(const nd_sbp& state, const mesh_shape& mesh, int axis, std::int64_t total_bytes) {
  std::int64_t t = total_bytes;
  for (int j = 0; j < state.size(); ++j)
    if (j != axis && state[j].is_split()) t /= mesh[j];
  return t;
}

/// The single-axis step from `state` on `axis` to `to`, priced by bytes.
constexpr boxing_step make_step(const nd_sbp& state, const mesh_shape& mesh, int axis, sbp to,
                                std::int64_t total_bytes, std::int64_t elem_bytes = 1) {
  return boxing_step{axis, state[axis], to, classify(state[axis], to), mesh[axis],
                     group_bytes(state, mesh, axis, total_bytes), elem_bytes};
}

}  // namespace autoddl
