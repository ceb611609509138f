// The plan value (plan/plan.hpp) and its file: a plan made by the planner, written as a plan file
// and read back without the planner (plan_value_of under forbid_planning), runs the same steps on
// every boxing path; check_plan accepts every plan the planner makes and refuses broken ones;
// a file whose paths, layouts or ops do not fit its model is refused with one sentence.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "autoddl/cost/hardware_io.hpp"
#include "autoddl/models/zoo.hpp"
#include "autoddl/search/plan_file.hpp"
#include "autoddl/search/plan_of.hpp"

using namespace autoddl;
using Catch::Matchers::ContainsSubstring;

namespace plan_value_cases {
namespace {

plan_options options_on(const mesh_shape& m, int microbatches = 1, recompute_mode r = recompute_mode::none) {
  plan_options o;
  o.mesh = m;
  o.hw = load_hardware("cpu-local");
  o.type = dtype::fp64;
  o.microbatches = microbatches;
  o.recompute = r;
  o.zero1_layouts = true;
  o.zero2_layouts = true;
  return o;
}

std::vector<int> random_pick(const plan_problem& problem, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto& u = problem.untied();
  std::vector<int> pick(std::size_t(u.nodes()));
  for (int n = 0; n < u.nodes(); ++n) pick[std::size_t(n)] = int(rng() % std::uint64_t(u.candidates(n)));
  return pick;
}

bool same_steps(const boxing_path& a, const boxing_path& b) {
  if (a.size() != b.size()) return false;
  for (int k = 0; k < a.size(); ++k)
    if (!(a[k] == b[k])) return false;
  return true;
}

// Every field that the executor reads, compared (a path's summed cost is the planner's note).
void require_runs_alike(const plan& a, const plan& b) {
  REQUIRE(a.ops.size() == b.ops.size());
  REQUIRE(a.params.size() == b.params.size());
  CHECK(a.mesh == b.mesh);
  CHECK(a.type == b.type);
  CHECK(a.microbatches == b.microbatches);
  CHECK(a.recompute == b.recompute);
  CHECK(a.stage_first_ops == b.stage_first_ops);
  int paths = 0;
  for (std::size_t i = 0; i < a.ops.size(); ++i) {
    const op_plan &x = a.ops[i], &y = b.ops[i];
    INFO("op " << a.g().ops[i].name);
    CHECK(x.sig == y.sig);
    CHECK(x.chained == y.chained);
    REQUIRE(x.inputs.size() == y.inputs.size());
    REQUIRE(x.params.size() == y.params.size());
    for (std::size_t j = 0; j < x.inputs.size(); ++j) {
      CHECK(same_steps(x.inputs[j].forward, y.inputs[j].forward));
      CHECK(same_steps(x.inputs[j].backward, y.inputs[j].backward));
      paths += x.inputs[j].forward.size() > 0;
    }
    for (std::size_t j = 0; j < x.params.size(); ++j) {
      CHECK(same_steps(x.params[j].forward, y.params[j].forward));
      CHECK(same_steps(x.params[j].backward, y.params[j].backward));
    }
  }
  for (std::size_t q = 0; q < a.params.size(); ++q) {
    INFO("parameter " << a.g().params[q].name);
    CHECK(a.params[q].layouts == b.params[q].layouts);
    CHECK(same_steps(a.params[q].sync, b.params[q].sync));
    CHECK(same_steps(a.params[q].gather, b.params[q].gather));
    CHECK(same_steps(a.params[q].slice, b.params[q].slice));
  }
  CHECK(paths > 0);  // a random plan boxes somewhere: the comparison saw paths, not only empties
}

struct file_case {
  std::string spec;
  nlohmann::json file;
  shared_graph model;
};

// Plan `pick` of `problem` as a plan file (JSON), and its model loaded anew from the spec.
file_case file_of(const std::string& spec, const plan_problem& problem, const std::vector<int>& pick) {
  return {spec, plan_file_json(problem, result_of(problem, pick, strategy::automatic{}), spec, "cpu-local"),
          shared_graph(load_model(spec, problem.options().microbatches))};
}

plan read_back(const file_case& c) {
  const plan_file f = parse_plan_file(c.file.dump(), "test.json");
  const forbid_planning guard;
  return plan_value_of(f, c.model);
}

const std::string gpt = "gpt:layers=2,hidden=32,heads=4,seq=16,batch=8,vocab=64";
const std::string llama = "llama:layers=2,hidden=32,heads=4,kv_heads=2,ffn=48,seq=16,batch=8,vocab=64";
const std::string moe = "llama:layers=2,hidden=32,heads=4,kv_heads=2,ffn=32,experts=4,topk=2,seq=16,batch=8,vocab=64";

}  // namespace

TEST_CASE("a plan file read without the planner runs the planner's plan, path for path", "[search][plan]") {
  struct setting {
    std::string spec;
    mesh_shape mesh;
    int microbatches;
    recompute_mode recompute;
  };
  const std::vector<setting> settings{
      {gpt, mesh_shape{4}, 1, recompute_mode::none},     {gpt, mesh_shape{2, 2}, 2, recompute_mode::full},
      {llama, mesh_shape{2, 4}, 1, recompute_mode::selective}, {llama, mesh_shape{8}, 1, recompute_mode::none},
      {moe, mesh_shape{2, 2}, 1, recompute_mode::none},
      {"vgg11:image=32,classes=16,batch=8,fc=32,width=16", mesh_shape{4, 2}, 1, recompute_mode::none},
      {"mlp:layers=3,hidden=32,batch=16,in=16,out=8", mesh_shape{2, 2, 2}, 2, recompute_mode::none}};
  for (const setting& s : settings) {
    const plan_problem problem(load_model(s.spec, s.microbatches), options_on(s.mesh, s.microbatches, s.recompute));
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
      INFO(s.spec << " on mesh " << to_string(s.mesh) << ", random plan seed " << seed);
      const std::vector<int> pick = random_pick(problem, seed);
      const plan direct = plan_of(problem, pick);
      REQUIRE_NOTHROW(check_plan(direct));
      require_runs_alike(read_back(file_of(s.spec, problem, pick)), direct);
    }
  }
}

