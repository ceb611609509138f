// A typed GPT block stack: attention pinned to Megatron's layouts, everything else searched.
//
// Mesh 2x4 (2 nodes x 4 GPUs of a DGX-1). Attention follows Megatron-LM on the innermost axis:
// q, k, v column parallel (X[S(0),B] W[B,S(1)]: heads split over axis 1, batch over axis 0),
// the core on whole heads ([S(0),S(2)]), the output projection row parallel (W[B,S(0)]).
// Layernorms, the MLP, the residual adds and the loss are auto_layout: their candidates are
// instantiated at compile time, solve_plan's coordinate descent picks one per op at run time,
// and typed_model::visit dispatches each op to the compile-time instance of its pick.
#include <autoddl/cost/hardware_io.hpp>
#include <autoddl/search.hpp>

#include <cstdio>
#include <string>

using namespace autoddl;

constexpr std::int64_t hidden = 256;
using megatron_attention = layers::self_attention<8, /*causal=*/true,
    pin<"[S(0),B]", "[B,S(1)]">,      // q, k, v: X, W  (column parallel)
    pin<"[S(0),S(2)]">,               // core: q (k, v follow)
    pin<"[S(0),S(2)]", "[B,S(0)]">>;  // proj: X, W     (row parallel)
using gpt_block = layers::repeat<4,
    layers::residual<auto_layout, layers::layernorm<>, megatron_attention>,
    layers::residual<auto_layout, layers::layernorm<>, layers::linear<4 * hidden>, layers::gelu<>,
                     layers::linear<hidden>>>;
using gpt = typed_model<float, static_mesh<2, 4>, static_shape<8, 128, hidden>, gpt_block, layers::layernorm<>,
                        layers::cross_entropy<>>;

int main() {
  plan_options o;
  o.hw = load_hardware("dgx1-v100");
  plan_problem problem(gpt::to_graph("typed-gpt"), typed_plan_options<gpt>(o));
  plan_result r = solve_plan(problem, strategy::automatic{});
  std::vector<int> chosen = chosen_signatures(problem, r);

  std::printf("typed GPT, %zu ops, %zu signatures instantiated, mesh %s\n", gpt::size, gpt::instantiated_signatures,
              to_string(gpt::mesh).c_str());
  std::printf("predicted step %.3f ms, boxings written in the type: %zu\n", r.time * 1e3, gpt::boxings.size());
  int pinned_ok = 0;
  for (int i = 0; i < int(gpt::size); ++i) {
    const op_node& op = problem.model().ops[std::size_t(i)];
    // one dispatch per op: f sees the signature as a compile-time constant
    gpt::visit(i, chosen[std::size_t(i)], [&](auto sig) {
      using s = decltype(sig);
      std::printf("  %-14s %-10s #%-3d %s\n", op.name.c_str(), std::string(to_string(op.kind)).c_str(), s::index,
                  to_string(op, s::value.runtime()).c_str());
      if (op.kind == op_kind::attention && s::value.output == nd_sbp{S(0), S(2)}) ++pinned_ok;
    });
  }
  return pinned_ok == 4 ? 0 : 1;  // the 4 attention cores kept their pinned layout
}
