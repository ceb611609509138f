// Bytes per parameter as the planner prices them (plan_problem::param_memory, summed over a tiny
// LLaMA's parameters and divided by its parameter count) against closed forms written here, for
// each optimizer the executor runs, each ZeRO stage and Megatron-LM's distributed optimizer, in
// fp32 and in bf16/fp16 with fp32 master weights; and the table of docs/reference/cost.md against
// the same planner, so that the documented figures cannot drift.
//
// The closed forms count what runtime/detail/parameter_store.hpp keeps for one parameter element,
// on d data-parallel devices: the parameter in its type (t bytes: fp32 4, bf16 and fp16 2), the
// gradient sum (g: 4 in fp32 or with fp32 sums, 2 with 16-bit sums), and the optimizer state in the
// master type (k: Adam's m and v, SGD's velocity, and for a 16-bit type the fp32 master: fp32 Adam
// 8, SGD 4; 16-bit Adam 12, SGD 8). ZeRO (Rajbhandari et al. 2020, section 5.1) shards k from stage
// 1, g from stage 2, t at stage 3; stage 1 sums each gradient whole before its one reduce-scatter,
// as Megatron-LM's distributed optimizer does (its table: bf16 parameters with fp32 gradients
// 6 + 12/d, fp32 8 + 8/d). The update reads and writes, per element: g, the states and the master
// read, the states and the master written (Adam 7, SGD 5 elements of the master type), plus for
// a 16-bit type the master rounded into the parameter (4 read, 2 written), a 16-bit gradient
// widened (2 read, 4 written), and fp16's loss-scale division (4 read, 4 written).
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "autoddl/models.hpp"
#include "autoddl/search.hpp"

using namespace autoddl;

namespace bytes_per_parameter_cases {
namespace {

const std::string tiny_llama = "llama:layers=2,hidden=32,heads=4,kv_heads=2,ffn=48,seq=16,batch=8,vocab=64";

enum class stage { dp, zero1, zero2, zero3, dopt };
const char* strategy_of(stage s) {
  switch (s) {
    case stage::dp: return "dp";
    case stage::zero1: return "zero:stage=1";
    case stage::zero2: return "zero:stage=2";
    case stage::zero3: return "zero:stage=3";
    case stage::dopt: return "megatron:tp=1,dopt=1";
  }
  return "";
}

struct per_parameter {
  double params = 0, grads = 0, optimizer = 0, update = 0;  // bytes per parameter (update: per updated element)
  double total() const { return params + grads + optimizer; }
};

// The planner's figures for one configuration on d devices.
per_parameter priced(dtype type, optimizer opt, bool fp32_sums, stage s, int d) {
  plan_options o;
  o.mesh = mesh_shape{d};
  o.hw = load_hardware("dgx-a100");  // no measured optimizer rates: the update is priced at its bytes
  o.type = type;
  o.opt = opt;
  o.fp32_gradient_sums = fp32_sums;
  o.zero1_layouts = o.zero2_layouts = true;  // the sliced updates of ZeRO stages 1 and 2 (and the distributed optimizer)
  const graph g = build_model(tiny_llama);
  plan_problem problem(g, o);
  const std::vector<int> pick = solve_plan(problem, parse_strategy(strategy_of(s))).pick;
  per_parameter r;
  double count = 0, updated = 0;
  for (int p = 0; p < int(g.params.size()); ++p) {
    const int c = pick[std::size_t(problem.param_node(p))];
    const memory_breakdown m = problem.param_memory(p, c);
    r.params += double(m.params), r.grads += double(m.grads), r.optimizer += double(m.optimizer);
    r.update += problem.param_terms(p, c).compute_bwd * o.hw.device.memory_bandwidth;
    count += double(g.params[std::size_t(p)].shape.elements());
    updated += double(local_shape(g.params[std::size_t(p)].shape, layout{problem.param_candidate(p, c).update, o.mesh}).elements());
  }
  r.params /= count, r.grads /= count, r.optimizer /= count, r.update /= updated;
  return r;
}

// The closed forms (header comment).
per_parameter closed_form(dtype type, optimizer opt, bool fp32_sums, stage s, int d) {
  const bool half = type == dtype::bf16 || type == dtype::fp16;
  const double t = half ? 2 : 4, g = half && !fp32_sums ? 2 : 4;
  const double k = (opt == optimizer::adam ? 8 : 4) + (half ? 4 : 0);
  const double dd = double(d);
  per_parameter r;
  r.params = s == stage::zero3 ? t / dd : t;
  r.grads = s == stage::zero2 || s == stage::zero3 ? g / dd : g;
  r.optimizer = s == stage::dp ? k : k / dd;
  r.update = opt == optimizer::adam ? 7 * 4 : 5 * 4;
  if (half) r.update += 4 + 2 + (fp32_sums ? 0 : 2 + 4) + (type == dtype::fp16 ? 8 : 0);
  return r;
}

}  // namespace

TEST_CASE("bytes per parameter priced by the planner equal the closed forms of each optimizer, ZeRO stage and dtype",
          "[search][memory][closed-form]") {
  for (const dtype type : {dtype::fp32, dtype::bf16, dtype::fp16})
    for (const optimizer opt : {optimizer::adam, optimizer::sgd_momentum})
      for (const bool fp32_sums : {true, false}) {
        if (type == dtype::fp32 && !fp32_sums) continue;
        for (const stage s : {stage::dp, stage::zero1, stage::zero2, stage::zero3, stage::dopt})
          for (const int d : {2, 4, 8}) {
            const per_parameter got = priced(type, opt, fp32_sums, s, d), want = closed_form(type, opt, fp32_sums, s, d);
            INFO(to_string(type) << ", " << to_string(opt) << (fp32_sums ? ", fp32 sums, " : ", 16-bit sums, ")
                                 << strategy_of(s) << " on " << d << " devices");
            CHECK(std::abs(got.params - want.params) < 1e-9);
            CHECK(std::abs(got.grads - want.grads) < 1e-9);
            CHECK(std::abs(got.optimizer - want.optimizer) < 1e-9);
            CHECK(std::abs(got.update - want.update) < 1e-6);
          }
      }
}

// Megatron-LM's table of bytes per parameter (docs/source/distrib_optimizer.md): bf16 parameters
// with fp32 gradients and Adam, 18 without the distributed optimizer and 6 + 12/d with it; fp32,
// 16 and 8 + 8/d.
TEST_CASE("Adam's bytes per parameter equal Megatron-LM's distributed-optimizer table", "[search][memory][closed-form]") {
  for (const int d : {2, 4, 8}) {
    INFO(d << " devices");
    CHECK(priced(dtype::bf16, optimizer::adam, true, stage::dp, d).total() == 18);
    CHECK(std::abs(priced(dtype::bf16, optimizer::adam, true, stage::dopt, d).total() - (6 + 12.0 / d)) < 1e-9);
    CHECK(priced(dtype::fp32, optimizer::adam, true, stage::dp, d).total() == 16);
    CHECK(std::abs(priced(dtype::fp32, optimizer::adam, true, stage::dopt, d).total() - (8 + 8.0 / d)) < 1e-9);
  }
}

namespace {

// "2 + 12/d" at d; a cell with anything else fails the test.
double evaluate(const std::string& cell, int d) {
  double sum = 0;
  std::stringstream in(cell);
  std::string term;
  while (std::getline(in, term, '+')) {
    const std::size_t slash = term.find('/');
    char* end = nullptr;
    const double x = std::strtod(term.c_str(), &end);
    if (end == term.c_str()) FAIL("cannot read the term '" << term << "' of '" << cell << "'");
    if (slash != std::string::npos && term.find('d', slash) == std::string::npos) FAIL("a term divides by other than d: " << cell);
    sum += slash == std::string::npos ? x : x / d;
  }
  return sum;
}

std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> r;
  std::stringstream in(line);
  std::string c;
  std::getline(in, c, '|');  // before the first bar
  while (std::getline(in, c, '|')) {
    const std::size_t a = c.find_first_not_of(' '), b = c.find_last_not_of(' ');
    r.push_back(a == std::string::npos ? "" : c.substr(a, b - a + 1));
  }
  return r;
}

}  // namespace

