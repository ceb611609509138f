// The fused attention kernel (backend/cpu/attention.hpp, runtime/kernels/attention.hpp) against
// oracles it does not contain:
// - the unfused kernel run serially (scores and probabilities materialised, a plain softmax):
//   forward and every gradient within 1e-12 in double, over causal and full masks, grouped-query
//   heads, dropout, lengths off the tile, sq != sk, and sharded runs (heads split, queries split);
// - central finite differences of the fused forward;
// - closed forms of the tile products a causal or full attention computes, against both what the
//   CPU device counted and what ops/work.hpp prices (device_work), per device of a query split;
// - the device's counting allocator: the forward keeps O(s), the output and one lse per row.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "cases.hpp"
#include "sim.hpp"
#include "tile_counts.hpp"

using namespace autoddl;

namespace fused_attention_cases {

namespace {
struct shape_case {
  std::int64_t b, sq, sk, heads, kv_heads, d;
  bool causal;
  double dropout;
};

op_node attention_op(const shape_case& s, bool unfused) {
  op_attrs a;
  a.heads = int(s.heads);
  a.kv_heads = s.kv_heads == s.heads ? 0 : int(s.kv_heads);
  a.causal = s.causal;
  a.dropout = s.dropout;
  a.unfused_attention = unfused;
  return sim::make_op(unfused ? "unfused" : "fused", op_kind::attention,
                      {{s.b, s.sq, s.heads * s.d}, {s.b, s.sk, s.kv_heads * s.d}, {s.b, s.sk, s.kv_heads * s.d}}, {}, a);
}

std::string describe(const shape_case& s) {
  return "b " + std::to_string(s.b) + " sq " + std::to_string(s.sq) + " sk " + std::to_string(s.sk) + " heads " +
         std::to_string(s.heads) + " kv " + std::to_string(s.kv_heads) + " d " + std::to_string(s.d) +
         (s.causal ? " causal" : " full") + " dropout " + std::to_string(s.dropout);
}

/// Every output of `got` within 1e-12 (relative to the largest value) of `want`.
void check_equal(const sim::run_result& got, const sim::run_result& want) {
  CHECK(sim::rel_error(got.y, want.y) <= 1e-12);
  for (std::size_t i = 0; i < 3; ++i) {
    INFO("gradient of input " << i);
    CHECK(sim::rel_error(got.dinputs[i], want.dinputs[i]) <= 1e-12);
  }
  CHECK(got.b_mismatch <= 1e-12);
}

/// A signature of the attention on a 1-D mesh: q, k, v and the output laid out as given.
signature on_axis(const op_node& op, sbp q, sbp kv) {
  signature s = all_broadcast(op, 1);
  s.inputs = {nd_sbp{q}, nd_sbp{kv}, nd_sbp{kv}};
  s.outputs = {nd_sbp{q}};
  return s;
}
}  // namespace

TEST_CASE("the fused attention equals the unfused one in the output and every gradient", "[runtime][kernels][attention]") {
  const std::vector<shape_case> cases = {
      {1, 1, 1, 1, 1, 4, true, 0.0},     {2, 7, 7, 4, 2, 4, true, 0.0},    {1, 65, 65, 4, 1, 8, true, 0.0},
      {2, 130, 130, 4, 2, 8, true, 0.2}, {1, 65, 65, 2, 2, 8, false, 0.3}, {2, 7, 130, 4, 4, 4, false, 0.0},
      {1, 130, 65, 4, 1, 4, false, 0.1}, {1, 128, 128, 2, 1, 16, true, 0.0},
  };
  const std::uint64_t seed = 20240611;
  for (const shape_case& s : cases) {
    INFO(describe(s) << " (seed " << seed << ")");
    std::mt19937_64 rng(seed);
    const op_node fused = attention_op(s, false), unfused = attention_op(s, true);
    const sim::global_operands g = sim::random_operands(fused, rng);
    const sim::host_tensor dy = sim::random_tensor(fused.outputs[0], rng);
    const sim::run_result want = sim::run_serial(unfused, g, dy, seed);
    check_equal(sim::run_serial(fused, g, dy, seed), want);
    if (s.kv_heads % 2 == 0) {
      INFO("heads split over 2 devices");
      check_equal(sim::run(fused, on_axis(fused, S(2), S(2)), mesh_shape{2}, g, dy, seed), want);
    }
    if (s.sq % 2 == 0) {
      INFO("queries split over 2 devices (q_offset sq / 2 on the second)");
      check_equal(sim::run(fused, on_axis(fused, S(1), B), mesh_shape{2}, g, dy, seed), want);
    }
  }
}

TEST_CASE("the fused attention on a 2x2 mesh, heads split on one axis and queries on the other, equals serial",
          "[runtime][kernels][attention]") {
  const shape_case s{2, 130, 130, 4, 2, 4, true, 0.25};
  const std::uint64_t seed = 99;
  INFO(describe(s) << " (seed " << seed << ")");
  std::mt19937_64 rng(seed);
  const op_node fused = attention_op(s, false), unfused = attention_op(s, true);
  const sim::global_operands g = sim::random_operands(fused, rng);
  const sim::host_tensor dy = sim::random_tensor(fused.outputs[0], rng);
  signature sig = all_broadcast(fused, 2);
  sig.inputs = {nd_sbp{S(2), S(1)}, nd_sbp{S(2), B}, nd_sbp{S(2), B}};
  sig.outputs = {nd_sbp{S(2), S(1)}};
  check_equal(sim::run(fused, sig, mesh_shape{2, 2}, g, dy, seed), sim::run_serial(unfused, g, dy, seed));
}

TEST_CASE("the fused attention's gradients match central finite differences", "[runtime][kernels][attention][gradients]") {
  const shape_case s{1, 70, 70, 2, 1, 4, true, 0.3};  // two query tiles, the second past the first key tile
  const std::uint64_t seed = 31;
  INFO(describe(s) << " (seed " << seed << ")");
  std::mt19937_64 rng(seed);
  const op_node op = attention_op(s, false);
  sim::global_operands g = sim::random_operands(op, rng);
  const sim::host_tensor r = sim::random_tensor(op.outputs[0], rng);
  const sim::run_result an = sim::run_serial(op, g, r, seed);
  const auto loss = [&] {
    const sim::host_tensor y = sim::run_serial(op, g, sim::host_tensor{op.outputs[0], std::vector<double>(r.v.size())}, seed).y;
    double l = 0;
    for (std::size_t i = 0; i < r.v.size(); ++i) l += y.v[i] * r.v[i];
    return l;
  };
  const double eps = 1e-6;
  for (std::size_t i = 0; i < 3; ++i) {
    double worst = 0;
    for (std::size_t e = 0; e < g.inputs[i].v.size(); e += 3) {  // every third element
      const double keep = g.inputs[i].v[e];
      g.inputs[i].v[e] = keep + eps;
      const double up = loss();
      g.inputs[i].v[e] = keep - eps;
      const double down = loss();
      g.inputs[i].v[e] = keep;
      worst = std::max(worst, std::abs((up - down) / (2 * eps) - an.dinputs[i].v[e]));
    }
    INFO("input " << i);
    CHECK(worst <= 1e-7);
  }
}

namespace {
using tile_counting::count_tiles;
using tile_counting::tile_counts;

/// The counts of a device whose local shapes compute `scores` scores per sequence and head, by
/// hand: two tile GEMMs of d per score forward, five backward (QK^T again, dV, dP, dQ, dK).
void check_counts(const tile_counts& c, std::int64_t b, std::int64_t heads, std::int64_t d, std::int64_t scores) {
  CHECK(c.fwd_scores == b * heads * scores);
  CHECK(c.bwd_scores == b * heads * scores);
  CHECK(c.fwd_macs == 2 * b * heads * scores * d);
  CHECK(c.bwd_macs == 5 * b * heads * scores * d);
}

/// device_work's FLOPs equal what the device counted: 2 per multiply-add, 5 per score, and 2
/// per output element for D = rowsum(dO * O) in backward.
void check_priced(const tile_counts& c, const op_work& w, double outputs) {
  CHECK(w.fwd_flops == 2.0 * double(c.fwd_macs) + 5.0 * double(c.fwd_scores));
  CHECK(w.bwd_flops == 2.0 * double(c.bwd_macs) + 5.0 * double(c.bwd_scores) + 2.0 * outputs);
}
}  // namespace

TEST_CASE("the fused attention computes the tiles ops/work.hpp prices", "[runtime][kernels][attention][flops]") {
  const std::int64_t b = 2, heads = 4, d = 8;
  SECTION("full: the whole square, 130 x 130") {
    const op_node op = attention_op({b, 130, 130, heads, heads, d, false, 0.0}, false);
    const tile_counts c = count_tiles(op, all_broadcast(op, 1), mesh_shape{1}, {});
    check_counts(c, b, heads, d, 130 * 130);
    check_priced(c, device_work(op, all_broadcast(op, 1), mesh_shape{1}, 8), double(b * 130 * heads * d));
  }
  SECTION("causal, 128: the two diagonal tiles and the one below them") {
    const op_node op = attention_op({b, 128, 128, heads, 2, d, true, 0.0}, false);
    const tile_counts c = count_tiles(op, all_broadcast(op, 1), mesh_shape{1}, {});
    check_counts(c, b, heads, d, 3 * 64 * 64);
    check_priced(c, device_work(op, all_broadcast(op, 1), mesh_shape{1}, 8), double(b * 128 * heads * d));
  }
  SECTION("causal, 130 queries split over 2 devices: the second is the busiest and is the price") {
    const op_node op = attention_op({b, 130, 130, heads, heads, d, true, 0.0}, false);
    const signature sig = on_axis(op, S(1), B);
    const auto coords = sim::all_coords(mesh_shape{2});
    // device 0 holds queries 0..64: tile [0, 64) sees 64 keys, query 64 the first 128;
    // device 1 holds queries 65..129: tile 65..128 sees keys up to 128, i.e. all 130; query 129 too
    check_counts(count_tiles(op, sig, mesh_shape{2}, coords[0]), b, heads, d, 64 * 64 + 1 * 128);
    const tile_counts busiest = count_tiles(op, sig, mesh_shape{2}, coords[1]);
    check_counts(busiest, b, heads, d, 64 * 130 + 1 * 130);
    check_priced(busiest, device_work(op, sig, mesh_shape{2}, 8), double(b * 65 * heads * d));
  }
}

TEST_CASE("the fused attention keeps its output and one statistic per row, the unfused one the probabilities",
          "[runtime][kernels][attention][memory]") {
  const shape_case s{1, 512, 512, 2, 2, 8, true, 0.1};
  const std::int64_t rows = s.b * s.heads * s.sq, out = s.b * s.sq * s.heads * s.d;
  std::vector<double> q(std::size_t(out), 0.25);
  for (const bool unfused : {false, true}) {
    INFO((unfused ? "unfused" : "fused"));
    const op_node op = attention_op(s, unfused);
    cpu_device dev;
    const kernel_context<double> ctx = make_kernel_context<double>(op, all_broadcast(op, 1), mesh_shape{1}, {}, 5, 7);
    operands<double> in;
    for (int i = 0; i < 3; ++i) in.inputs.push_back(std::span<const double>(q));
    const std::int64_t before = dev.bytes_in_use();
    const auto f = op_forward(dev, ctx, in);
    const std::int64_t kept = dev.bytes_in_use() - before;
    // by hand: the output, and the lse [b, heads, sq] or the probabilities [b, heads, sq, sk]
    CHECK(kept == (out + (unfused ? rows * s.sk : rows)) * 8);
    // the price: q, k and v (read where they are) and what the forward allocated, less the
    // output where the backward does not read it (unfused)
    const std::int64_t priced = device_work(op, all_broadcast(op, 1), mesh_shape{1}, 8).activation_bytes;
    CHECK(priced == 3 * out * 8 + kept - (unfused ? out * 8 : 0));
  }
}

TEST_CASE("the closed-form tile count equals the kernel's loop over query tiles", "[attention][tiles]") {
  // the oracle: the kernel's own loop, query tile by query tile (backend/cpu/attention.hpp)
  const auto loop = [](std::int64_t sq, std::int64_t sk, std::int64_t q_offset, bool causal) {
    double n = 0;
    for (std::int64_t r0 = 0; r0 < sq; r0 += attention_query_tile) {
      const std::int64_t rows = std::min(attention_query_tile, sq - r0);
      n += double(rows) * double(attention_tile_keys(r0, rows, sk, q_offset, causal));
    }
    return n;
  };
  int checked = 0;
  for (std::int64_t sq = 0; sq <= 260; sq += 3)
    for (std::int64_t sk = 1; sk <= 400; sk += 11)
      for (std::int64_t q_offset = -150; q_offset <= 300; q_offset += 17)
        for (bool causal : {false, true}) {
          INFO("sq " << sq << ", sk " << sk << ", q_offset " << q_offset << ", causal " << causal);
          REQUIRE(attention_tile_scores(sq, sk, q_offset, causal) == loop(sq, sk, q_offset, causal));
          ++checked;
        }
  CHECK(checked > 50000);
  // and a sequence of 10^10 tokens prices without looping over its tiles: 64 (1 + ... + n) 64 + the rest
  const std::int64_t n = 10'000'000'000 / 64;
  const double expected = 64.0 * 64.0 * (double(n) * double(n + 1) / 2);  // past 2^53: equal to double rounding
  CHECK(std::abs(attention_tile_scores(n * 64, n * 64, 0, true) - expected) <= 1e-12 * expected);
}

}  // namespace fused_attention_cases