TEST_CASE("the boxed slots and schedule read off a problem are those of its plan", "[search][plan]") {
  // The memory replay reads these without building the plan; the plan's own paths are the oracle.
  struct setting {
    std::string spec;
    mesh_shape mesh;
    recompute_mode recompute;
  };
  const std::vector<setting> settings{{gpt, mesh_shape{2, 2}, recompute_mode::full},
                                      {llama, mesh_shape{2, 4}, recompute_mode::selective},
                                      {moe, mesh_shape{2, 2}, recompute_mode::none},
                                      {"mlp:layers=3,hidden=32,batch=16,in=16,out=8", mesh_shape{2, 2, 2}, recompute_mode::none}};
  for (const setting& s : settings) {
    const plan_problem problem(load_model(s.spec, 1), options_on(s.mesh, 1, s.recompute));
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
      INFO(s.spec << " on mesh " << to_string(s.mesh) << ", random plan seed " << seed);
      const std::vector<int> pick = random_pick(problem, seed);
      const plan p = plan_of(problem, pick);
      const boxed_slots slots = boxed_slots_of(problem, pick);
      CHECK(slots == boxed_slots_of(p));
      const std::vector<std::vector<bool>> regathered = regathered_inputs(p);
      const step_schedule schedule = step_schedule_of(problem, pick, slots);
      for (int i = 0; i < int(p.ops.size()); ++i)
        for (std::size_t j = 0; j < p.ops[std::size_t(i)].inputs.size(); ++j)
          CHECK(schedule.regathered(i, j) == bool(regathered[std::size_t(i)][j]));
    }
  }
}

TEST_CASE("a pipeline plan file keeps its stages' first ops", "[search][plan]") {
  const plan_problem problem(load_model(gpt, 2), options_on(mesh_shape{2}, 2));
  const std::vector<int> pick = random_pick(problem, 7);
  file_case c = file_of(gpt, problem, pick);
  add_pipeline_schedule(c.file, mesh_shape{4}, 2, 1, {0, 9});
  const plan p = read_back(c);
  CHECK(p.stage_first_ops == std::vector<int>{0, 9});
  CHECK(p.stages() == 2);
  require_runs_alike(p, plan_of(problem, pick, {0, 9}));
}

TEST_CASE("a plan file says whether its step gathers again for backward; older files keep what they gathered",
          "[search][plan][regather]") {
  for (const bool regather : {true, false})
    for (const bool reshard : {true, false}) {
      plan_options o = options_on(mesh_shape{2, 2});
      o.regather_inputs = regather;
      o.reshard_after_forward = reshard;
      const plan_problem problem(load_model(gpt), o);
      const file_case c = file_of(gpt, problem, random_pick(problem, 11));
      CHECK(c.file["schedule"]["regather_inputs"] == regather);
      CHECK(c.file["schedule"]["reshard_after_forward"] == reshard);
      const plan p = read_back(c);
      CHECK(p.regather_inputs == regather);
      CHECK(p.reshard_after_forward == reshard);
    }
  // a version 2 file written before the fields existed was priced keeping gathered copies and
  // parameters through the step: it runs so
  const plan_problem problem(load_model(gpt), options_on(mesh_shape{2, 2}));
  file_case c = file_of(gpt, problem, random_pick(problem, 11));
  c.file["schedule"].erase("regather_inputs");
  c.file["schedule"].erase("reshard_after_forward");
  const plan p = read_back(c);
  CHECK(!p.regather_inputs);
  CHECK(!p.reshard_after_forward);
}

