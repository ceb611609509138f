// Laws of alpha-beta boxing, checked for every pair (and triple) of nd-SBPs over {B, P, S(0),
// S(1)} on 1-D and 2-D meshes: identity is free, costs are non-negative, the triangle inequality
// holds (boxing is a shortest path), a path's cost is the sum of its step times, and the
// compile-time price equals the runtime one.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>

#include <vector>

#include "autoddl/cost/collective_cost.hpp"

using namespace autoddl;

namespace {

std::vector<nd_sbp> all_nd(int axes) {
  const sbp letters[] = {B, P, S(0), S(1)};
  std::vector<nd_sbp> out;
  int count = 1;
  for (int i = 0; i < axes; ++i) count *= 4;
  for (int id = 0; id < count; ++id) {
    nd_sbp s;
    for (int i = 0, v = id; i < axes; ++i, v /= 4) s.push_back(letters[v % 4]);
    out.push_back(s);
  }
  return out;
}

struct mesh_case {
  device_mesh mesh;
  const char* what;
};

std::vector<mesh_case> meshes() {
  const link fast{1e-6, 100e9, "fast"};
  const link slow{2e-5, 5e9, "slow"};
  return {
      {uniform_mesh({2}, slow), "2"},
      {uniform_mesh({3}, slow), "3"},
      {uniform_mesh({6}, fast), "6"},
      {device_mesh{{2, 2}, {slow, fast}}, "2x2"},
      {device_mesh{{2, 3}, {slow, fast}}, "2x3"},
      {device_mesh{{2, 4}, {fast, slow}}, "2x4 (outer fast)"},
  };
}

const tensor_shape shape{48, 96};  // divisible by every split of these meshes

double price(const nd_sbp& a, const nd_sbp& b, const device_mesh& m) {
  return boxing_cost({a, b, m.shape, shape, 4}, m).cost;
}

}  // namespace

TEST_CASE("identity boxing is free and every boxing costs >= 0", "[laws][cost]") {
  for (const auto& mc : meshes()) {
    INFO("mesh " << mc.what);
    auto states = all_nd(mc.mesh.size());
    for (const auto& a : states) {
      CHECK(price(a, a, mc.mesh) == 0);
      for (const auto& b : states) CHECK(price(a, b, mc.mesh) >= 0);
    }
  }
}

TEST_CASE("alpha-beta boxing obeys the triangle inequality", "[laws][cost]") {
  for (const auto& mc : meshes()) {
    INFO("mesh " << mc.what);
    auto states = all_nd(mc.mesh.size());
    std::vector<std::vector<double>> d(states.size(), std::vector<double>(states.size()));
    for (std::size_t i = 0; i < states.size(); ++i)
      for (std::size_t j = 0; j < states.size(); ++j) d[i][j] = price(states[i], states[j], mc.mesh);
    int violations = 0;
    for (std::size_t i = 0; i < states.size(); ++i)
      for (std::size_t j = 0; j < states.size(); ++j)
        for (std::size_t k = 0; k < states.size(); ++k)
          if (d[i][k] > (d[i][j] + d[j][k]) * (1 + 1e-12)) {
            ++violations;
            UNSCOPED_INFO(to_string(states[i]) << " -> " << to_string(states[k]) << " costs " << d[i][k]
                                               << " but via " << to_string(states[j]) << " " << d[i][j] + d[j][k]);
          }
    CHECK(violations == 0);
  }
}

TEST_CASE("a path costs the sum of its steps, each step priced on its axis's link", "[laws][cost]") {
  for (const auto& mc : meshes()) {
    INFO("mesh " << mc.what);
    auto states = all_nd(mc.mesh.size());
    for (const auto& a : states)
      for (const auto& b : states) {
        auto p = boxing_cost({a, b, mc.mesh.shape, shape, 4}, mc.mesh);
        double sum = 0;
        for (const auto& s : p)
          sum += collective_time(s.op, mc.mesh.shape[s.axis], s.group_bytes, mc.mesh.links[std::size_t(s.axis)]);
        CHECK(p.cost == Catch::Approx(sum).epsilon(1e-12));
        CHECK(path_time(p, mc.mesh) == Catch::Approx(p.cost).epsilon(1e-12));
      }
  }
}

TEST_CASE("the price computed at compile time is the runtime price", "[laws][cost]") {
  constexpr device_mesh m{{2, 4}, {link{2e-5, 5e9, "slow"}, link{1e-6, 100e9, "fast"}}};
  constexpr double st = boxing_cost({{P, S(1)}, {B, B}, {2, 4}, {48, 96}, 4}, m).cost;
  const device_mesh rt{{2, 4}, {link{2e-5, 5e9, "slow"}, link{1e-6, 100e9, "fast"}}};
  CHECK(st == boxing_cost({{P, S(1)}, {B, B}, {2, 4}, {48, 96}, 4}, rt).cost);
  static_assert(boxing_cost({{S(0), B}, {S(0), B}, {2, 4}, {48, 96}, 4}, m).cost == 0);
}
