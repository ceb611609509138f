#include <catch2/catch_test_macros.hpp>

#include <set>

#include "autoddl/cost/hardware.hpp"
#include "autoddl/mesh.hpp"

using namespace autoddl;

namespace {
const link fast{1e-6, 100e9, "fast"};
const link slow{5e-6, 10e9, "slow"};
}  // namespace

TEST_CASE("ranks are row-major with axis 0 outermost", "[mesh]") {
  device_mesh m = uniform_mesh({2, 4}, fast);
  CHECK(m.coords(5) == mesh_coord{{1, 1}, 2});
  CHECK(m.coords(3) == mesh_coord{{0, 3}, 2});
  CHECK(m.rank(mesh_coord{{1, 2}, 2}) == 6);
  device_mesh m3 = uniform_mesh({2, 3, 4}, fast);
  // ((c0*3)+c1)*4+c2
  CHECK(m3.rank(mesh_coord{{1, 2, 3}, 3}) == ((1 * 3) + 2) * 4 + 3);
  CHECK(m3.coords(17) == mesh_coord{{1, 1, 1}, 3});
}

TEST_CASE("coordinates and ranks round-trip on meshes of 2 to 64 devices", "[mesh]") {
  for (mesh_shape s : {mesh_shape{2}, mesh_shape{7}, mesh_shape{3, 5}, mesh_shape{2, 3, 4}, mesh_shape{4, 16},
                       mesh_shape{2, 2, 2, 8}}) {
    device_mesh m = uniform_mesh(s, fast);
    for (std::int64_t r = 0; r < m.devices(); ++r) CHECK(m.rank(m.coords(r)) == r);
  }
}

TEST_CASE("the group along an axis holds the ranks that differ only on that axis", "[mesh]") {
  device_mesh m = uniform_mesh({2, 4}, fast);
  auto g0 = m.axis_group(5, 0);
  REQUIRE(g0.size() == 2);
  CHECK(g0[0] == 1);
  CHECK(g0[1] == 5);
  auto g1 = m.axis_group(5, 1);
  REQUIRE(g1.size() == 4);
  CHECK(std::set<int>(g1.begin(), g1.end()) == std::set<int>{4, 5, 6, 7});
  CHECK(g1[2] == 6);
  // every rank is in exactly one group per axis, and group_index tells the groups apart
  device_mesh m35 = uniform_mesh({3, 5}, fast);
  for (int axis = 0; axis < 2; ++axis) {
    std::set<std::int64_t> groups;
    for (std::int64_t r = 0; r < m35.devices(); ++r) {
      groups.insert(m35.group_index(r, axis));
      auto g = m35.axis_group(r, axis);
      CHECK(g[m35.coords(r)[axis]] == r);
      for (int x : g) CHECK(m35.group_index(x, axis) == m35.group_index(r, axis));
    }
    CHECK(std::int64_t(groups.size()) == m35.devices() / m35.shape[axis]);
  }
}

TEST_CASE("ranks, axes and coordinates off the mesh are rejected with the mesh named", "[mesh]") {
  device_mesh m = uniform_mesh({2, 4}, fast);
  CHECK_THROWS_AS(m.coords(8), layout_error);
  CHECK_THROWS_AS(m.coords(-1), layout_error);
  CHECK_THROWS_AS(m.axis_group(0, 2), layout_error);
  CHECK_THROWS_AS(m.rank(mesh_coord{{2, 0}, 2}), layout_error);
  try {
    (void)m.coords(9);
    FAIL("no throw");
  } catch (const layout_error& e) {
    CHECK(std::string(e.what()) == "rank 9 is not on mesh 2x4; ranks are 0..7");
  }
  CHECK_THROWS_AS(checked(link{1e-6, 0, "zero"}), error);
  CHECK_THROWS_AS(checked(link{-1, 1e9, "neg"}), error);
}

TEST_CASE("innermost axes whose product divides devices per node run on the intra-node link", "[mesh][hardware]") {
  CHECK(intra_node_axes({2, 4}, 8) == 0b11u);
  CHECK(intra_node_axes({2, 8}, 8) == 0b10u);
  CHECK(intra_node_axes({4, 3}, 8) == 0b00u);  // 3 does not divide 8
  CHECK(intra_node_axes({8}, 1) == 0u);        // Piz Daint: one device per node
  CHECK(intra_node_axes({16}, 8) == 0u);
  CHECK(intra_node_axes({4, 2, 2}, 8) == 0b110u);
  CHECK(intra_node_axes({3, 2}, 6) == 0b11u);
  CHECK_THROWS_AS(intra_node_axes({2}, 0), error);
  hardware hw;
  hw.devices_per_node = 8;
  hw.intra_node = fast;
  hw.inter_node = slow;
  device_mesh m = make_device_mesh({4, 8}, hw);
  CHECK(m.axis_link(1) == fast);
  CHECK(m.axis_link(0) == slow);
  device_mesh m1 = make_device_mesh({64}, hw);
  CHECK(m1.axis_link(0) == slow);
}
