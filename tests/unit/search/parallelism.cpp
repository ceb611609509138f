// The parallelism summary (search/parallelism.hpp) of expert plans, whose degrees are known
// from their knobs before any layout exists: dp on every axis, ZeRO's stages, Megatron-LM's tp,
// cp, pp and distributed optimizer. The summary reads only the chosen layouts, so each case is
// the knob read back from what the expert built; and a degree times the others is the device
// count wherever no axis replicates.
#include <catch2/catch_test_macros.hpp>

#include <string>
#include <vector>

#include "autoddl/cost/hardware_io.hpp"
#include "autoddl/models/zoo.hpp"
#include "autoddl/search.hpp"
#include "autoddl/search/parallelism.hpp"
#include "autoddl/search/pipeline.hpp"

using namespace autoddl;

namespace parallelism_cases {

namespace {

constexpr const char* gpt = "gpt:layers=2,hidden=64,heads=4,seq=32,batch=16,vocab=128";

struct want {
  const char* strategy;
  int dp, tp, cp, zero;
};

plan_parallelism summary(const std::string& spec, const mesh_shape& mesh, const plan_strategy& s) {
  plan_options o;
  o.mesh = planning_mesh(s, mesh);
  o.hw = load_hardware("dgx-a100");
  o.zero1_layouts = uses_zero1_layouts(s);
  o.zero2_layouts = uses_zero2_layouts(s);
  const plan_problem problem(build_model(spec), o);
  return parallelism_of(problem, solve_plan(problem, s).pick);
}

}  // namespace

TEST_CASE("an expert plan's parallelism summary reads back its knobs", "[search][parallelism]") {
  const mesh_shape mesh{2, 4};
  for (const want& w : {want{"dp", 8, 1, 1, 0}, want{"zero:stage=1", 8, 1, 1, 1}, want{"zero:stage=2", 8, 1, 1, 2},
                        want{"zero", 8, 1, 1, 3}, want{"megatron", 2, 4, 1, 0}, want{"megatron:tp=2", 4, 2, 1, 0},
                        want{"megatron:tp=2,dopt=1", 4, 2, 1, 1}, want{"megatron:tp=2,cp=2", 2, 2, 2, 0},
                        want{"megatron:tp=4,cp=2", 1, 4, 2, 0}}) {
    CAPTURE(w.strategy);
    const plan_parallelism x = summary(gpt, mesh, parse_strategy(w.strategy));
    CHECK(x.dp == w.dp);
    CHECK(x.tp == w.tp);
    CHECK(x.cp == w.cp);
    CHECK(x.pp == 1);
    CHECK(x.ep == 1);
    CHECK(x.zero_stage == w.zero);
    CHECK(x.dp * x.tp * x.cp == 8);
    CHECK(x.sequences_per_device == 16.0 / w.dp);  // one micro-batch of 16 sequences
  }
}

TEST_CASE("a mixture of experts' summary counts ep where the experts split whole", "[search][parallelism][moe]") {
  const std::string moe = "llama:layers=2,hidden=64,heads=4,kv_heads=2,ffn=64,experts=4,topk=2,seq=16,batch=8,vocab=96";
  struct moe_want {
    const char* strategy;
    int dp, tp, cp, ep;
  };
  for (const moe_want& w : {moe_want{"megatron:ep=4", 2, 4, 1, 4}, moe_want{"megatron:tp=1,ep=4", 8, 1, 1, 4},
                            moe_want{"megatron:tp=2,cp=2,ep=4", 2, 2, 2, 4}, moe_want{"dp", 8, 1, 1, 1}}) {
    CAPTURE(w.strategy);
    const plan_parallelism x = summary(moe, mesh_shape{2, 4}, parse_strategy(w.strategy));
    CHECK(x.dp == w.dp);
    CHECK(x.tp == w.tp);
    CHECK(x.cp == w.cp);
    CHECK(x.ep == w.ep);
  }
}

TEST_CASE("a pipeline's stages are its pp; the stage mesh's axes give the rest", "[search][parallelism]") {
  plan_options o;
  o.mesh = mesh_shape{2, 4};
  o.hw = load_hardware("dgx-a100");
  const pipeline_plan pl = plan_megatron_pipeline([](int m) { return build_model(gpt, m); }, 16, o,
                                                  parse_strategy("megatron:tp=2,pp=2,mbs=2"), {});
  const plan_problem& problem = *pl.layouts.problem;
  const plan_parallelism x = parallelism_of(problem, pl.layouts.result.pick, pl.shape.stages);
  CHECK(x.pp == 2);
  CHECK(x.tp == 2);
  CHECK(x.dp == 2);
  CHECK(x.sequences_per_device == 2.0);  // Megatron-LM's mbs is per data-parallel rank
}

TEST_CASE("a plan that splits nothing on an axis calls it replicated and counts it in no degree",
          "[search][parallelism]") {
  plan_options o;
  o.mesh = mesh_shape{2};
  o.hw = load_hardware("dgx-a100");
  const plan_problem problem(build_model("mlp:layers=2,hidden=32,batch=8,in=16,out=8"), o);
  std::vector<int> pick(std::size_t(problem.untied().nodes()), -1);
  for (int n = 0; n < problem.untied().nodes(); ++n) {  // every op and parameter whole on the device: [B] everywhere
    for (int c = 0; c < problem.untied().candidates(n) && pick[std::size_t(n)] < 0; ++c) {
      bool all_b = true;
      if (n < int(problem.model().ops.size())) {
        const signature& s = problem.op_candidate(n, c);
        for (const auto* v : {&s.inputs, &s.params, &s.outputs})
          for (const nd_sbp& l : *v) all_b = all_b && l[0].is_broadcast();
      } else {
        all_b = problem.param_candidate(n - int(problem.model().ops.size()), c).storage[0].is_broadcast();
      }
      if (all_b) pick[std::size_t(n)] = c;
    }
    REQUIRE(pick[std::size_t(n)] >= 0);
  }
  const plan_parallelism x = parallelism_of(problem, pick);
  CHECK(x.axes == std::vector<axis_role>{axis_role::replicated});
  CHECK(x.dp * x.tp * x.cp * x.pp == 1);
  CHECK(x.sequences_per_device == 8.0);
}

}  // namespace parallelism_cases
