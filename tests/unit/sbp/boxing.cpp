#include <catch2/catch_test_macros.hpp>

#include "autoddl/cost/boxing_path.hpp"

using namespace autoddl;

TEST_CASE("single-axis boxing follows the bus-bandwidth table of nccl-tests", "[sbp][boxing]") {
  CHECK(classify(S(0), B) == collective::all_gather);
  CHECK(classify(P, B) == collective::all_reduce);
  CHECK(classify(P, S(1)) == collective::reduce_scatter);
  CHECK(classify(S(0), S(1)) == collective::all_to_all);
  CHECK(classify(B, S(0)) == collective::local_slice);
  CHECK(classify(B, P) == collective::local_partial);
  CHECK(classify(S(0), P) == collective::local_partial);
  CHECK(classify(S(0), S(0)) == collective::none);
  // n = 4 devices, T = 1024 bytes
  CHECK(bytes_factor(collective::all_gather, 4).of(1024) == 768);
  CHECK(bytes_factor(collective::all_reduce, 4).of(1024) == 1536);
  CHECK(bytes_factor(collective::reduce_scatter, 4).of(1024) == 768);
  CHECK(bytes_factor(collective::all_to_all, 4).of(1024) == 192);
  CHECK(ring_steps(collective::all_reduce, 4) == 6);
  CHECK(ring_steps(collective::all_to_all, 4) == 3);
  CHECK(ring_steps(collective::local_slice, 4) == 0);
}

TEST_CASE("the group bytes T shrink with the splits of the other axes", "[sbp][boxing]") {
  // [S(0),P] on 2x4, 4096 bytes: axis 1's group holds half the tensor (axis 0 splits).
  CHECK(group_bytes(nd_sbp{S(0), P}, mesh_shape{2, 4}, 1, 4096) == 2048);
  CHECK(group_bytes(nd_sbp{S(0), P}, mesh_shape{2, 4}, 0, 4096) == 4096);
}

TEST_CASE("nested splits of one dim only change on the innermost splitting axis", "[sbp][boxing]") {
  CHECK(single_axis_step_exact(nd_sbp{S(0), S(0)}, 1, B));
  CHECK_FALSE(single_axis_step_exact(nd_sbp{S(0), S(0)}, 0, B));
  CHECK(single_axis_step_exact(nd_sbp{S(0), B}, 1, S(0)));
  CHECK_FALSE(single_axis_step_exact(nd_sbp{B, S(0)}, 0, S(0)));
  CHECK(single_axis_step_exact(nd_sbp{B, S(1)}, 0, S(0)));
}

TEST_CASE("the cheapest path of [P,P] -> [B,B] is the hierarchical all-reduce", "[sbp][boxing]") {
  auto p = cheapest_boxing({{P, P}, {B, B}, {2, 4}, {64, 64}, 4});
  REQUIRE(p.size() == 3);
  CHECK(p[0].axis == 1);
  CHECK(p[0].op == collective::reduce_scatter);
  CHECK(p[1].axis == 0);
  CHECK(p[1].op == collective::all_reduce);
  CHECK(p[1].group_bytes == 64 * 64 * 4 / 4);
  CHECK(p[2].op == collective::all_gather);
  // 16384 bytes: RS 3/4*16384 + AR 2*1/2*4096 + AG 3/4*16384
  CHECK(p.bytes_per_device() == 12288 + 4096 + 12288);
  CHECK(p.cost == double(p.bytes_per_device()));
}

TEST_CASE("identity boxing has no step and no cost", "[sbp][boxing]") {
  auto p = cheapest_boxing({{S(0), B}, {S(0), B}, {2, 4}, {64, 64}, 4});
  CHECK(p.size() == 0);
  CHECK(p.cost == 0);
}

TEST_CASE("a custom step cost steers the path", "[sbp][boxing]") {
  // Forbid all-to-all: S(0) -> S(1) must then gather and slice.
  auto no_a2a = [](const boxing_step& s) {
    return s.op == collective::all_to_all ? 1e30 : double(s.bytes_per_device());
  };
  auto p = cheapest_boxing({{S(0)}, {S(1)}, {4}, {8, 8}, 4}, no_a2a);
  REQUIRE(p.size() == 2);
  CHECK(p[0].op == collective::all_gather);
  CHECK(p[1].op == collective::local_slice);
}

TEST_CASE("a detour through P is taken when it is strictly cheaper", "[sbp][boxing]") {
  // Zero-fill, slice locally, then all-reduce a quarter: 128 bytes, against 160 without P.
  auto p = cheapest_boxing({{S(0), B}, {B, S(0)}, {2, 4}, {16, 8}, 4});
  CHECK(p.bytes_per_device() == 128);
  REQUIRE(p.size() == 3);
  CHECK(p[0].op == collective::local_partial);
  CHECK(p[2].op == collective::all_reduce);
}

TEST_CASE("boxing endpoints that do not divide the shape are rejected", "[sbp][boxing][errors]") {
  CHECK_THROWS_AS(cheapest_boxing({{S(0)}, {B}, {3}, {8, 8}, 4}), layout_error);
}
