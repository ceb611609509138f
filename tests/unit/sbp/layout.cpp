#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "autoddl/sbp.hpp"

using namespace autoddl;
using Catch::Matchers::ContainsSubstring;

TEST_CASE("local shapes divide each split dim by the mesh axes that split it", "[sbp][shape]") {
  CHECK(local_shape({12, 64}, parse_layout("[S(0),S(1)]@2x4")) == tensor_shape{6, 16});
  CHECK(local_shape({16, 64}, parse_layout("[S(0),S(0)]@2x4")) == tensor_shape{2, 64});
  CHECK(local_shape({12, 64}, parse_layout("[B,P]@2x4")) == tensor_shape{12, 64});
  CHECK(split_factor(nd_sbp{S(1), S(1), B}, mesh_shape{2, 3, 5}, 1) == 6);
}

TEST_CASE("a layout without a mesh has no local shape when it splits (fuzz regression)", "[sbp][shape][errors]") {
  // local_shape once divided by the extent of a mesh axis that was not there (zero):
  // tests/fuzz/regressions/layout/local-shape-without-mesh-divides-by-zero
  CHECK_THROWS_WITH(local_shape({12, 64}, parse_layout("[S(0),B]")),
                    ContainsSubstring("layout [S(0),B] splits a dim but names no mesh"));
  CHECK(local_shape({12, 64}, parse_layout("[B,P]")) == tensor_shape{12, 64});  // nothing split: the whole tensor
}

TEST_CASE("an uneven split is an error naming the shape, the layout and the dim", "[sbp][shape][errors]") {
  CHECK_THROWS_AS(check_divisible({12, 64}, parse_layout("[S(0),B]@8x1")), layout_error);
  CHECK_THROWS_WITH(check_divisible({12, 64}, parse_layout("[S(0),B]@8x1")),
                    ContainsSubstring("shape [12,64] does not divide evenly under [S(0),B]@8x1: dim 0 (12) is split 8 ways"));
  CHECK_THROWS_WITH(check_divisible({12}, parse_layout("[S(1)]@2")),
                    ContainsSubstring("splits dim 1 of a tensor of shape [12] that has only 1 dims"));
  CHECK_NOTHROW(check_divisible({16, 6}, parse_layout("[S(0),S(1)]@8x3")));
}

TEST_CASE("a dynamic dim defers the divisibility check", "[sbp][shape]") {
  CHECK_NOTHROW(check_divisible({dyn, 64}, parse_layout("[S(0),S(1)]@3x4")));
  CHECK(to_string(tensor_shape{dyn, 64}) == "[?,64]");
}