TEST_CASE("forbid_planning makes the planner throw while it lives", "[search][plan]") {
  const graph g = load_model(gpt);
  {
    const forbid_planning guard;
    CHECK_THROWS_WITH(plan_problem(g, options_on(mesh_shape{2})), ContainsSubstring("forbid_planning"));
  }
  CHECK_NOTHROW(plan_problem(g, options_on(mesh_shape{2})));  // and not after
}

TEST_CASE("a plan file whose boxing does not fit its model is refused with one sentence", "[search][plan]") {
  const plan_problem problem(load_model(llama), options_on(mesh_shape{2, 2}));
  const std::vector<int> pick = random_pick(problem, 11);
  const file_case good = file_of(llama, problem, pick);
  REQUIRE_NOTHROW(read_back(good));
  // the first op input and the first parameter that box, in the file
  auto& ops = good.file.at("boxing").at("ops");
  int op_in = -1, in_slot = -1;
  for (std::size_t i = 0; i < ops.size() && op_in < 0; ++i)
    for (std::size_t j = 0; j < ops[i]["inputs"].size() && op_in < 0; ++j)
      if (ops[i]["inputs"][j].contains("forward") && ops[i]["inputs"][j]["forward"].size() >= 2) op_in = int(i), in_slot = int(j);
  REQUIRE(op_in >= 0);
  const std::string name = problem.model().ops[std::size_t(op_in)].name;

  SECTION("a path that stops short of its target") {
    file_case c = good;
    auto& path = c.file["boxing"]["ops"][std::size_t(op_in)]["inputs"][std::size_t(in_slot)]["forward"];
    path.erase(path.size() - 1);
    if (path.size() < 2) path.clear(), c.file["boxing"]["ops"][std::size_t(op_in)]["inputs"][std::size_t(in_slot)].erase("forward");
    CHECK_THROWS_WITH(read_back(c), ContainsSubstring("op '" + name + "' input " + std::to_string(in_slot)));
  }
  SECTION("a step that changes two axes at once") {
    file_case c = good;
    auto& path = c.file["boxing"]["ops"][std::size_t(op_in)]["inputs"][std::size_t(in_slot)]["forward"];
    path = nlohmann::json::array({{"P", "P"}, {"B", "B"}});
    CHECK_THROWS_WITH(read_back(c), ContainsSubstring("is not one single-axis step"));
  }
  SECTION("a layout of another mesh's rank") {
    file_case c = good;
    c.file["boxing"]["ops"][std::size_t(op_in)]["inputs"][std::size_t(in_slot)]["forward"][0] = {"B"};
    CHECK_THROWS_WITH(read_back(c), ContainsSubstring("must list layouts of 2 entries"));
  }
  SECTION("an input chained from a later op") {
    file_case c = good;
    c.file["boxing"]["ops"][0]["inputs"][0]["chained"] = {5, 0};
    CHECK_THROWS_WITH(read_back(c), ContainsSubstring("chained must name an earlier op's input slot"));
  }
  SECTION("a boxing field for another op count") {
    file_case c = good;
    c.file["boxing"]["ops"].erase(c.file["boxing"]["ops"].size() - 1);
    CHECK_THROWS_WITH(read_back(c), ContainsSubstring("must list"));
  }
  SECTION("an op whose kind changed") {
    file_case c = good;
    c.file["ops"][std::size_t(op_in)]["kind"] = "relu";
    CHECK_THROWS_WITH(read_back(c), ContainsSubstring("but the model's op " + std::to_string(op_in) + " is"));
  }
  SECTION("a partial sum into a nonlinear op") {
    file_case c = good;
    std::size_t norm = 0;
    while (problem.model().ops[norm].kind != op_kind::rmsnorm) ++norm;
    c.file["ops"][norm]["inputs"][0] = {"P", "B"};
    CHECK_THROWS_WITH(read_back(c), ContainsSubstring(problem.model().ops[norm].name));
  }
  SECTION("a version 1 file, which has no boxing paths") {
    file_case c = good;
    c.file.erase("boxing");
    c.file["version"] = 1;
    CHECK_THROWS_WITH(read_back(c), ContainsSubstring("holds no boxing paths"));
  }
}

TEST_CASE("check_plan refuses a plan whose path does not reach its target", "[search][plan]") {
  // data parallel on mesh 4: every parameter's gradient is all-reduced, [P] -> [B]
  const plan_problem problem(load_model(gpt), options_on(mesh_shape{4}));
  plan p = plan_of(problem, solve_plan(problem, strategy::dp{}).pick);
  REQUIRE_NOTHROW(check_plan(p));
  bool cut = false;
  for (op_plan& o : p.ops)
    for (slot_boxing& s : o.params)
      if (!cut && s.backward.size() > 0) s.backward.n = 0, cut = true;  // the gradient would stay [P]
  REQUIRE(cut);
  CHECK_THROWS_WITH(check_plan(p), ContainsSubstring("gradient path ends at [P]"));
}

}  // namespace plan_value_cases
