// The boxing executor on real ranks: for every pair of nd-SBPs on the job's mesh, the shard
// after running the priced path is exactly the target layout's shard of the same global tensor,
// and each rank sent exactly the bytes the path was priced with.
#include <catch2/catch_test_macros.hpp>

#include <cstdint>
#include <vector>

#include "autoddl/backend/cpu.hpp"
#include "autoddl/backend/mpi.hpp"
#include "autoddl/runtime/boxing.hpp"
#include "../../laws/sbp/all_layouts.hpp"
#include "global_tensor.hpp"

using namespace autoddl;
using test::shard_of;
using test::value_at;

TEST_CASE("every boxing path runs exactly and sends the bytes it was priced with", "[mpi][runtime][boxing]") {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<mesh_shape> meshes{mesh_shape{size}};
  if (size == 4) meshes.push_back(mesh_shape{2, 2});
  for (const mesh_shape& m : meshes) {
    mpi::mpi_mesh_comm comm(m);
    cpu_device dev;
    const tensor_shape g{4 * 3, 2 * 4, 6};  // divisible by every mesh here along every dim
    const nd_sbp all_b = nd_sbp::filled(m.size(), B);
    for (const nd_sbp& from : test::all_nd_sbp(m.size(), g.rank()))
      for (const nd_sbp& to : test::all_nd_sbp(m.size(), g.rank())) {
        if (!divides(g, layout{from, m}) || !divides(g, layout{to, m})) continue;
        INFO(to_string(from) << " -> " << to_string(to) << " on " << to_string(m));
        boxing_path path = cheapest_boxing({from, to, m, g, 8});
        const std::int64_t before = comm.bytes_sent();
        const std::vector<double> shard = shard_of(g, from, comm);
        const buffer_t<cpu_device, double> got =
            run_boxing<double>(dev, comm, buffer_t<cpu_device, double>(shard.begin(), shard.end()), g, from, path);
        REQUIRE(comm.bytes_sent() - before == path.bytes_per_device());
        // settle any P in the target and compare with the whole tensor
        const buffer_t<cpu_device, double> whole =
            run_boxing<double>(dev, comm, got, g, to, cheapest_boxing({to, all_b, m, g, 8}));
        bool same = true;
        for (std::int64_t i = 0; i < g.elements(); ++i) same = same && whole[std::size_t(i)] == value_at(i);
        REQUIRE(same);
        if (!to.any_partial()) REQUIRE(std::vector<double>(got.begin(), got.end()) == shard_of(g, to, comm));
      }
  }
}
