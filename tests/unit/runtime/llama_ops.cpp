// Oracles for the LLaMA family's ops beyond finite differences (gradients.cpp) and every
// signature against serial execution (sharded_vs_serial.cpp):
// - rotary: a rotation keeps each head's norm, and the product of a rotated query at position m
//   with a rotated key at position n depends on m - n only (RoFormer's relative-position
//   property), and equals the closed form written here for one pair;
// - grouped-query attention equals multi-head attention on keys and values whose heads are
//   repeated by hand, and its key/value gradients are the sums of the repeated heads' gradients;
//   with as many key/value heads as query heads it is multi-head attention;
// - RMSNorm equals x / sqrt(mean(x^2) + eps) * gamma, computed here; the SwiGLU product equals
//   silu(a) * b, computed here.
#include <cmath>
#include <random>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "cases.hpp"
#include "sim.hpp"

using namespace autoddl;

namespace llama_ops_cases {

namespace {


op_node rotary_op(std::int64_t b, std::int64_t s, int heads, std::int64_t d, double theta) {
  op_attrs a;
  a.heads = heads;
  a.rope_theta = theta;
  return sim::make_op("rope", op_kind::rotary, {{b, s, heads * d}}, {}, a);
}

}  // namespace

TEST_CASE("rotary keeps every head's norm and makes q_m . k_n depend on m - n only", "[runtime][kernels][rotary]") {
  const std::int64_t s = 12, d = 8;
  const op_node op = rotary_op(1, s, 1, d, 10000.0);
  std::mt19937_64 rng(5);
  const sim::host_tensor q1 = sim::random_tensor({1, 1, d}, rng), k1 = sim::random_tensor({1, 1, d}, rng);
  // the same q and k vectors at every position
  sim::global_operands gq, gk;
  gq.inputs.push_back({op.inputs[0], {}});
  gk.inputs.push_back({op.inputs[0], {}});
  for (std::int64_t p = 0; p < s; ++p) {
    gq.inputs[0].v.insert(gq.inputs[0].v.end(), q1.v.begin(), q1.v.end());
    gk.inputs[0].v.insert(gk.inputs[0].v.end(), k1.v.begin(), k1.v.end());
  }
  const sim::host_tensor rq = sim::forward_serial(op, gq), rk = sim::forward_serial(op, gk);
  auto dot = [&](const sim::host_tensor& a, std::int64_t pa, const sim::host_tensor& b, std::int64_t pb) {
    double t = 0;
    for (std::int64_t i = 0; i < d; ++i) t += a.v[std::size_t(pa * d + i)] * b.v[std::size_t(pb * d + i)];
    return t;
  };
  for (std::int64_t p = 0; p < s; ++p) CHECK(std::abs(dot(rq, p, rq, p) - dot(q1, 0, q1, 0)) <= 1e-12);
  for (std::int64_t m = 0; m < s; ++m)
    for (std::int64_t n = 0; n < s; ++n)
      for (std::int64_t c = 1; m + c < s && n + c < s; c += 3) {
        CAPTURE(m, n, c);
        CHECK(std::abs(dot(rq, m, rk, n) - dot(rq, m + c, rk, n + c)) <= 1e-12);
      }
  // closed form of one pair (i = 1, paired with i + d/2 = 5) at position 7
  const double angle = 7 * std::pow(10000.0, -2.0 * 1 / double(d));
  CHECK(std::abs(rq.v[7 * d + 1] - (q1.v[1] * std::cos(angle) - q1.v[5] * std::sin(angle))) <= 1e-12);
  CHECK(std::abs(rq.v[7 * d + 5] - (q1.v[5] * std::cos(angle) + q1.v[1] * std::sin(angle))) <= 1e-12);
}

TEST_CASE("grouped-query attention is multi-head attention on repeated key/value heads", "[runtime][kernels][attention]") {
  const std::int64_t b = 2, s = 6, d = 4;
  const int heads = 6, kv = 2, g = heads / kv;
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    op_attrs a;
    a.heads = heads;
    a.kv_heads = kv;
    a.causal = causal;
    const op_node gqa = sim::make_op("gqa", op_kind::attention, {{b, s, heads * d}, {b, s, kv * d}, {b, s, kv * d}}, {}, a);
    a.kv_heads = 0;
    const op_node mha = sim::make_op("mha", op_kind::attention, {{b, s, heads * d}, {b, s, heads * d}, {b, s, heads * d}}, {}, a);
    std::mt19937_64 rng(11);
    sim::global_operands small = sim::random_operands(gqa, rng), big;
    big.inputs.push_back(small.inputs[0]);
    for (int t = 1; t < 3; ++t) {  // k, v: query head h reads key/value head h / g
      sim::host_tensor rep{mha.inputs[t], {}};
      for (std::int64_t row = 0; row < b * s; ++row)
        for (int h = 0; h < heads; ++h)
          for (std::int64_t e = 0; e < d; ++e) rep.v.push_back(small.inputs[t].v[std::size_t((row * kv + h / g) * d + e)]);
      big.inputs.push_back(rep);
    }
    const sim::host_tensor dy = sim::random_tensor(gqa.outputs[0], rng);
    const sim::run_result x = sim::run_serial(gqa, small, dy, 3), y = sim::run_serial(mha, big, dy, 3);
    CHECK(sim::rel_error(x.y, y.y) <= 1e-14);
    CHECK(sim::rel_error(x.dinputs[0], y.dinputs[0]) <= 1e-14);
    for (int t = 1; t < 3; ++t) {  // the sum over each key/value head's g copies
      sim::host_tensor summed{gqa.inputs[t], std::vector<double>(small.inputs[t].v.size(), 0.0)};
      for (std::int64_t row = 0; row < b * s; ++row)
        for (int h = 0; h < heads; ++h)
          for (std::int64_t e = 0; e < d; ++e)
            summed.v[std::size_t((row * kv + h / g) * d + e)] += y.dinputs[std::size_t(t)].v[std::size_t((row * heads + h) * d + e)];
      CHECK(sim::rel_error(x.dinputs[std::size_t(t)], summed) <= 1e-14);
    }
  }
  // kv_heads == heads is multi-head attention itself
  op_attrs a;
  a.heads = 4;
  a.kv_heads = 4;
  const op_node same = sim::make_op("kv4", op_kind::attention, {{2, 4, 8}, {2, 4, 8}, {2, 4, 8}}, {}, a);
  a.kv_heads = 0;
  const op_node plain = sim::make_op("mha4", op_kind::attention, {{2, 4, 8}, {2, 4, 8}, {2, 4, 8}}, {}, a);
  std::mt19937_64 rng(13);
  const sim::global_operands g2 = sim::random_operands(plain, rng);
  CHECK(sim::rel_error(sim::forward_serial(same, g2), sim::forward_serial(plain, g2)) == 0);
}