// The docs' table: | dtype | optimizer | gradient sums | dp | ZeRO-1 and the distributed optimizer |
// ZeRO-2 | ZeRO-3 | update reads + writes |, one row per configuration.
TEST_CASE("docs/reference/cost.md's bytes per parameter equal the planner's", "[search][memory][docs]") {
  const char* root = std::getenv("AUTODDL_SOURCE_ROOT");
  if (root == nullptr) SKIP("AUTODDL_SOURCE_ROOT is not set (meson test sets it)");
  std::ifstream docs(std::string(root) + "/docs/reference/cost.md");
  REQUIRE(docs);
  std::string line;
  bool in_table = false;
  int rows = 0;
  while (std::getline(docs, line)) {
    if (line.rfind("| dtype | optimizer | gradient sums |", 0) == 0) in_table = true;
    if (!in_table) continue;
    if (line.empty()) break;
    const std::vector<std::string> c = cells(line);
    if (c.size() < 8 || c[0] == "dtype" || c[0].rfind("---", 0) == 0) continue;
    const dtype type = parse_dtype(c[0]);
    const optimizer opt = parse_optimizer(c[1]);
    const bool fp32_sums = c[2] == "fp32";
    for (const int d : {2, 4, 8}) {
      INFO(line << " at d = " << d);
      CHECK(std::abs(evaluate(c[3], d) - priced(type, opt, fp32_sums, stage::dp, d).total()) < 1e-9);
      CHECK(std::abs(evaluate(c[4], d) - priced(type, opt, fp32_sums, stage::zero1, d).total()) < 1e-9);
      CHECK(std::abs(evaluate(c[4], d) - priced(type, opt, fp32_sums, stage::dopt, d).total()) < 1e-9);
      CHECK(std::abs(evaluate(c[5], d) - priced(type, opt, fp32_sums, stage::zero2, d).total()) < 1e-9);
      CHECK(std::abs(evaluate(c[6], d) - priced(type, opt, fp32_sums, stage::zero3, d).total()) < 1e-9);
      CHECK(std::abs(evaluate(c[7], d) - priced(type, opt, fp32_sums, stage::dp, d).update) < 1e-6);
    }
    ++rows;
  }
  CHECK(rows == 8);
}

}  // namespace bytes_per_parameter_cases
