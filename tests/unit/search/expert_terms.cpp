// A dropless experts op's terms as the planner prices them (search/detail/plan_pricing.hpp,
// op_terms): its GEMMs one expert at a time on their rooflines, the rest of its FLOPs at the GEMM
// rate, its permutes at the memory's, and the routed counts' all-gather on the forward's critical
// path, adding no bytes. The oracle is arithmetic written here on dgx-h100's figures: bf16 peak
// 989.4e12 FLOP/s at GEMM efficiency 0.7, 3.35e12 bytes/s of memory, NVLink alpha 3e-6 s and
// beta 450e9 bytes/s.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_floating_point.hpp>

#include "autoddl/cost/hardware_io.hpp"
#include "autoddl/models/zoo.hpp"
#include "autoddl/search/planner.hpp"

using namespace autoddl;
using Catch::Matchers::WithinRel;

namespace expert_terms_cases {

TEST_CASE("a dropless experts op under an expert split: GEMMs per expert, permutes, the count exchange",
          "[search][moe]") {
  // 8 sequences of 16 tokens, h = 64, 4 experts of width 32, top 2, on 4 devices of one node
  const graph g = build_model("llama:layers=1,hidden=64,heads=4,kv_heads=4,ffn=128,vocab=128,experts=4,topk=2,moe_ffn=32,"
                              "capacity=0,seq=16,batch=8");
  plan_options o;
  o.mesh = parse_mesh("4");
  o.hw = load_hardware("dgx-h100");
  o.type = dtype::bf16;
  plan_problem problem(g, o);
  int op = -1;
  for (std::size_t i = 0; i < g.ops.size(); ++i)
    if (g.ops[i].kind == op_kind::routed_experts) op = int(i);
  REQUIRE(op >= 0);
  int c = -1;  // whole experts per device over every token: X B, W S(0)
  for (std::size_t k = 0; k < problem.op_candidates(op).size(); ++k) {
    const signature& s = problem.op_candidates(op)[k];
    if (s.inputs[0][0] == B && s.params[0][0] == S(0)) c = int(k);
  }
  REQUIRE(c >= 0);
  const cost_terms t = problem.op_terms(op, c);
  const double gemm_rate = 989.4e12 * 0.7, memory = 3.35e12;
  // one expert per device, 128 tokens x 2 picks / 4 = 64 rows; each of its GEMMs ([64, 64] x [64, 32]
  // and [64, 32] x [32, 64]) reads and writes (64 x 64 + 64 x 32 + 64 x 32) x 2 = 16384 bytes for
  // 262144 FLOP: memory bound, 16384 / 3.35e12 s each
  const double gemm = 16384 / memory;
  // the rest: forward 5 x 64 x 32 (SwiGLU) + 2 x 64 x 64 (the weighted sum); backward 10 x 64 x 32 + 4 x 64 x 64
  const double rest_fwd = (5.0 * 64 * 32 + 2.0 * 64 * 64) / gemm_rate, rest_bwd = (10.0 * 64 * 32 + 4.0 * 64 * 64) / gemm_rate;
  // permutes: 64 rows of 64 read and written, 16384 bytes a pass, two forward, three backward
  CHECK_THAT(t.compute_fwd, WithinRel(3 * gemm + rest_fwd + 2 * 16384 / memory, 1e-9));
  CHECK_THAT(t.compute_bwd, WithinRel(6 * gemm + rest_bwd + 3 * 16384 / memory, 1e-9));
  // the counts: a ring all-gather of 4 ranks x 4 counts x 8 bytes on NVLink, 3 alpha + 3/4 x 128 / beta
  CHECK_THAT(t.comm_fwd, WithinRel(3 * 3e-6 + 0.75 * 128 / 450e9, 1e-9));
  CHECK(t.bytes == 0);
}

}  // namespace expert_terms_cases