TEST_CASE("rmsnorm and the SwiGLU product equal their formulas", "[runtime][kernels][rmsnorm]") {
  op_attrs a;
  a.eps = 1e-6;
  const op_node norm = sim::make_op("norm", op_kind::rmsnorm, {{3, 5}}, {{5}}, a);
  std::mt19937_64 rng(17);
  const sim::global_operands g = sim::random_operands(norm, rng);
  const sim::host_tensor y = sim::forward_serial(norm, g);
  for (int r = 0; r < 3; ++r) {
    double ms = 0;
    for (int c = 0; c < 5; ++c) ms += g.inputs[0].v[std::size_t(r * 5 + c)] * g.inputs[0].v[std::size_t(r * 5 + c)] / 5;
    for (int c = 0; c < 5; ++c)
      CHECK(std::abs(y.v[std::size_t(r * 5 + c)] - g.inputs[0].v[std::size_t(r * 5 + c)] / std::sqrt(ms + 1e-6) *
                                                        g.params[0].v[std::size_t(c)]) <= 1e-14);
  }
  const op_node silu = sim::make_op("silu", op_kind::silu, {{4, 3}});
  const op_node mul = sim::make_op("mul", op_kind::mul, {{4, 3}, {4, 3}});
  const sim::global_operands ab = sim::random_operands(mul, rng);
  sim::global_operands only_a;
  only_a.inputs.push_back(ab.inputs[0]);
  const sim::host_tensor s = sim::forward_serial(silu, only_a);
  sim::global_operands prod;
  prod.inputs = {s, ab.inputs[1]};
  const sim::host_tensor y2 = sim::forward_serial(mul, prod);
  for (std::size_t i = 0; i < y2.v.size(); ++i) {
    const double x = ab.inputs[0].v[i];
    CHECK(std::abs(y2.v[i] - x / (1 + std::exp(-x)) * ab.inputs[1].v[i]) <= 1e-15);
  }
  // the fused op: the same product, and its gradients dA = dY b silu'(a), dB = dY silu(a) with
  // silu'(a) = s (1 + a (1 - s)), s = sigmoid(a), written here
  const op_node fused = sim::make_op("swiglu", op_kind::swiglu, {{4, 3}, {4, 3}});
  const sim::host_tensor dy = sim::random_tensor({4, 3}, rng);
  const sim::run_result f = sim::run_serial(fused, ab, dy, 1);
  for (std::size_t i = 0; i < f.y.v.size(); ++i) {
    const double a = ab.inputs[0].v[i], b = ab.inputs[1].v[i], sg = 1 / (1 + std::exp(-a));
    CHECK(std::abs(f.y.v[i] - a * sg * b) <= 1e-15);
    CHECK(std::abs(f.dinputs[0].v[i] - dy.v[i] * b * sg * (1 + a * (1 - sg))) <= 1e-14);
    CHECK(std::abs(f.dinputs[1].v[i] - dy.v[i] * a * sg) <= 1e-15);
  }
}

}  // namespace llama_ops_cases
