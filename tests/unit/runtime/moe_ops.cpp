// Oracles for the mixture-of-experts ops beyond finite differences (gradients.cpp) and every
// signature against serial execution (sharded_vs_serial.cpp):
// - the router's gates against a brute-force top-k written here (sort by value, ties to the
//   lower expert), with and without renormalisation, on rows with ties;
// - dispatch against a brute-force slot loop, and a hand-worked capacity case: four tokens all
//   routed to expert 0 at 2 slots keep tokens 0 and 1, drop 2 and 3;
// - combine of the dispatched buffer (identity experts) is each token times the sum of its kept
//   gates; the balancing loss against its closed form on a hand-made batch;
// - routing by the top-k picks: a picked gate that underflows to 0 (a softmax of -1e4) keeps its
//   slot and counts in the balancing loss, a non-zero gate outside the top k is not routed, and
//   on random logits the loss's counts and the slot map's both match a brute-force top-k;
// - capacity_slots against ceil(factor * seq * k / E).
// - routed_experts (dropless) against a loop over each token's top-k experts, and against the
//   capacity-bound ops at seq slots.
// - sigmoid_gate (the shared expert's gate) against x / (1 + exp(-z)), logits of +-40 included.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "cases.hpp"
#include "sim.hpp"

using namespace autoddl;

namespace moe_ops_cases {

namespace {


// The k largest of a row by (value descending, index ascending), as a brute force: sort.
std::vector<int> brute_top_k(const std::vector<double>& row, int k) {
  std::vector<int> idx(row.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return row[std::size_t(a)] > row[std::size_t(b)]; });
  idx.resize(std::size_t(k));
  return idx;
}

}  // namespace

TEST_CASE("router gates are the top-k of the softmax, ties to the lower expert", "[runtime][kernels][moe]") {
  const std::int64_t b = 2, s = 5, e = 6;
  for (bool renorm : {false, true}) {
    CAPTURE(renorm);
    op_attrs a;
    a.topk = 3;
    a.renormalize = renorm;
    const op_node op = sim::make_op("gates", op_kind::router, {{b, s, e}}, {}, a);
    std::mt19937_64 rng(3);
    sim::global_operands g = sim::random_operands(op, rng);
    // ties: row 0 all equal, row 1 a tie at the boundary of the top 3
    for (std::int64_t c = 0; c < e; ++c) g.inputs[0].v[std::size_t(c)] = 0.25;
    const std::vector<double> tie{0.9, 0.1, 0.5, 0.5, 0.5, -1.0};
    std::copy(tie.begin(), tie.end(), g.inputs[0].v.begin() + e);
    const sim::host_tensor y = sim::forward_serial(op, g);
    for (std::int64_t r = 0; r < b * s; ++r) {
      std::vector<double> logits(g.inputs[0].v.begin() + r * e, g.inputs[0].v.begin() + (r + 1) * e), p(logits.size());
      const double m = *std::max_element(logits.begin(), logits.end());
      double z = 0;
      for (std::size_t c = 0; c < p.size(); ++c) z += (p[c] = std::exp(logits[c] - m));
      for (double& v : p) v /= z;
      const std::vector<int> top = brute_top_k(p, a.topk);
      double kept = 0;
      for (int c : top) kept += p[std::size_t(c)];
      for (int c = 0; c < int(e); ++c) {
        const bool in = std::find(top.begin(), top.end(), c) != top.end();
        const double want = in ? (renorm ? p[std::size_t(c)] / kept : p[std::size_t(c)]) : 0.0;
        CAPTURE(r, c);
        CHECK(std::abs(y.v[std::size_t(r * e + c)] - want) <= 1e-14);
      }
    }
    // the tied rows by hand: all equal -> experts 0, 1, 2; {0.9, 0.1, 0.5, 0.5, 0.5, -1} -> 0, 2, 3
    for (int c = 0; c < int(e); ++c) CHECK((y.v[std::size_t(c)] != 0) == (c < 3));
    for (int c = 0; c < int(e); ++c) CHECK((y.v[std::size_t(e + c)] != 0) == (c == 0 || c == 2 || c == 3));
  }
}

