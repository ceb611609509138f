#pragma once
// A deterministic global tensor of small integers and any rank's shard of it under an nd-SBP,
// for the MPI boxing tests: values stay exact in double through any sum of addends.
#include <cstdint>
#include <vector>

#include "autoddl/backend/mpi.hpp"
#include "autoddl/backend/shard.hpp"

namespace autoddl::test {

inline double value_at(std::int64_t i) { return double((i * 7919) % 23) - 11; }

// This rank's shard of the global tensor under `l`. On P axes the value is split into integer
// addends: the device at coordinate 0 of every P axis takes the remainder.
inline std::vector<double> shard_of(const tensor_shape& g, const nd_sbp& l, const mpi::mpi_mesh_comm& c) {
  const mesh_shape& m = c.shape();
  shard_info s = make_shard(g, l, m, c.coords());
  std::vector<double> out(std::size_t(s.local.elements()));
  int p_members = 1, my_p_index = 0;
  for (int a = 0; a < m.size(); ++a)
    if (l[a].is_partial()) {
      my_p_index = my_p_index * m[a] + c.coords()[a];
      p_members *= m[a];
    }
  for (std::int64_t k = 0; k < s.local.elements(); ++k) {
    std::int64_t rest = k, gi = 0;
    std::int64_t idx[max_tensor_rank]{};
    for (int d = s.local.rank() - 1; d >= 0; --d) {
      idx[d] = rest % s.local[d] + s.offset[std::size_t(d)];
      rest /= s.local[d];
    }
    for (int d = 0; d < g.rank(); ++d) gi = gi * g[d] + idx[d];
    // P members other than the first hold small integer noise; the first holds the rest
    auto noise = [&](int member) { return double((gi + 3 * member) % 5) - 2; };
    double v = value_at(gi);
    if (my_p_index == 0)
      for (int j = 1; j < p_members; ++j) v -= noise(j);
    out[std::size_t(k)] = my_p_index == 0 ? v : noise(my_p_index);
  }
  return out;
}

}  // namespace autoddl::test
