// The prices of a device's experts besides their FLOPs (ops/expert_work.hpp, cost/compute.hpp):
// each expert GEMM on its own roofline, the permutes around the dispatch as copies, the routed
// counts exchanged before a dropless dispatch over an expert split. The oracles are arithmetic
// written here: a device of 1e14 bf16 FLOP/s at GEMM efficiency 0.5 (5e13 FLOP/s) and 1e12 bytes/s
// of memory, so a GEMM of fewer than 50 FLOP per byte runs at the memory's rate.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_floating_point.hpp>

#include <cstdint>
#include <string>

#include "autoddl/cost/compute.hpp"
#include "autoddl/models/zoo.hpp"
#include "autoddl/ops/work.hpp"

using namespace autoddl;
using Catch::Matchers::WithinRel;

namespace expert_prices_cases {

namespace {

device_spec small_device() {
  device_spec d;
  d.name = "g";
  d.peak_flops[std::size_t(dtype::bf16)] = 1e14;
  d.efficiency = {0.5, 0.5, 0.5, 0.5};
  d.memory_bytes = 1e10;
  d.memory_bandwidth = 1e12;
  return d;
}

/// The first op of kind k in g.
const op_node& first_of(const graph& g, op_kind k) {
  for (const op_node& op : g.ops)
    if (op.kind == k) return op;
  FAIL("no such op");
  return g.ops.front();
}

/// The signature of `op` on `mesh` whose parameter 0 (W_gate) is `w` and input 0 is `x` on every axis.
signature signature_with(const op_node& op, const mesh_shape& mesh, sbp x, sbp w) {
  for (const signature& s : signatures(op, mesh)) {
    bool all = true;
    for (int a = 0; a < mesh.size(); ++a) all = all && s.inputs[0][a] == x && s.params[0][a] == w;
    if (all) return s;
  }
  FAIL("no such signature");
  return {};
}

// 8 sequences of 16 tokens, h = 64, E = 4 experts of width 32, top 2.
const std::string dropless = "llama:layers=1,hidden=64,heads=4,kv_heads=4,ffn=128,vocab=128,experts=4,topk=2,moe_ffn=32,"
                             "capacity=0,seq=16,batch=8";
const std::string padded = "llama:layers=1,hidden=64,heads=4,kv_heads=4,ffn=128,vocab=128,experts=4,topk=2,moe_ffn=32,"
                           "capacity=1,seq=16,batch=8";

}  // namespace

TEST_CASE("a GEMM on its own is priced by the roofline of its arithmetic intensity", "[cost][moe]") {
  const device_spec d = small_device();
  // 1024^3: 2^31 FLOP over 3 x 1024^2 x 2 bytes, 341 FLOP per byte: compute bound
  CHECK_THAT(gemm_roofline_time(1024, 1024, 1024, 2, dtype::bf16, d), WithinRel(2.0 * 1024 * 1024 * 1024 / 5e13, 1e-12));
  // 16 rows against a 4096 x 4096 weight: 2 x 16 x 4096^2 FLOP over (2 x 16 x 4096 + 4096^2) x 2 bytes,
  // 15.9 FLOP per byte: the bytes at 1e12 per second
  CHECK_THAT(gemm_roofline_time(16, 4096, 4096, 2, dtype::bf16, d),
             WithinRel((2.0 * 16 * 4096 + 4096.0 * 4096) * 2 / 1e12, 1e-12));
}

TEST_CASE("experts run one at a time: three GEMMs each, small ones at the memory's rate", "[cost][moe]") {
  const device_spec d = small_device();
  // 4 experts of 16 rows, h = 4096, F = 1024: each GEMM reads (16 x 4096 + 4096 x 1024 + 16 x 1024) x 2
  // = 8552448 bytes (8.55 us) for 2 x 16 x 4096 x 1024 FLOP (2.68 us): 12 GEMMs at 8.55 us
  CHECK_THAT(expert_gemms_time(4, 16, 4096, 1024, 2, dtype::bf16, d), WithinRel(12 * 8552448.0 / 1e12, 1e-12));
  // large ones at the GEMM rate: 4 experts of 8192 rows, the FLOPs of one GEMM-class kernel
  CHECK_THAT(expert_gemms_time(4, 8192, 2048, 768, 2, dtype::bf16, d),
             WithinRel(4 * 6.0 * 8192 * 2048 * 768 / 5e13, 1e-12));
}

TEST_CASE("dropless experts: GEMMs per expert, two permutes forward and three backward, counts under an expert split",
          "[cost][moe]") {
  const graph g = build_model(dropless);
  const op_node& op = first_of(g, op_kind::routed_experts);
  const mesh_shape mesh = parse_mesh("4");
  // whole experts per device, every token (W S(0), X B): 1 of the 4 experts, 128 tokens x 2 picks / 4
  // = 64 rows; copies of 64 rows x 64 x 2 bytes, read and written
  const op_work w = device_work(op, signature_with(op, mesh, B, S(0)), mesh, 2);
  CHECK(w.gemms.experts == 1);
  CHECK(w.gemms.rows == 64);
  CHECK(w.gemms.hidden == 64);
  CHECK(w.gemms.width == 32);
  CHECK(w.fwd_copy_bytes == 2 * (2.0 * 64 * 64 * 2));
  CHECK(w.bwd_copy_bytes == 3 * (2.0 * 64 * 64 * 2));
  // the counts: 4 ranks' 4 int64 counts all-gathered on axis 0
  REQUIRE(w.count_exchanges.size() == 1);
  CHECK(w.count_exchanges[0].axis == 0);
  CHECK(w.count_exchanges[0].bytes == 4 * 4 * 8);
  // tokens split, every expert held (X S(0), W B): 32 tokens x 2 picks over 4 experts, 16 rows each; no counts
  const op_work t = device_work(op, signature_with(op, mesh, S(0), B), mesh, 2);
  CHECK(t.gemms.experts == 4);
  CHECK(t.gemms.rows == 16);
  CHECK(t.fwd_copy_bytes == 2 * (2.0 * 64 * 64 * 2));
  CHECK(t.count_exchanges.empty());
}

TEST_CASE("padded experts: GEMMs per expert over their slots, the slots sorted by local expert under an expert split",
          "[cost][moe]") {
  const graph g = build_model(padded);
  const op_node& op = first_of(g, op_kind::experts);
  // capacity 1: 16 x 2 / 4 = 8 slots per expert and sequence, [8, 4, 8, 64]
  const tensor_shape& x = op.inputs[0];
  REQUIRE((x[0] == 8 && x[1] == 4 && x[2] == 8 && x[3] == 64));
  // on 2 devices holding 2 experts each: 8 sequences x 8 slots per expert; the buffer of
  // 8 x 2 x 8 rows sorted and unsorted, each pass reading and writing it
  const mesh_shape two = parse_mesh("2");
  const op_work w = device_work(op, signature_with(op, two, S(1), S(0)), two, 2);
  CHECK(w.gemms.experts == 2);
  CHECK(w.gemms.rows == 64);
  CHECK(w.fwd_copy_bytes == 2 * (2.0 * 128 * 64 * 2));
  CHECK(w.bwd_copy_bytes == w.fwd_copy_bytes);
  CHECK(w.count_exchanges.empty());
  // one expert per device: nothing to sort
  const mesh_shape four = parse_mesh("4");
  const op_work one = device_work(op, signature_with(op, four, S(1), S(0)), four, 2);
  CHECK(one.gemms.experts == 1);
  CHECK(one.fwd_copy_bytes == 0);
  // the batch split, every expert held: no all-to-all, no sort
  const op_work b = device_work(op, signature_with(op, two, S(0), B), two, 2);
  CHECK(b.gemms.experts == 4);
  CHECK(b.gemms.rows == 32);
  CHECK(b.fwd_copy_bytes == 0);
}

}  // namespace expert_prices_cases