TEST_CASE("dispatch fills each expert's slots in token order and drops past capacity", "[runtime][kernels][moe]") {
  SECTION("hand-worked: four tokens to expert 0 at 2 slots") {
    op_attrs a;
    a.capacity = 2;
    const op_node d = sim::make_op("dispatch", op_kind::dispatch, {{1, 4, 2}, {1, 4, 2}}, {}, a);  // top 1
    sim::global_operands g;
    g.inputs.push_back({d.inputs[0], {1, 10, 2, 20, 3, 30, 4, 40}});
    g.inputs.push_back({d.inputs[1], {0.5, 0, 0.25, 0, 1, 0, 0.75, 0}});
    const sim::host_tensor buf = sim::forward_serial(d, g);
    // [1, expert 2, slot 2, h 2]: expert 0 holds tokens 0 and 1; expert 1 nothing
    CHECK(buf.v == std::vector<double>{1, 10, 2, 20, 0, 0, 0, 0});
    // combine of the buffer as it came (identity experts): kept tokens weighted, dropped ones 0
    const op_node c = sim::make_op("combine", op_kind::combine, {{1, 2, 2, 2}, {1, 4, 2}}, {}, op_attrs{});
    sim::global_operands gc;
    gc.inputs.push_back(buf);
    gc.inputs.push_back(g.inputs[1]);
    CHECK(sim::forward_serial(c, gc).v == std::vector<double>{0.5, 5, 0.5, 5, 0, 0, 0, 0});
  }
  SECTION("against a brute-force slot loop on random top-2 gates") {
    const std::int64_t b = 3, s = 8, e = 4, h = 3, cap = 3;
    std::mt19937_64 rng(9);
    op_attrs a;
    a.topk = 2;
    a.capacity = int(cap);
    const op_node d = sim::make_op("dispatch", op_kind::dispatch, {{b, s, h}, {b, s, e}}, {}, a);
    sim::global_operands g = sim::random_operands(d, rng);
    for (double& v : g.inputs[1].v) v = std::abs(v) + 1e-3;  // gates are probabilities: positive
    for (std::int64_t t = 0; t < b * s; ++t) {  // keep two random experts per token
      std::vector<int> keep(static_cast<std::size_t>(e));
      std::iota(keep.begin(), keep.end(), 0);
      std::shuffle(keep.begin(), keep.end(), rng);
      for (int c = 2; c < int(e); ++c) g.inputs[1].v[std::size_t(t * e + keep[std::size_t(c)])] = 0;
    }
    const sim::host_tensor buf = sim::forward_serial(d, g);
    std::vector<double> want(std::size_t(b * e * cap * h), 0.0);
    int dropped = 0;
    for (std::int64_t i = 0; i < b; ++i)
      for (std::int64_t c = 0; c < e; ++c) {
        std::int64_t slot = 0;
        for (std::int64_t t = 0; t < s; ++t) {
          if (g.inputs[1].v[std::size_t((i * s + t) * e + c)] == 0) continue;
          if (slot == cap) {
            ++dropped;
            continue;
          }
          for (std::int64_t j = 0; j < h; ++j)
            want[std::size_t(((i * e + c) * cap + slot) * h + j)] = g.inputs[0].v[std::size_t((i * s + t) * h + j)];
          ++slot;
        }
      }
    CHECK(buf.v == want);
    CHECK(dropped > 0);  // seed 9 overfills some expert of some sequence
  }
}

