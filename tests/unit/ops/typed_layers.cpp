// Typed layers with dynamic shapes and meshes: what the compiler cannot see is checked when the
// tensor is made, with one sentence that names both the shape and the layout.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "autoddl/ops/typed.hpp"

using namespace autoddl;
using Catch::Matchers::ContainsSubstring;

TEST_CASE("a dynamic shape that a split does not divide throws naming both", "[ops][typed][errors]") {
  using t = dtensor<float, "[S(0),B]@4x2", static_shape<dyn, 8>>;
  CHECK_NOTHROW(t({8, 8}));
  CHECK_THROWS_WITH(t({6, 8}), ContainsSubstring("shape [6,8] does not divide evenly under [S(0),B]@4x2"));
  CHECK_THROWS_WITH(t({8, 4}), ContainsSubstring("differs from the static shape [?,8]"));
}

TEST_CASE("a layout without a mesh takes it at run time", "[ops][typed]") {
  using t = dtensor<float, "[S(0),S(1)]", static_shape<dyn, dyn>>;
  t x({12, 64}, mesh_shape{2, 4});
  CHECK(x.local_shape() == tensor_shape{6, 16});
  CHECK(to_string(x.placement()) == "[S(0),S(1)]@2x4");
  CHECK_THROWS_WITH(t({12, 64}, mesh_shape{8, 1}), ContainsSubstring("dim 0 (12) is split 8 ways"));
  CHECK_THROWS_WITH(t({12, 64}, mesh_shape{2}), ContainsSubstring("has 2 SBP entries for a mesh of 1 axes"));
}

TEST_CASE("matmul of dynamic tensors checks the inner dims and meshes when it runs", "[ops][typed][errors]") {
  using x_t = dtensor<float, "[S(0)]", static_shape<dyn, dyn>>;
  using w_t = dtensor<float, "[B]", static_shape<dyn, dyn>>;
  x_t x({8, 4}, mesh_shape{2});
  auto y = matmul(x, w_t({4, 3}, mesh_shape{2}));
  CHECK(y.shape() == tensor_shape{8, 3});
  CHECK(to_string(y.placement()) == "[S(0)]@2");
  CHECK_THROWS_WITH(matmul(x, w_t({5, 3}, mesh_shape{2})), ContainsSubstring("matmul needs X[..,k] and W[k,n]"));
  CHECK_THROWS_WITH(matmul(x, w_t({4, 3}, mesh_shape{4})), ContainsSubstring("on meshes 2 and 4"));
}

TEST_CASE("to<> keeps shape and mesh and names the boxing it stands for", "[ops][typed][boxing]") {
  dtensor<float, "[S(0),B]@2x4", static_shape<128, 64>> x;
  auto y = to<"[B,S(1)]">(x);
  CHECK(to_string(y.placement()) == "[B,S(1)]@2x4");
  CHECK(y.local_shape() == tensor_shape{128, 16});
  auto plan = boxing_of<"[B,S(1)]">(x);
  CHECK(to_string(plan.from) == "[S(0),B]@2x4");
  CHECK(to_string(plan.to) == "[B,S(1)]@2x4");
}
