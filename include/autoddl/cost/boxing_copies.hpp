#pragma once
// Seconds of the local copies the executor makes around each boxing step (runtime/boxing.hpp,
// run_boxing_step), at the measured copy rate (cost/measured.hpp, copy_rate: alpha + bytes /
// bandwidth per copy; 0 when the profile has none). Per step, T = the group's bytes
// (boxing_step::group_bytes), n = devices on the axis; a zero-filled buffer counts as one copy
// of its size (allocation + fill is one pass over it, like the copy that fills a chunks_along
// destination):
//   S(d) -> B     the zeroed gather buffer of T (own chunk copied in) + concat_along of T
//   P -> B        nothing, or (count padded to n) the zeroed padded buffer of T, own values
//                 copied in, and the copy back: 2 T
//   P -> S(d)     chunks_along of T + the kept chunk T/n
//   S(d) -> S(e)  chunks_along of T/n + the receive buffer T/n + concat_along of T/n
//   B -> S(d)     chunk_of: T/n
//   B -> P        devices other than 0 zero-fill T (the slowest device is priced)
//   S(d) -> P     the zeroed gathered buffer of T + concat_along of T
#include "autoddl/cost/boxing_path.hpp"
#include "autoddl/cost/measured.hpp"
#include "autoddl/sbp/boxing.hpp"

namespace autoddl {

/// Copy seconds of one step (table above). Example: all-gather of T = 1 MB on 2 devices at
/// {1e-6 s, 1e10 B/s} copies twice: 2 * (1e-6 + 1e-4).
constexpr double step_copy_time(const boxing_step& s, const copy_rate& r) {
  const double t = double(s.group_bytes), n = double(s.group);
  switch (s.op) {
    case collective::all_gather: return 2 * r.time(t);
    case collective::all_reduce: {
      const std::int64_t unit = s.group * s.elem_bytes;
      return unit > 0 && s.group_bytes % unit != 0 ? 2 * r.time(t) : 0.0;
    }
    case collective::reduce_scatter: return r.time(t) + r.time(t / n);
    case collective::all_to_all: return 3 * r.time(t / n);
    case collective::local_slice: return r.time(t / n);
    case collective::local_partial: return s.from.is_broadcast() ? r.time(t) : 2 * r.time(t);
    case collective::none: return 0;
  }
  return 0;
}

/// Copy seconds of a whole path.
constexpr double path_copy_time(const boxing_path& p, const copy_rate& r) {
  double c = 0;
  for (const auto& s : p) c += step_copy_time(s, r);
  return c;
}

}  // namespace autoddl
