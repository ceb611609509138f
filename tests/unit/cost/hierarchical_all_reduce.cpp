// Oracle for [P,P] -> [B,B] on an a x b mesh: the hierarchical all-reduce written here in closed
// form from the ring costs of Thakur, Rabenseifner & Gropp (2005), "Optimization of collective
// communication operations in MPICH", IJHPCA 19(1) (alpha per message, 1/beta per byte sent,
// gamma per byte reduced), against the library's price of that boxing.
//   reduce-scatter on the fast axis (f devices, the whole tensor T):
//       (f-1) a_f + (f-1)/f T / b_f + (f-1)/f T g_f
//   all-reduce on the slow axis (s devices, the 1/f part each device now holds):
//       2(s-1) a_s + 2(s-1)/s (T/f) / b_s + (s-1)/s (T/f) g_s
//   all-gather on the fast axis: (f-1) a_f + (f-1)/f T / b_f
// With the fast axis no slower than the other in beta and gamma, this order is the cheapest
// (Rabenseifner's reduce-scatter/all-gather decomposition keeps the slow axis's traffic to T/f),
// so the library's cheapest path must cost exactly this.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "autoddl/cost/collective_cost.hpp"

using namespace autoddl;

namespace hierarchical_all_reduce_cases {
using autoddl::link;  // <unistd.h>, read by another file of the unity build, declares ::link

namespace {

double reduce_scatter(double n, double t, const link& l) {
  return (n - 1) * l.alpha + (n - 1) / n * t / l.beta + (n - 1) / n * t * l.gamma;
}
double all_gather(double n, double t, const link& l) { return (n - 1) * l.alpha + (n - 1) / n * t / l.beta; }
double all_reduce(double n, double t, const link& l) {
  return 2 * (n - 1) * l.alpha + 2 * (n - 1) / n * t / l.beta + (n - 1) / n * t * l.gamma;
}

// Hierarchical all-reduce of T bytes: reduce-scatter and all-gather on the fast axis (f devices),
// all-reduce of T/f on the slow one (s devices).
double hierarchical(double s, const link& slow, double f, const link& fast, double t) {
  return reduce_scatter(f, t, fast) + all_reduce(s, t / f, slow) + all_gather(f, t, fast);
}

struct link_case {
  link outer, inner;
  const char* what;
};

}  // namespace

TEST_CASE("[P,P] -> [B,B] costs the closed-form hierarchical all-reduce, fast axis inside",
          "[cost][boxing][oracle]") {
  const link_case links[] = {
      {{2e-5, 12.5e9, "ib"}, {2e-6, 150e9, "nvlink"}, "inner fast, no gamma"},
      {{5e-6, 5e9, "slow", 4e-10}, {1e-6, 20e9, "fast", 1e-10}, "inner fast, with gamma"},
      {{1e-5, 1e9, "same"}, {1e-5, 1e9, "same"}, "equal links"},
      {{1e-3, 50e9, "latency"}, {1e-4, 100e9, "latency-fast"}, "latency-dominated"},
  };
  const mesh_shape meshes[] = {{2, 2}, {2, 4}, {4, 2}, {2, 8}, {3, 5}, {4, 4}};
  const tensor_shape shapes[] = {{240, 240}, {1920, 960}, {120, 8}};  // every mesh here divides dim 0
  for (const auto& lc : links)
    for (const auto& m : meshes)
      for (const auto& s : shapes)
        for (int elem : {2, 4}) {
          INFO(lc.what << ", mesh " << to_string(m) << ", shape " << to_string(s) << ", " << elem << " bytes");
          const device_mesh dm{m, {lc.outer, lc.inner}};
          const double t = double(s.elements() * elem);
          const double want = hierarchical(m[0], lc.outer, m[1], lc.inner, t);
          const double got = boxing_cost({{P, P}, {B, B}, m, s, elem}, dm).cost;
          CHECK(std::abs(got - want) <= 1e-12 * want);
        }
}

TEST_CASE("[P,P] -> [B,B] turns the hierarchy round when the outer axis is the fast one",
          "[cost][boxing][oracle]") {
  const link fast{1e-6, 100e9, "fast", 1e-11};
  const link slow{3e-5, 2e9, "slow", 5e-10};
  const mesh_shape meshes[] = {{2, 4}, {4, 2}, {3, 5}, {8, 2}};
  for (const auto& m : meshes) {
    INFO("mesh " << to_string(m));
    const tensor_shape s{1200, 64};
    const double t = double(s.elements() * 4);
    const device_mesh dm{m, {fast, slow}};
    const double want = hierarchical(m[1], slow, m[0], fast, t);
    CHECK(std::abs(boxing_cost({{P, P}, {B, B}, m, s, 4}, dm).cost - want) <= 1e-12 * want);
  }
}

TEST_CASE("the hierarchical all-reduce beats a flat all-reduce over all devices on the slow link",
          "[cost][boxing][oracle]") {
  // Out of the closed form: flat ring on a*b devices of the slow link vs the hierarchy.
  const link slow{2e-5, 12.5e9, "ib"}, fast{2e-6, 150e9, "nvlink"};
  for (int b : {2, 4, 8}) {
    const mesh_shape m{2, b};
    const tensor_shape s{4096, 1024};
    const double t = double(s.elements() * 4);
    const double price = boxing_cost({{P, P}, {B, B}, m, s, 4}, device_mesh{m, {slow, fast}}).cost;
    INFO("mesh " << to_string(m));
    CHECK(price < all_reduce(double(2 * b), t, slow));
    CHECK(std::abs(price - hierarchical(2, slow, double(b), fast, t)) <= 1e-12 * price);
  }
}

// The executor runs an all-reduce of a count not divisible by n on a buffer zero-padded to the
// next multiple (runtime/boxing.hpp) and counts those bytes (boxing_step::bytes_per_device: 10
// fp32 on 4 ranks send 72 bytes); step_time prices the same padded 48-byte buffer, not the
// unpadded 40 bytes.
TEST_CASE("an all-reduce of a count not divisible by n is priced on the padded bytes it sends",
          "[cost][boxing]") {
  const link l{1e-5, 1e9, "1 ns per byte"};
  const auto p = boxing_cost({{P}, {B}, {4}, {10}, 4}, uniform_mesh({4}, l));
  REQUIRE(p.size() == 1);
  CHECK(p.bytes_per_device() == 72);  // what the executor sends: 2 * 3/4 * 48
  CHECK(std::abs(p.cost - all_reduce(4, 48, l)) <= 1e-12 * p.cost);  // 6e-5 + 72e-9
}

}  // namespace hierarchical_all_reduce_cases
