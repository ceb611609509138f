// Laws of nd boxing, checked for every pair of nd-SBPs on 1-D and 2-D meshes of several sizes:
// identity is free, the cheapest path is no dearer than any composed path (triangle
// inequality), the path's steps are exact and lead from `from` to `to`, and the constant
// evaluation agrees with the run-time one.
#include <catch2/catch_test_macros.hpp>

#include "all_layouts.hpp"
#include "autoddl/cost/boxing_path.hpp"

using namespace autoddl;

namespace {

struct mesh_case {
  mesh_shape mesh;
  tensor_shape shape;
};

// Shapes chosen so every layout divides them (each dim divisible by the product of all axes).
const mesh_case cases[] = {
    {{2}, {4, 6}},        {{3}, {6, 9}},        {{4}, {8, 16}},     {{5}, {10, 5}},
    {{2, 4}, {16, 8}},    {{3, 2}, {12, 6}},    {{2, 2}, {4, 4}},   {{4, 4}, {16, 16}},
};

bool fits(const tensor_shape& s, const nd_sbp& v, const mesh_shape& m) {
  return divides(s, layout{v, m});
}

}  // namespace

TEST_CASE("identity boxing costs nothing on every layout", "[laws][boxing]") {
  for (const auto& c : cases)
    for (const auto& a : test::all_nd_sbp(c.mesh.size(), c.shape.rank())) {
      if (!fits(c.shape, a, c.mesh)) continue;
      auto p = cheapest_boxing({a, a, c.mesh, c.shape, 4});
      CHECK(p.size() == 0);
      CHECK(p.cost == 0);
    }
}

TEST_CASE("every path replays from its source to its target with exact steps", "[laws][boxing]") {
  for (const auto& c : cases) {
    auto all = test::all_nd_sbp(c.mesh.size(), c.shape.rank());
    for (const auto& a : all)
      for (const auto& b : all) {
        if (!fits(c.shape, a, c.mesh) || !fits(c.shape, b, c.mesh)) continue;
        auto p = cheapest_boxing({a, b, c.mesh, c.shape, 4});
        nd_sbp state = a;
        double sum = 0;
        for (const auto& st : p) {
          INFO(to_string(a) << " -> " << to_string(b) << " on " << to_string(c.mesh));
          REQUIRE(state[st.axis] == st.from);
          REQUIRE(single_axis_step_exact(state, st.axis, st.to));
          CHECK(st == make_step(state, c.mesh, st.axis, st.to, c.shape.elements() * 4, 4));
          state = state.with(st.axis, st.to);
          sum += double(st.bytes_per_device());
        }
        CHECK(state == b);
        CHECK(sum == p.cost);
      }
  }
}

TEST_CASE("the cheapest path is no dearer than any composed path", "[laws][boxing]") {
  for (const auto& c : cases) {
    auto all = test::all_nd_sbp(c.mesh.size(), c.shape.rank());
    std::vector<nd_sbp> ok;
    for (const auto& a : all) if (fits(c.shape, a, c.mesh)) ok.push_back(a);
    const std::size_t n = ok.size();
    std::vector<double> cost(n * n);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) cost[i * n + j] = cheapest_boxing({ok[i], ok[j], c.mesh, c.shape, 4}).cost;
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j)
        for (std::size_t k = 0; k < n; ++k)
          if (cost[i * n + k] > cost[i * n + j] + cost[j * n + k]) {
            FAIL(to_string(ok[i]) << " -> " << to_string(ok[k]) << " on " << to_string(c.mesh) << " costs "
                                  << cost[i * n + k] << " but via " << to_string(ok[j]) << " costs "
                                  << cost[i * n + j] + cost[j * n + k]);
          }
  }
}

namespace {
// Sum of all pair costs on a mesh: one number the compiler and the run time must agree on.
constexpr double total_cost(mesh_shape m, tensor_shape s) {
  auto all = test::all_nd_sbp(m.size(), s.rank());
  double t = 0;
  for (const auto& a : all)
    for (const auto& b : all)
      if (divides(s, layout{a, m}) && divides(s, layout{b, m}))
        t += cheapest_boxing({a, b, m, s, 4}).cost;
  return t;
}
}  // namespace

TEST_CASE("static and dynamic boxing answers agree", "[laws][boxing][static]") {
  constexpr double c1 = total_cost({4}, {8, 16});
  constexpr double c2 = total_cost({2, 2}, {4});  // 2-D mesh, rank-1 tensor: 81 pairs
  mesh_shape m1 = parse_mesh(std::string("4"));
  mesh_shape m2 = parse_mesh(std::string("2x2"));
  CHECK(c1 == total_cost(m1, {8, 16}));
  CHECK(c2 == total_cost(m2, {4}));
  CHECK(c1 > 0);
}
