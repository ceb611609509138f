// Finite-difference gradient checks in double: for every op kind, the serial backward with
// dY = R must match the central difference of L = sum(Y * R) in every input and parameter
// element (index inputs excepted).
#include <cmath>
#include <random>
#include <string>

#include <catch2/catch_test_macros.hpp>

#include "cases.hpp"
#include "sim.hpp"
#include "autoddl/models.hpp"
#include "autoddl/runtime/data.hpp"

using namespace autoddl;

namespace gradients_cases {

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

TEST_CASE("every op runs in float and agrees with double to float precision", "[runtime][kernels][float]") {
  const std::uint64_t seed = 5;
  cpu_device dev;
  for (const op_node& op : sim::op_cases()) {
    INFO("op '" << op.name << "' (seed " << seed << ")");
    std::mt19937_64 rng(seed);
    const sim::global_operands g = sim::random_operands(op, rng);
    const sim::host_tensor r = sim::random_tensor(op.outputs[0], rng);
    const sim::run_result ref = sim::run_serial(op, g, r, seed);
    auto to_f = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
    std::vector<std::vector<float>> ins, prs;
    for (const auto& t : g.inputs) ins.push_back(to_f(t.v));
    for (const auto& t : g.params) prs.push_back(to_f(t.v));
    const std::vector<float> dy = to_f(r.v);
    auto ctx = make_kernel_context<float>(op, all_broadcast(op, 1), mesh_shape{1}, {}, seed, 7);
    operands<float> in;
    for (const auto& v : ins) in.inputs.push_back(std::span<const float>(v));
    for (const auto& v : prs) in.params.push_back(std::span<const float>(v));
    in.indices = g.indices;
    auto f = op_forward(dev, ctx, in);
    auto grads = op_backward(dev, ctx, in, f, std::span<const float>(dy));
    auto close = [](const auto& a, const std::vector<double>& b) {  // a: a cpu_device buffer
      double diff = 0, scale = 1;
      for (std::size_t i = 0; i < b.size(); ++i) {
        diff = std::max(diff, std::abs(double(a[i]) - b[i]));
        scale = std::max(scale, std::abs(b[i]));
      }
      return a.size() == b.size() && diff / scale <= 1e-4;
    };
    CHECK(close(f.outputs[0], ref.y.v));
    for (std::size_t i = 0; i < op.inputs.size(); ++i)
      if (!is_index_input(op.kind, i)) CHECK(close(grads.inputs[i], ref.dinputs[i].v));
    for (std::size_t i = 0; i < op.params.size(); ++i) CHECK(close(grads.params[i], ref.dparams[i].v));
  }
}

TEST_CASE("operands of the wrong size are refused with the op, the operand and the shard", "[runtime][kernels][errors]") {
  cpu_device dev;
  const op_node op = sim::make_op("fc", op_kind::linear, {{4, 8}}, {{8, 4}, {4}});
  auto ctx = make_kernel_context<double>(op, all_broadcast(op, 1), mesh_shape{1}, {});
  std::vector<double> x(31), w(32), b(4);
  operands<double> in{{std::span<const double>(x)}, {std::span<const double>(w), std::span<const double>(b)}, {}};
  try {
    op_forward(dev, ctx, in);
    FAIL("no error");
  } catch (const layout_error& e) {
    CHECK(std::string(e.what()).find("linear op 'fc': input 0 holds 31 elements but its local shard [4,8]") != std::string::npos);
  }
  std::vector<double> x2(32);
  in.inputs[0] = std::span<const double>(x2);
  auto f = op_forward(dev, ctx, in);
  CHECK(f.outputs[0].size() == 16);
  CHECK_THROWS_AS(make_kernel_context<double>(op, all_broadcast(op, 1), mesh_shape{2, 2}, {}), layout_error);  // one SBP per axis
}

TEST_CASE("a kernel told that an input gradient is unused skips it and leaves the rest unchanged",
          "[runtime][kernels]") {
  for (const char* spec : {"mlp:layers=1,hidden=16,batch=4,in=8,out=4", "vgg11:image=32,classes=4,batch=2,fc=16"}) {
    INFO(spec);
    graph g = build_model(spec);
    const op_node& op = g.ops[0];  // linear fc0 / conv0: reads the model input
    cpu_device dev;
    auto ctx = make_kernel_context<double>(op, all_broadcast(op, 1), mesh_shape{1}, mesh_coord{});
    std::vector<std::vector<double>> ins, prs;
    std::uint64_t k = 0;
    for (const auto& sh : ctx.shards.inputs) {
      ins.emplace_back(std::size_t(sh.local.elements()));
      for (auto& v : ins.back()) v = hashed_uniform(5, 0, k++);
    }
    for (const auto& sh : ctx.shards.params) {
      prs.emplace_back(std::size_t(sh.local.elements()));
      for (auto& v : prs.back()) v = hashed_uniform(6, 0, k++);
    }
    operands<double> in;
    for (const auto& v : ins) in.inputs.push_back(v);
    for (const auto& v : prs) in.params.push_back(v);
    auto f = op_forward(dev, ctx, in);
    std::vector<double> dy(f.outputs[0].size());
    for (auto& v : dy) v = hashed_uniform(7, 0, k++);
    auto all = op_backward(dev, ctx, in, f, std::span<const double>(dy));
    ctx.input_grad_wanted = {false};
    auto some = op_backward(dev, ctx, in, f, std::span<const double>(dy));
    CHECK(all.inputs[0].size() == ins[0].size());
    CHECK(some.inputs[0].empty());
    REQUIRE(some.params.size() == all.params.size());
    for (std::size_t p = 0; p < all.params.size(); ++p) CHECK(some.params[p] == all.params[p]);
  }
}

}  // namespace gradients_cases