TEST_CASE("routing follows the top-k picks: a picked gate that underflows to 0 keeps its slot",
          "[runtime][kernels][moe]") {
  // k = 2 of 3 experts; token 0's logits (0, -1e4, -1e4) give p = (1, 0, 0) in double (exp(-1e4)
  // underflows), so its top 2 are experts 0 and 1 (the tie to the lower column) with gates (1, 0).
  // Token 1's p = (0, 1, 0) picks experts 0 and 1 as well. At one slot per expert token 0 takes
  // both slots and token 1 is dropped at both; routing by non-zero gates would instead send
  // token 1 to expert 1.
  const std::int64_t b = 1, s = 2, e = 3, h = 2;
  op_attrs a;
  a.topk = 2;
  a.renormalize = true;
  const op_node router = sim::make_op("gates", op_kind::router, {{b, s, e}}, {}, a);
  sim::global_operands gl;
  gl.inputs.push_back({router.inputs[0], {0, -1e4, -1e4, -1e4, 0, -1e4}});
  const sim::host_tensor gates = sim::forward_serial(router, gl);
  REQUIRE(gates.v == std::vector<double>{1, 0, 0, 0, 1, 0});  // the picked gates (0, 1) of token 0 read 0
  a.capacity = 1;
  const op_node d = sim::make_op("dispatch", op_kind::dispatch, {{b, s, h}, {b, s, e}}, {}, a);
  sim::global_operands gd;
  gd.inputs.push_back({d.inputs[0], {1, 10, 2, 20}});
  gd.inputs.push_back(gates);
  sim::host_tensor buf = sim::forward_serial(d, gd);
  CHECK(buf.v == std::vector<double>{1, 10, 1, 10, 0, 0});  // experts 0 and 1 hold token 0; 2 is empty
  // combine (identity experts, expert 1's slot overwritten): token 0 is 1 x its row plus 0 x
  // what expert 1 returned; token 1 was dropped at both experts
  buf.v[2] = 100;
  buf.v[3] = 1000;
  const op_node c = sim::make_op("combine", op_kind::combine, {{b, e, 1, h}, {b, s, e}}, {}, a);
  sim::global_operands gc;
  gc.inputs.push_back(buf);
  gc.inputs.push_back(gates);
  CHECK(sim::forward_serial(c, gc).v == std::vector<double>{1, 10, 0, 0});
  // the balancing loss counts the same picks: counts (2, 2, 0), mass (1, 1, 0), E / (k s^2) = 3/8
  a.aux_coef = 1;
  const op_node lb = sim::make_op("balance", op_kind::load_balance, {{b, s, e}}, {}, a);
  CHECK(std::abs(sim::forward_serial(lb, gl).v[0] - 3.0 / 8 * (2 * 1 + 2 * 1)) <= 1e-15);
}

TEST_CASE("routing follows the top-k picks: a non-zero gate outside them is not dispatched", "[runtime][kernels][moe]") {
  // top 1 of 2 experts: token 0's gates (0.3, 0.7) pick expert 1, token 1's (0.6, 0.4) expert 0
  op_attrs a;
  a.topk = 1;
  a.capacity = 2;
  const op_node d = sim::make_op("dispatch", op_kind::dispatch, {{1, 2, 2}, {1, 2, 2}}, {}, a);
  sim::global_operands g;
  g.inputs.push_back({d.inputs[0], {1, 10, 2, 20}});
  g.inputs.push_back({d.inputs[1], {0.3, 0.7, 0.6, 0.4}});
  const sim::host_tensor buf = sim::forward_serial(d, g);
  CHECK(buf.v == std::vector<double>{2, 20, 0, 0, 1, 10, 0, 0});
  const op_node c = sim::make_op("combine", op_kind::combine, {{1, 2, 2, 2}, {1, 2, 2}}, {}, a);
  sim::global_operands gc;
  gc.inputs.push_back(buf);
  gc.inputs.push_back(g.inputs[1]);
  const std::vector<double> y = sim::forward_serial(c, gc).v, want{0.7, 7, 1.2, 12};
  for (std::size_t j = 0; j < want.size(); ++j) CHECK(std::abs(y[j] - want[j]) <= 1e-14);
}

