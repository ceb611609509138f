// Planning typed models: the allow-lists reach the search, pinned ops keep their signature,
// picks come back as signature indices that visit dispatches, and the compile-time price of a
// fully pinned model equals the planner's.
#include <catch2/catch_test_macros.hpp>

#include "autoddl/cost/hardware_io.hpp"
#include "autoddl/search.hpp"

using namespace autoddl;

namespace typed_plan_cases {

namespace {
using searched = typed_model<float, static_mesh<2, 4>, static_shape<8, 64, 128>,
    layers::layernorm<>, layers::linear<512>, layers::gelu<>,
    layers::linear<128, pin<"[S(0),S(2)]", "[B,S(0)]">>, layers::cross_entropy<>>;

using pinned = typed_model<float, static_mesh<2, 4>, static_shape<8, 64, 128>,
    layers::layernorm<pin<"[S(0),B]">>, layers::linear<512, pin<"[S(0),B]", "[B,S(1)]">>,
    layers::gelu<pin<"[S(0),S(2)]">>, layers::linear<128, pin<"[S(0),S(2)]", "[B,S(0)]">>,
    layers::box<"[S(0),B]">, layers::cross_entropy<pin<"[S(0),B]">>>;

plan_options dgx() {
  plan_options o;
  o.hw = load_hardware("dgx1-v100");
  return o;
}
}  // namespace

TEST_CASE("A searched typed model keeps its pinned op and picks allowed signatures elsewhere", "[search][typed]") {
  plan_problem problem(searched::to_graph("searched"), typed_plan_options<searched>(dgx()));
  REQUIRE(problem.op_candidates(3).size() == 1);
  REQUIRE(problem.op_candidates(1).size() == searched::candidates<1>.size());
  plan_result r = solve_plan(problem, strategy::automatic{});
  std::vector<int> s = chosen_signatures(problem, r);
  REQUIRE(s.size() == searched::size);
  CHECK(s[3] == searched::allowed_candidates<3>[0]);
  for (int i = 0; i < int(searched::size); ++i) {
    bool seen = false;
    searched::visit(i, s[std::size_t(i)], [&](auto sig) {
      seen = true;
      CHECK(decltype(sig)::value.runtime() == signatures(problem.model().ops[std::size_t(i)], problem.options().mesh)[std::size_t(s[std::size_t(i)])]);
    });
    CHECK(seen);
  }
}

TEST_CASE("visit refuses a signature that the op's pins do not allow", "[search][typed]") {
  const int other = searched::allowed_candidates<3>[0] == 0 ? 1 : 0;
  CHECK_THROWS_AS(searched::visit<3>(other, [](auto) {}), layout_error);
  CHECK_THROWS_AS(searched::visit(99, 0, [](auto) {}), layout_error);
}

TEST_CASE("The compile-time price of a fully pinned model equals the planner's activation boxings", "[search][typed]") {
  plan_options o = typed_plan_options<pinned>(dgx());
  plan_problem problem(pinned::to_graph("pinned"), o);
  for (int i = 0; i < int(pinned::size); ++i) REQUIRE(problem.op_candidates(i).size() == 1);
  plan_result r = solve_plan(problem, strategy::automatic{});  // every op has one candidate: any strategy picks it
  const std::int64_t dynamic_bytes = activation_boxing_bytes(problem, r.pick);
  const std::int64_t static_bytes = static_boxing_bytes<pinned>(make_device_mesh(pinned::mesh, o.hw));
  CHECK(static_bytes == dynamic_bytes);
  CHECK(static_bytes == 2 * 2 * (8 * 64 * 128 * 4 / 2) * 3 / 4);  // all-reduce of T=128 KiB on 4, fwd + bwd
}

TEST_CASE("An allow-list that names no signature of the op is refused with the op's name", "[search][typed]") {
  plan_options o = typed_plan_options<searched>(dgx());
  o.allowed[1] = {100000};
  CHECK_THROWS_AS(plan_problem(searched::to_graph("bad"), o), layout_error);
  o.allowed.resize(searched::size + 1);
  CHECK_THROWS_AS(plan_problem(searched::to_graph("bad"), o), layout_error);
}

TEST_CASE("A typed model without a loss cannot become a plannable graph", "[search][typed]") {
  using no_loss = typed_model<float, static_mesh<4>, static_shape<8, 16>, layers::linear<16>>;
  CHECK_THROWS_AS(no_loss::to_graph(), layout_error);
}

}  // namespace typed_plan_cases
