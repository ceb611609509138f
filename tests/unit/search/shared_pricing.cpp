// The planner's pricing shortcuts against pricing each thing on its own:
//   - ops (and parameters) priced alike copy one price: every op's candidates equal op_terms of
//     that op, every parameter's param_terms, on a GPT of identical blocks on 2-D and 3-D meshes;
//     the oracle of those prices is the closed form of a linear op's forward time, 2 M K N + M N
//     FLOPs shared by the devices that split its work, at the device's peak times its gemm
//     efficiency (docs/cost-model.md);
//   - a boxing_book shared by problems of one context prices every change of one mesh axis as
//     the collective's alpha-beta closed form (the boxing table, docs/cost-model.md:
//     ring all-gather, reduce-scatter and all-reduce, pairwise all-to-all), and every other
//     change as boxing_cost finds it alone; problems of one context share one book, of another
//     context not;
//   - the book's table of path summaries finds what std::unordered_map finds, through its growth.
#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <cstdint>
#include <optional>
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

bool close(double a, double b) { return std::abs(a - b) <= 1e-12 * std::max(std::abs(a), std::abs(b)); }

// Seconds of a linear op's forward under signature s, the whole step of `microbatches`, where no
// axis leaves Y partial: 2 M K N + M N FLOPs (the multiply-adds and the bias) over the product of
// the axes on which X or W is split, at peak * efficiency.
std::optional<double> linear_forward_seconds(const op_node& op, const signature& s, const mesh_shape& m,
                                             const device_spec& dev, dtype type, int microbatches) {
  const double k = double(op.inputs[0][op.inputs[0].rank() - 1]), n = double(op.outputs[0][op.outputs[0].rank() - 1]);
  const double rows = double(op.inputs[0].elements()) / k;
  double devices = 1;
  for (int a = 0; a < m.size(); ++a) {
    if (s.outputs[0][a].is_partial()) return std::nullopt;
    if (s.inputs[0][a].is_split() || s.params[0][a].is_split()) devices *= double(m[a]);
  }
  const double flops = 2 * rows * k * n + rows * n;
  return double(microbatches) * flops / devices / (dev.peak(type) * dev.efficiency_of(work_kind::gemm));
}

// Seconds and bytes per device of changing `from` into `to` where they differ on one axis only,
// by the closed form of that axis' collective on link l (n devices, T the bytes the axis group
// holds): all-gather (n-1) alpha + (n-1)/n T / beta; reduce-scatter the same plus (n-1)/n T
// gamma; all-reduce 2(n-1) alpha + 2(n-1)/n T / beta + (n-1)/n T gamma; all-to-all (n-1) alpha +
// (n-1)/n^2 T / beta; a local slice or zero-fill nothing. nullopt for other changes, and where
// another axis splits a dim this axis splits (the order of the splits then moves data).
struct closed_form {
  double seconds = 0;
  std::int64_t bytes = 0;
};
std::optional<closed_form> one_axis_change(const nd_sbp& from, const nd_sbp& to, const mesh_shape& m,
                                           const tensor_shape& shape, std::int64_t elem, const autoddl::link& l) {
  int axis = -1;
  for (int a = 0; a < m.size(); ++a)
    if (!(from[a] == to[a])) {
      if (axis >= 0) return std::nullopt;
      axis = a;
    }
  if (axis < 0) return std::nullopt;
  const sbp x = from[axis], y = to[axis];
  std::int64_t group_bytes = shape.elements() * elem;
  for (int b = 0; b < m.size(); ++b) {
    if (b == axis || !from[b].is_split()) continue;
    if ((x.is_split() && x.dim == from[b].dim) || (y.is_split() && y.dim == from[b].dim)) return std::nullopt;
    group_bytes /= m[b];
  }
  const std::int64_t n = m[axis], t = group_bytes;
  std::int64_t messages = 0, bytes = 0, reduced = 0;
  if (x.is_split() && y.is_broadcast()) messages = n - 1, bytes = (n - 1) * t / n;
  else if (x.is_partial() && y.is_split()) messages = n - 1, bytes = (n - 1) * t / n, reduced = bytes;
  else if (x.is_partial() && y.is_broadcast()) messages = 2 * (n - 1), bytes = 2 * (n - 1) * t / n, reduced = (n - 1) * t / n;
  else if (x.is_split() && y.is_split()) messages = n - 1, bytes = (n - 1) * t / (n * n);
  return closed_form{double(messages) * l.alpha + double(bytes) / l.beta + double(reduced) * l.gamma, bytes};
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
      int checked = 0, closed = 0;
      for (int i = 0; i < int(problem.model().ops.size()); ++i)
        for (int c = 0; c < p.candidates(i); ++c) {
          const op_node& op = problem.model().ops[std::size_t(i)];
          INFO(mesh << " recompute " << to_string(r) << " op " << op.name << " candidate " << c);
          CHECK(p.unary(i, c) == problem.op_terms(i, c));
          ++checked;
          if (op.kind != op_kind::linear || !op.attrs.bias) continue;
          if (const auto want = linear_forward_seconds(op, problem.op_candidate(i, c), o.mesh, o.hw.device, o.type,
                                                       o.microbatches)) {
            CHECK(close(p.unary(i, c).compute_fwd, *want));
            ++closed;
          }
        }
      CHECK(closed > 100);
      for (int q = 0; q < int(problem.model().params.size()); ++q)
        for (int c = 0; c < p.candidates(problem.param_node(q)); ++c) {
          INFO(mesh << " parameter " << q << " candidate " << c);
          CHECK(p.unary(problem.param_node(q), c) == problem.param_terms(q, c));
        }
      CHECK(checked > 1000);
    }
}

TEST_CASE("a boxing book shared by the problems of one context prices one-axis changes by their closed forms",
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
  REQUIRE_FALSE(hw.intra_node.two_regimes());
  REQUIRE_FALSE(hw.measured.copy.measured());  // no copies priced beside the collectives
  const auto lock = book.lock();
  const int id = book.shape_id_locked(shape);
  int closed = 0;
  for (const nd_sbp& from : layouts)
    for (const nd_sbp& to : layouts) {
      const path_summary s = book.summary_locked(from, to, id);
      INFO(to_string(from) << " -> " << to_string(to));
      CHECK(s.copy_seconds == 0);
      if (const auto want = one_axis_change(from, to, mesh, shape, 2, hw.intra_node)) {
        CHECK(close(s.seconds, want->seconds));
        CHECK(s.bytes == want->bytes);
        ++closed;
        continue;
      }
      const boxing_path alone = boxing_cost({from, to, mesh, shape, 2}, dm);
      CHECK(s.seconds == alone.cost);
      CHECK(s.steps == alone.size());
      CHECK(s.bytes == alone.bytes_per_device());
    }
  CHECK(closed > 800);  // 852 of the pairs change one axis
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
