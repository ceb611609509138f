// The boxing executor on real ranks: for every pair of nd-SBPs on the job's mesh, the shard
// after running the priced path is exactly the target layout's shard of the same global tensor,
// and each rank sent exactly the bytes the path was priced with.
#include <catch2/catch_test_macros.hpp>

#include <cstdint>
#include <vector>

#include "autoddl/backend/mpi.hpp"
#include "autoddl/backend/shard.hpp"
#include "autoddl/runtime/boxing.hpp"
#include "../../laws/sbp/all_layouts.hpp"

using namespace autoddl;

namespace {

double value_at(std::int64_t i) { return double((i * 7919) % 23) - 11; }

// This rank's shard of the global tensor under `l`. On P axes the value is split into integer
// addends: the device at coordinate 0 of every P axis takes the remainder.
std::vector<double> shard_of(const tensor_shape& g, const nd_sbp& l, const mpi::mpi_mesh_comm& c) {
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

}  // namespace

TEST_CASE("every boxing path runs exactly and sends the bytes it was priced with", "[mpi][runtime][boxing]") {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<mesh_shape> meshes{mesh_shape{size}};
  if (size == 4) meshes.push_back(mesh_shape{2, 2});
  for (const mesh_shape& m : meshes) {
    mpi::mpi_mesh_comm comm(m);
    const tensor_shape g{4 * 3, 2 * 4, 6};  // divisible by every mesh here along every dim
    const nd_sbp all_b = nd_sbp::filled(m.size(), B);
    for (const nd_sbp& from : test::all_nd_sbp(m.size(), g.rank()))
      for (const nd_sbp& to : test::all_nd_sbp(m.size(), g.rank())) {
        if (!divides(g, layout{from, m}) || !divides(g, layout{to, m})) continue;
        INFO(to_string(from) << " -> " << to_string(to) << " on " << to_string(m));
        boxing_path path = cheapest_boxing({from, to, m, g, 8});
        const std::int64_t before = comm.bytes_sent();
        std::vector<double> got = run_boxing<double>(comm, shard_of(g, from, comm), g, from, path);
        REQUIRE(comm.bytes_sent() - before == path.bytes_per_device());
        // settle any P in the target and compare with the whole tensor
        std::vector<double> whole = run_boxing<double>(comm, got, g, to, cheapest_boxing({to, all_b, m, g, 8}));
        bool same = true;
        for (std::int64_t i = 0; i < g.elements(); ++i) same = same && whole[std::size_t(i)] == value_at(i);
        REQUIRE(same);
        if (!to.any_partial()) REQUIRE(got == shard_of(g, to, comm));
      }
  }
}
