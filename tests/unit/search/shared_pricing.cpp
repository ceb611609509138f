// The planner's pricing shortcuts against pricing each thing on its own:
//   - ops (and parameters) priced alike copy one price: every op's candidates equal op_terms of
//     that op, every parameter's param_terms, on a GPT of identical blocks on 2-D and 3-D meshes;
//   - a boxing_book shared by problems of one context gives the path boxing_cost finds alone,
//     and problems of one context share one book, of another context not;
//   - the book's table of path summaries finds what std::unordered_map finds, through its growth.
#include <catch2/catch_test_macros.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "autoddl/cost/boxing_book.hpp"
#include "autoddl/cost/hardware_io.hpp"
#include "autoddl/models/zoo.hpp"
#include "autoddl/search.hpp"

using namespace autoddl;

namespace shared_pricing_cases {

namespace {

bool same_terms(const cost_terms& a, const cost_terms& b) {
  return a.compute_fwd == b.compute_fwd && a.compute_bwd == b.compute_bwd && a.comm_fwd == b.comm_fwd &&
         a.comm_bwd == b.comm_bwd && a.comm_grad == b.comm_grad && a.memory == b.memory && a.transient == b.transient &&
         a.bytes == b.bytes;
}

}  // namespace

TEST_CASE("ops of identical blocks priced once carry every op's own price", "[search][planner]") {
  for (const char* mesh : {"2x4", "2x2x2"})
    for (recompute_mode r : {recompute_mode::none, recompute_mode::selective, recompute_mode::full}) {
      plan_options o;
      o.mesh = parse_mesh(mesh);
      o.hw = load_hardware("dgx-a100");
      o.type = dtype::bf16;
      o.recompute = r;
      o.microbatches = 2;
      const plan_problem problem(build_model("gpt:layers=3,hidden=64,heads=4,seq=32,batch=16,vocab=128", 2), o);
      const choice_problem& p = problem.untied();
      int checked = 0;
      for (int i = 0; i < int(problem.model().ops.size()); ++i)
        for (int c = 0; c < p.candidates(i); ++c) {
          INFO(mesh << " recompute " << to_string(r) << " op " << problem.model().ops[std::size_t(i)].name << " candidate " << c);
          CHECK(same_terms(p.unary(i, c), problem.op_terms(i, c)));
          ++checked;
        }
      for (int q = 0; q < int(problem.model().params.size()); ++q)
        for (int c = 0; c < p.candidates(problem.param_node(q)); ++c) {
          INFO(mesh << " parameter " << q << " candidate " << c);
          CHECK(same_terms(p.unary(problem.param_node(q), c), problem.param_terms(q, c)));
        }
      CHECK(checked > 1000);
    }
}

TEST_CASE("a boxing book shared by the problems of one context prices every path as boxing_cost alone",
          "[search][boxing]") {
  hardware hw = load_hardware("dgx-a100");
  const mesh_shape mesh = parse_mesh("2x2x2");
  const device_mesh dm = make_device_mesh(mesh, hw);
  boxing_book& book = boxing_book_for(dm, hw.measured.copy, 2);
  CHECK(&book == &boxing_book_for(dm, hw.measured.copy, 2));
  CHECK(&book != &boxing_book_for(dm, hw.measured.copy, 4));  // another element size
  hardware slower = hw;
  slower.intra_node.alpha *= 2;  // 2x2x2 on dgx-a100 runs over its intra-node links only
  CHECK(&book != &boxing_book_for(make_device_mesh(parse_mesh("2x2x2"), slower), hw.measured.copy, 2));
  const tensor_shape shape{8, 4, 6};
  std::vector<nd_sbp> layouts{nd_sbp{}};
  for (int a = 0; a < mesh.size(); ++a) {
    std::vector<nd_sbp> next;
    for (const nd_sbp& v : layouts)
      for (sbp s : {B, P, S(0), S(1), S(2)}) {
        nd_sbp w = v;
        w.push_back(s);
        if (a + 1 < mesh.size() || divides(shape, layout{w, mesh})) next.push_back(w);
      }
    layouts = std::move(next);
  }
  const auto lock = book.lock();
  const int id = book.shape_id_locked(shape);
  for (const nd_sbp& from : layouts)
    for (const nd_sbp& to : layouts) {
      const boxing_path alone = boxing_cost({from, to, mesh, shape, 2}, dm);
      const path_summary s = book.summary_locked(from, to, id);
      INFO(to_string(from) << " -> " << to_string(to));
      CHECK(s.seconds == alone.cost);
      CHECK(s.steps == alone.size());
      CHECK(s.bytes == alone.bytes_per_device());
      CHECK(s.copy_seconds == path_copy_time(alone, hw.measured.copy));
    }
}

TEST_CASE("the table of path summaries finds what a std::unordered_map finds, as it grows and after a clear",
          "[search][boxing]") {
  for (std::uint64_t seed : {1, 2, 3}) {
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    detail::summary_table table;
    std::unordered_map<std::uint64_t, path_summary> want;
    auto check_all = [&](int probes) {
      for (const auto& [k, v] : want) {
        const path_summary* got = table.find(k);
        REQUIRE(got != nullptr);
        CHECK(got->seconds == v.seconds);
        CHECK(got->bytes == v.bytes);
        CHECK(got->steps == v.steps);
      }
      for (int i = 0; i < probes; ++i) {  // keys never inserted (odd keys only go in below)
        const std::uint64_t k = (rng() >> 1) << 1;
        CHECK(table.find(k) == nullptr);
      }
    };
    for (int round = 0; round < 2; ++round) {
      // 5000 keys: the table grows from 1024 slots through 2048, ..., 16384
      for (int i = 0; i < 5000; ++i) {
        std::uint64_t k = rng() | 1;
        if (k == ~std::uint64_t(0) || want.count(k)) continue;
        const path_summary s{double(i) * 1e-6, double(i % 7), std::int64_t(rng() % 100000), double(i % 13), i % 5};
        table.insert(k, s);
        want.emplace(k, s);
        if (i % 997 == 0) check_all(20);
      }
      CHECK(table.size() == want.size());
      check_all(2000);
      table.clear();
      want.clear();
      CHECK(table.size() == 0);
      check_all(100);
    }
  }
}

}  // namespace shared_pricing_cases