TEST_CASE("the balancing loss counts what the slot map routes, underflowing gates included", "[runtime][kernels][moe]") {
  // random logits with some far below the rest (their probabilities underflow to 0, some of them
  // picked); the counts of a brute-force top-k on p are the oracle for both the loss's counts (its
  // gradient is f count) and the dropless slot map built from the router's gates
  const std::int64_t b = 3, s = 8, e = 5, k = 3;
  for (const std::uint64_t seed : {11u, 12u, 13u}) {
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    std::vector<double> logits = sim::random_tensor({b, s, e}, rng).v;
    std::bernoulli_distribution far(0.5);
    for (double& v : logits) v = far(rng) ? v - 1e4 : v;
    cpu_device d;
    std::vector<double> p(logits.size()), g(logits.size()), dp(logits.size());
    d.softmax_fwd(b * s, e, std::span<const double>(logits), std::span<double>(p));
    std::vector<double> want(std::size_t(b * e), 0.0);
    int underflowed_picks = 0;
    for (std::int64_t r = 0; r < b * s; ++r)
      for (int c : brute_top_k(std::vector<double>(p.begin() + r * e, p.begin() + (r + 1) * e), int(k))) {
        want[std::size_t(r / s * e + c)] += 1;
        underflowed_picks += p[std::size_t(r * e + c)] == 0;
      }
    REQUIRE(underflowed_picks > 0);
    std::vector<std::int64_t> picks(std::size_t(b * s * k)), src(std::size_t(b * e * s)), dst(std::size_t(b * s * e));
    d.topk_experts(b * s, e, k, std::span<const double>(p), std::span<std::int64_t>(picks));
    d.topk_gates(b * s, e, k, true, std::span<const double>(p), std::span<const std::int64_t>(picks), std::span<double>(g));
    const std::vector<double> dloss{1.0};
    d.balance_loss_bwd(b, s, e, k, std::span<const std::int64_t>(picks), std::span<const double>(dloss), 1.0,
                       std::span<double>(dp));
    const double f = double(e) / double(k * s * s);
    // the slot map as dispatch builds it: from the gates' own top k
    d.topk_experts(b * s, e, k, std::span<const double>(g), std::span<std::int64_t>(picks));
    d.moe_slots(b, s, e, k, s, std::span<const std::int64_t>(picks), std::span<std::int64_t>(src), std::span<std::int64_t>(dst));
    for (std::int64_t i = 0; i < b; ++i)
      for (std::int64_t c = 0; c < e; ++c) {
        const std::int64_t o = i * e + c;
        CAPTURE(i, c);
        CHECK(std::count_if(src.begin() + o * s, src.begin() + (o + 1) * s, [](std::int64_t x) { return x >= 0; }) ==
              std::int64_t(want[std::size_t(o)]));
        CHECK(std::abs(dp[std::size_t(i * s * e + c)] - f * want[std::size_t(o)]) <= 1e-15);
      }
  }
}

TEST_CASE("the balancing loss is coef E / (k s^2) sum_e count_e sum_t p_te, averaged over sequences",
          "[runtime][kernels][moe]") {
  const std::int64_t b = 2, s = 3, e = 2;
  op_attrs a;
  a.topk = 1;
  a.aux_coef = 0.1;
  const op_node op = sim::make_op("balance", op_kind::load_balance, {{b, s, e}}, {}, a);
  sim::global_operands g;
  // logits chosen so the probabilities are round: log(3) vs 0 gives p = (0.75, 0.25)
  const double l3 = std::log(3.0);
  g.inputs.push_back({op.inputs[0], {l3, 0, l3, 0, 0, l3, /* sequence 1: all to expert 1 */ 0, l3, 0, l3, 0, l3}});
  const double y = sim::forward_serial(op, g).v[0];
  // sequence 0: counts (2, 1), probability mass (0.75 + 0.75 + 0.25, 0.25 + 0.25 + 0.75) = (1.75, 1.25)
  const double seq0 = 2.0 / (1 * 9) * (2 * 1.75 + 1 * 1.25);
  // sequence 1: counts (0, 3), mass (0.75, 2.25)
  const double seq1 = 2.0 / (1 * 9) * (0 * 0.75 + 3 * 2.25);
  CHECK(std::abs(y - 0.1 * (seq0 + seq1) / 2) <= 1e-14);
}

TEST_CASE("capacity is ceil(factor * seq * k / E), at least 1, at most seq; 0 is dropless", "[runtime][kernels][moe]") {
  CHECK(capacity_slots(16, 4, 2, 1.25) == 10);
  CHECK(capacity_slots(16, 4, 2, 0) == 16);
  CHECK(capacity_slots(4096, 8, 2, 1.25) == 1280);
  CHECK(capacity_slots(4096, 128, 8, 1.25) == 320);
  CHECK(capacity_slots(16, 4, 2, 4) == 16);
  CHECK(capacity_slots(2, 64, 1, 1.0) == 1);
}

