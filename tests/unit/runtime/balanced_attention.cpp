// Context parallelism in the balanced token order (token_order.hpp; the fused attention's
// permuted path in runtime/kernels/attention.hpp) against oracles it does not contain:
// - the order itself: a permutation whose contiguous split into q parts, for every q dividing
//   its p, gives part d the natural chunks d and 2q-1-d of a cut into 2q (enumerated);
// - the unfused kernel run serially in the natural order: a causal attention split over 2 and 4
//   devices in the balanced order, its inputs permuted and its results put back, equals it
//   within 1e-12 in the output and every gradient (dropout included, keyed by natural position);
// - a closed form of the tiles each device computes, against what the CPU device counted on
//   every device and what ops/work.hpp prices (device_work).
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "cases.hpp"
#include "sim.hpp"
#include "tile_counts.hpp"

using namespace autoddl;

namespace balanced_attention_cases {

namespace {
op_node causal_attention(std::int64_t b, std::int64_t seq, std::int64_t heads, std::int64_t kv_heads, std::int64_t d,
                         double dropout, bool unfused = false) {
  op_attrs a;
  a.heads = int(heads);
  a.kv_heads = int(kv_heads);
  a.causal = true;
  a.dropout = dropout;
  a.unfused_attention = unfused;
  a.balanced_context = !unfused;
  return sim::make_op(unfused ? "unfused" : "balanced", op_kind::attention,
                      {{b, seq, heads * d}, {b, seq, kv_heads * d}, {b, seq, kv_heads * d}}, {}, a);
}

/// t with its dim 1 moved between the natural order and `o`: to_permuted, element j of the
/// result is natural position o.position(j); else the inverse.
sim::host_tensor reorder(const sim::host_tensor& t, const token_order& o, bool to_permuted) {
  sim::host_tensor r = t;
  const std::int64_t b = t.shape[0], s = t.shape[1], inner = t.shape.elements() / (b * s);
  for (std::int64_t n = 0; n < b; ++n)
    for (std::int64_t j = 0; j < s; ++j) {
      const std::int64_t from = to_permuted ? o.position(j) : j, to = to_permuted ? j : o.position(j);
      for (std::int64_t e = 0; e < inner; ++e)
        r.v[std::size_t((n * s + to) * inner + e)] = t.v[std::size_t((n * s + from) * inner + e)];
    }
  return r;
}

/// The attention split on the sequence of q over `mesh` axis `axis` (heads split on the other
/// axis of a 2-D mesh), k and v whole on the sequence.
signature sequence_split(const op_node& op, const mesh_shape& mesh, int axis) {
  signature s = all_broadcast(op, mesh.size());
  nd_sbp q = nd_sbp::filled(mesh.size(), B), kv = q;
  for (int a = 0; a < mesh.size(); ++a) {
    q[a] = a == axis ? S(1) : S(2);
    kv[a] = a == axis ? B : S(2);
  }
  s.inputs = {q, kv, kv};
  s.outputs = {q};
  return s;
}

using tile_counting::count_tiles;
using tile_counting::tile_counts;
}  // namespace

TEST_CASE("the balanced order's split into q parts, q dividing p, gives part d chunks d and 2q-1-d",
          "[runtime][attention][context]") {
  for (const std::int64_t p : {1, 2, 3, 4, 6, 8})
    for (std::int64_t q = 1; q <= p; ++q) {
      if (p % q != 0) continue;
      const std::int64_t seq = 2 * p * 3;  // chunks of 3 tokens
      const token_order o = balanced_order(seq, p);
      INFO("p " << p << ", q " << q);
      std::set<std::int64_t> all;
      const std::int64_t part = seq / q, chunk = seq / (2 * q);
      for (std::int64_t d = 0; d < q; ++d) {
        std::set<std::int64_t> held, want;
        for (const token_run& r : o.runs(d * part, part))
          for (std::int64_t k = 0; k < r.length; ++k) held.insert(r.position + k);
        for (std::int64_t k = 0; k < chunk; ++k) {
          want.insert(d * chunk + k);
          want.insert((2 * q - 1 - d) * chunk + k);
        }
        CHECK(held == want);
        all.insert(held.begin(), held.end());
      }
      CHECK(std::int64_t(all.size()) == seq);
    }
}

TEST_CASE("a causal attention split on the sequence in the balanced order equals serial execution",
          "[runtime][kernels][attention][context]") {
  struct split_case {
    std::int64_t b, seq, heads, kv_heads, d;
    double dropout;
    mesh_shape mesh;
    int axis;
  };
  const std::vector<split_case> cases = {
      {2, 256, 4, 2, 8, 0.0, mesh_shape{2}, 0},  {2, 256, 4, 2, 8, 0.2, mesh_shape{4}, 0},
      {1, 24, 2, 1, 4, 0.1, mesh_shape{2}, 0},   {2, 24, 4, 4, 4, 0.0, mesh_shape{4}, 0},
      {2, 136, 4, 2, 4, 0.3, mesh_shape{2, 2}, 1}, {1, 200, 4, 2, 4, 0.0, mesh_shape{2, 2}, 0},
  };
  const std::uint64_t seed = 20250301;
  for (const split_case& s : cases) {
    const std::int64_t p = s.mesh[s.axis];
    INFO("b " << s.b << " seq " << s.seq << " heads " << s.heads << "/" << s.kv_heads << " d " << s.d << " dropout "
              << s.dropout << " on " << to_string(s.mesh) << ", sequence on axis " << s.axis << " (seed " << seed << ")");
    std::mt19937_64 rng(seed);
    const op_node op = causal_attention(s.b, s.seq, s.heads, s.kv_heads, s.d, s.dropout);
    const sim::global_operands g = sim::random_operands(op, rng);
    const sim::host_tensor dy = sim::random_tensor(op.outputs[0], rng);
    const sim::run_result want =
        sim::run_serial(causal_attention(s.b, s.seq, s.heads, s.kv_heads, s.d, s.dropout, true), g, dy, seed);
    const token_order o = balanced_order(s.seq, p);
    REQUIRE_FALSE(o.natural());
    sim::global_operands permuted = g;
    for (sim::host_tensor& t : permuted.inputs) t = reorder(t, o, true);
    const sim::run_result got = sim::run(op, sequence_split(op, s.mesh, s.axis), s.mesh, permuted, reorder(dy, o, true), seed, o);
    CHECK(sim::rel_error(reorder(got.y, o, false), want.y) <= 1e-12);
    for (std::size_t i = 0; i < 3; ++i) {
      INFO("gradient of input " << i);
      CHECK(sim::rel_error(reorder(got.dinputs[i], o, false), want.dinputs[i]) <= 1e-12);
    }
    CHECK(got.b_mismatch <= 1e-12);
  }
}

// Closed form: c = seq / (2p) a multiple of the 64-row tiles; chunk m's query tile t (rows
// m c + 64 t ..) sees the keys up to m c + 64 (t + 1), so chunk m computes c m c + 32 c (c / 64
// + 1) scores, and chunks d and 2p-1-d together (2p - 1) c^2 + 64 c (c / 64 + 1) = 2p c^2 + 64 c
// on every device alike. The natural order's last device: (seq / p)(seq - seq / p) + 2048 n (n + 1)
// with n = seq / (64 p) of its query tiles.
TEST_CASE("every device of a balanced causal split computes the same tiles, and they are the price",
          "[runtime][kernels][attention][context][flops]") {
  const std::int64_t b = 2, heads = 4, kv_heads = 2, d = 8, seq = 512;
  for (const std::int64_t p : {2, 4}) {
    INFO(p << " devices");
    const op_node op = causal_attention(b, seq, heads, kv_heads, d, 0.0);
    const mesh_shape mesh{int(p)};
    const signature sig = sequence_split(op, mesh, 0);
    const token_order o = balanced_order(seq, p);
    const std::int64_t c = seq / (2 * p), n = seq / (64 * p);
    const std::int64_t balanced = 2 * p * c * c + 64 * c, natural = (seq / p) * (seq - seq / p) + 2048 * n * (n + 1);
    const op_work w = device_work(op, sig, mesh, 8);
    for (const mesh_coord& at : sim::all_coords(mesh)) {
      const tile_counts t = count_tiles(op, sig, mesh, at, o);
      CHECK(t.fwd_scores == b * heads * balanced);
      CHECK(t.bwd_scores == b * heads * balanced);
      CHECK(t.fwd_macs == 2 * b * heads * balanced * d);
      CHECK(t.bwd_macs == 5 * b * heads * balanced * d);
      CHECK(w.fwd_flops == 2.0 * double(t.fwd_macs) + 5.0 * double(t.fwd_scores));
      CHECK(w.bwd_flops == 2.0 * double(t.bwd_macs) + 5.0 * double(t.bwd_scores) + 2.0 * double(b * seq / p * heads * d));
    }
    // the natural order's busiest device, the price of the same split without the order
    op_node plain = op;
    plain.attrs.balanced_context = false;
    const tile_counts last = count_tiles(plain, sig, mesh, sim::all_coords(mesh).back(), token_order{});
    CHECK(last.fwd_scores == b * heads * natural);
    CHECK(device_work(plain, sig, mesh, 8).fwd_flops == 2.0 * double(last.fwd_macs) + 5.0 * double(last.fwd_scores));
    std::printf("causal attention, seq %lld on %lld devices: scores per head of the busiest device %lld natural, %lld "
                "balanced (%.3f)\n",
                static_cast<long long>(seq), static_cast<long long>(p), static_cast<long long>(natural),
                static_cast<long long>(balanced), double(balanced) / double(natural));
  }
}

}  // namespace balanced_attention_cases
