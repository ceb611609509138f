// The planner's choice between measured and analytical kernel prices (search/kernel_prices.hpp):
// a profile whose table holds a kernel of known seconds makes op_terms return exactly those
// seconds; a kernel of a kind the table has, at another shape, gets the per-kind fit (a closed
// form here); a kind the table lacks keeps the analytical formula; the counts say which.
#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <string>

#include "autoddl/cost/compute.hpp"
#include "autoddl/cost/hardware_io.hpp"
#include "autoddl/models/zoo.hpp"
#include "autoddl/search/planner.hpp"

using namespace autoddl;

namespace measured_prices_cases {

namespace {

const char* spec = "mlp:layers=2,hidden=64,batch=16,in=32,out=8";

plan_options two_ranks() {
  plan_options o;
  o.mesh = parse_mesh("2");
  o.hw = load_hardware("cpu-local");
  o.hw.measured = {};
  return o;
}

std::vector<bool> input_grads(const graph& g, int op) {
  std::vector<bool> r;
  for (const tensor_ref& t : g.op_inputs[std::size_t(op)]) r.push_back(t.op >= 0);
  return r;
}

int first_of(const graph& g, op_kind k) {
  for (std::size_t i = 0; i < g.ops.size(); ++i)
    if (g.ops[i].kind == k) return int(i);
  FAIL("no such op");
  return -1;
}

}  // namespace

TEST_CASE("a measured kernel is priced at exactly its measured seconds, others by fit or formula", "[search][measured]") {
  const graph g = build_model(spec);
  plan_options o = two_ranks();
  const int lin = first_of(g, op_kind::linear), relu = first_of(g, op_kind::relu);
  const auto sigs = signatures(g.ops[std::size_t(lin)], o.mesh);
  REQUIRE(sigs.size() >= 2);
  const std::string key0 = kernel_key(g.ops[std::size_t(lin)], sigs[0], o.mesh, input_grads(g, lin));
  o.hw.measured.kernels.push_back({"linear", key0, dtype::fp32, 0, 0, 0, 1.25e-3, 2.5e-3});
  plan_problem problem(g, o);
  const cost_terms t = problem.op_terms(lin, 0);
  CHECK(t.compute_fwd == 1.25e-3);
  CHECK(t.compute_bwd == 2.5e-3);
  // the fit of one entry whose FLOPs and bytes are 0 is the constant a = its seconds: every other
  // linear shape is priced at it (the "fitted" source), unlike the analytical formula
  for (int c = 1; c < int(problem.op_candidates(lin).size()); ++c) {
    const std::string key = kernel_key(g.ops[std::size_t(lin)], problem.op_candidates(lin)[std::size_t(c)], o.mesh, input_grads(g, lin));
    if (key == key0) continue;
    CHECK(problem.op_terms(lin, c).compute_fwd == 1.25e-3);
  }
  // relu has no entry and no kind in the table: the roofline of cost/compute.hpp
  const op_work w = device_work(g.ops[std::size_t(relu)], problem.op_candidates(relu)[0], o.mesh, 4);
  CHECK(problem.op_terms(relu, 0).compute_fwd == elementwise_time(w.fwd_flops, double(w.fwd_bytes_moved), dtype::fp32, o.hw.device));
  const kernel_price_counts k = problem.kernel_price_counts_of();
  CHECK(k.measured >= 1);
  CHECK(k.fitted >= 1);
  CHECK(k.analytical >= 1);
  CHECK(k.total() == [&] {
    int n = 0;
    for (int i = 0; i < int(g.ops.size()); ++i) n += int(problem.op_candidates(i).size());
    return n;
  }());
}

TEST_CASE("a profile without a kernel table prices every op analytically", "[search][measured]") {
  plan_problem problem(build_model(spec), two_ranks());
  const kernel_price_counts k = problem.kernel_price_counts_of();
  CHECK(k.measured == 0);
  CHECK(k.fitted == 0);
  CHECK(k.analytical == k.total());
}

TEST_CASE("the optimizer update is priced at the measured rate over each update shard", "[search][measured]") {
  plan_options o = two_ranks();
  o.opt = optimizer::sgd_momentum;
  o.hw.measured.sgd_momentum = {1e-6, 2e-9};
  plan_problem problem(build_model(spec), o);
  for (int p = 0; p < int(problem.model().params.size()); ++p)
    for (int c = 0; c < int(problem.param_candidates(p).size()); ++c) {
      const double elems = double(local_shape(problem.model().params[std::size_t(p)].shape,
                                              layout{problem.param_candidates(p)[std::size_t(c)].update, o.mesh}).elements());
      CHECK(std::abs(problem.param_terms(p, c).compute_bwd - (1e-6 + 2e-9 * elems)) <= 1e-15);
    }
}

}  // namespace measured_prices_cases