// Dropless routed_experts against two oracles: a loop over each token's top-k experts of its gate
// row (SwiGLU written out, weighted by the gate, summed), and the capacity-bound ops at seq slots
// (dispatch, experts and combine: nothing dropped, every slot computed), which must agree.
TEST_CASE("routed_experts equals a loop over each token's top-k experts and the ops at seq slots", "[runtime][kernels][moe]") {
  const std::int64_t b = 2, s = 6, e = 4, h = 5, f = 3;
  op_attrs a;
  a.topk = 2;
  const tensor_shape wg{e, h, f}, wd{e, f, h};
  const op_node op = sim::make_op("routed", op_kind::routed_experts, {{b, s, h}, {b, s, e}}, {wg, wg, wd}, a);
  std::mt19937_64 rng(11);
  const sim::global_operands g = sim::random_operands(op, rng);
  const sim::host_tensor y = sim::forward_serial(op, g);
  const auto& x = g.inputs[0].v;
  const auto& gate = g.inputs[1].v;
  for (std::int64_t t = 0; t < b * s; ++t) {
    const std::vector<double> row(gate.begin() + t * e, gate.begin() + (t + 1) * e);
    std::vector<double> want(static_cast<std::size_t>(h), 0.0);
    for (const int c : brute_top_k(row, a.topk)) {
      std::vector<double> m(static_cast<std::size_t>(f), 0.0);
      for (std::int64_t j = 0; j < f; ++j) {
        double av = 0, uv = 0;
        for (std::int64_t i = 0; i < h; ++i) {
          av += x[std::size_t(t * h + i)] * g.params[0].v[std::size_t((c * h + i) * f + j)];
          uv += x[std::size_t(t * h + i)] * g.params[1].v[std::size_t((c * h + i) * f + j)];
        }
        m[std::size_t(j)] = av / (1 + std::exp(-av)) * uv;
      }
      for (std::int64_t i = 0; i < h; ++i)
        for (std::int64_t j = 0; j < f; ++j)
          want[std::size_t(i)] += row[std::size_t(c)] * m[std::size_t(j)] * g.params[2].v[std::size_t((c * f + j) * h + i)];
    }
    for (std::int64_t i = 0; i < h; ++i) {
      CAPTURE(t, i);
      CHECK(std::abs(y.v[std::size_t(t * h + i)] - want[std::size_t(i)]) <= 1e-12 * (1 + std::abs(want[std::size_t(i)])));
    }
  }
  op_attrs slots = a;
  slots.capacity = int(s);
  const op_node d = sim::make_op("dispatch", op_kind::dispatch, {{b, s, h}, {b, s, e}}, {}, slots);
  const op_node x_op = sim::make_op("experts", op_kind::experts, {{b, e, s, h}}, {wg, wg, wd});
  const op_node c_op = sim::make_op("combine", op_kind::combine, {{b, e, s, h}, {b, s, e}}, {}, a);
  sim::global_operands gd{{g.inputs[0], g.inputs[1]}, {}, {}}, gx{{sim::forward_serial(d, gd)}, g.params, {}};
  sim::global_operands gc{{sim::forward_serial(x_op, gx), g.inputs[1]}, {}, {}};
  const sim::host_tensor padded = sim::forward_serial(c_op, gc);
  for (std::size_t i = 0; i < y.v.size(); ++i) CHECK(std::abs(y.v[i] - padded.v[i]) <= 1e-12 * (1 + std::abs(padded.v[i])));
}

TEST_CASE("sigmoid_gate scales each token's row by 1 / (1 + exp(-z))", "[runtime][kernels][moe]") {
  const std::int64_t b = 2, s = 3, h = 5;
  const op_node op = sim::make_op("gated", op_kind::sigmoid_gate, {{b, s, h}, {b, s, 1}});
  std::mt19937_64 rng(11);
  sim::global_operands g = sim::random_operands(op, rng);
  g.inputs[1].v[0] = 40;  // saturated either way: the row whole, and (nearly) nothing
  g.inputs[1].v[1] = -40;
  const sim::host_tensor y = sim::forward_serial(op, g);
  for (std::int64_t r = 0; r < b * s; ++r)
    for (std::int64_t j = 0; j < h; ++j) {
      const double want = g.inputs[0].v[std::size_t(r * h + j)] / (1 + std::exp(-g.inputs[1].v[std::size_t(r)]));
      CAPTURE(r, j);
      CHECK(std::abs(y.v[std::size_t(r * h + j)] - want) <= 1e-15 * (1 + std::abs(want)));
    }
}

}  // namespace moe_ops_cases
