// Finite-difference gradient checks in double: for every op kind, the serial backward with
// dY = R must match the central difference of L = sum(Y * R) in every input and parameter
// element (index inputs excepted).
#include <cmath>
#include <random>
#include <string>

#include <catch2/catch_test_macros.hpp>

#include "cases.hpp"
#include "sim.hpp"

using namespace autoddl;

namespace {
double loss(const op_node& op, const sim::global_operands& g, const sim::host_tensor& r, std::uint64_t seed) {
  cpu_device dev;
  auto ctx = make_kernel_context<double>(op, all_broadcast(op, 1), mesh_shape{1}, {}, seed, 7);
  operands<double> in;
  for (std::size_t i = 0; i < op.inputs.size(); ++i) in.inputs.push_back(std::span<const double>(g.inputs[i].v));
  for (const auto& p : g.params) in.params.push_back(std::span<const double>(p.v));
  in.indices = g.indices;
  auto f = op_forward(dev, ctx, in);
  double l = 0;
  for (std::size_t i = 0; i < r.v.size(); ++i) l += f.outputs[0][i] * r.v[i];
  return l;
}
}  // namespace

TEST_CASE("every op's backward matches central finite differences in double", "[runtime][kernels][gradients]") {
  const std::uint64_t seed = 77;
  const double eps = 1e-6;
  for (const op_node& op : sim::op_cases()) {
    INFO("op '" << op.name << "' (seed " << seed << ")");
    std::mt19937_64 rng(seed);
    sim::global_operands g = sim::random_operands(op, rng);
    const sim::host_tensor r = sim::random_tensor(op.outputs[0], rng);
    const sim::run_result an = sim::run_serial(op, g, r, seed);
    auto check = [&](sim::host_tensor& t, const sim::host_tensor& grad, const std::string& what) {
      double worst = 0;
      for (std::size_t e = 0; e < t.v.size(); ++e) {
        const double keep = t.v[e];
        t.v[e] = keep + eps;
        const double up = loss(op, g, r, seed);
        t.v[e] = keep - eps;
        const double down = loss(op, g, r, seed);
        t.v[e] = keep;
        const double fd = (up - down) / (2 * eps);
        worst = std::max(worst, std::abs(fd - grad.v[e]) / std::max(1.0, std::abs(fd)));
      }
      INFO(what);
      CHECK(worst <= 1e-6);
    };
    for (std::size_t i = 0; i < op.inputs.size(); ++i)
      if (!is_index_input(op.kind, i)) check(g.inputs[i], an.dinputs[i], "input " + std::to_string(i));
    for (std::size_t i = 0; i < op.params.size(); ++i) check(g.params[i], an.dparams[i], "parameter " + std::to_string(i));
  }
}
