// The paper comparison's arithmetic and pictures against hand computations: reductions, the best
// expert (over-memory and inapplicable plans excluded), the rows where auto is slower, the table
// cells, and the line-plot writer's ticks and broken lines.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <limits>
#include <string>

#include "paper/comparison.hpp"
#include "paper/line_plot.hpp"

using namespace autoddl::paper;

namespace {
constexpr double nan_v = std::numeric_limits<double>::quiet_NaN();

row sample_row() {
  row r;
  r.system = "dgx1-v100";
  r.model = "VGG-16";
  r.mesh = "8x8";
  r.per_gpu_batch = 4;
  r.nodes = 8;
  r.plans = {{"auto", 0.030}, {"dp", 0.060}, {"owt", 0.040}, {"zero", 0.020, false}, {"megatron", nan_v}};
  return r;
}

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}
}  // namespace

TEST_CASE("a reduction is the expert's time saved, as a share of the expert's time", "[paper]") {
  CHECK(reduction_pct(0.030, 0.040) == Catch::Approx(25.0));   // 10 ms of 40
  CHECK(reduction_pct(0.030, 0.060) == Catch::Approx(50.0));   // 30 ms of 60
  CHECK(reduction_pct(0.050, 0.040) == Catch::Approx(-25.0));  // auto 10 ms slower
  CHECK(reduction_pct(0.040, 0.040) == 0.0);
}

TEST_CASE("the best expert is the fastest one that fits and applies", "[paper]") {
  const row r = sample_row();
  // zero is faster (20 ms) but over memory, megatron does not apply: owt (40 ms) is the best
  REQUIRE(r.best_expert() != nullptr);
  CHECK(r.best_expert()->plan == "owt");
  CHECK(auto_slower_than(r).empty());  // zero does not count: it does not fit
  row s = r;
  s.plans[3].feasible = true;  // zero now fits at 20 ms < auto's 30 ms
  CHECK(s.best_expert()->plan == "zero");
  CHECK(auto_slower_than(s) == std::vector<std::string>{"zero"});
  row none;
  none.plans = {{"auto", 0.030}, {"dp", nan_v}};
  CHECK(none.best_expert() == nullptr);
}

TEST_CASE("the table row holds the hand-computed cells", "[paper]") {
  const row r = sample_row();
  const std::string t = markdown_table({&r}, {"dp", "owt", "zero", "megatron"});
  // auto 30 ms; dp 60, owt 40, zero 20 over memory, megatron n/a; best owt: +25 %; vs dp +50 %
  CHECK(t.find("| 4 | 8 | 8x8 | 30.0 | 60.0 | 40.0 | 20.0 (over memory) | n/a | owt | +25.0 % | +50.0 % | +25.0 % | n/a | n/a |") !=
        std::string::npos);
  CHECK(count(t, "\n") == 3);  // header, rule, one row
}

TEST_CASE("a measured reduction inside the spreads says so", "[paper]") {
  row r;
  r.plans = {{"auto", 0.100, true, 0.004}, {"dp", 0.105, true, 0.002}, {"owt", 0.120, true, 0.002}};
  // |100 - 105| = 5 ms <= 4 + 2: within; |100 - 120| = 20 ms > 6: apart
  CHECK(reduction_cell(r, r.find("dp")) == "+4.8 % (within spread)");
  CHECK(reduction_cell(r, r.find("owt")) == "+16.7 %");
  CHECK(time_cell(r.find("dp"), 2) == "105.00 ± 2.00");
}

TEST_CASE("ticks fall on round values", "[paper][plot]") {
  CHECK(detail::linear_ticks(0, 10) == std::vector<double>{0, 2, 4, 6, 8, 10});
  CHECK(detail::linear_ticks(-3, 9) == std::vector<double>{-2, 0, 2, 4, 6, 8});
  CHECK(detail::log_ticks(1, 100) == std::vector<double>{1, 2, 5, 10, 20, 50, 100});
  CHECK(detail::log_ticks(1, 1e5) == std::vector<double>{1, 10, 100, 1000, 10000, 100000});
  CHECK(detail::tick_text(200000) == "200000");
  CHECK(detail::tick_text(2e6) == "2e+06");
  CHECK(detail::log_ticks(30, 60) == std::vector<double>{30, 40, 50, 60});  // within a decade: denser
  CHECK(detail::log_ticks(17.8, 178) == std::vector<double>{20, 30, 40, 50, 60, 80, 100, 150});
  CHECK(detail::log_ticks(316, 562) == std::vector<double>{350, 400, 450, 500, 550});  // too few: linear
}

TEST_CASE("a missing point breaks its line, and every line has a legend entry", "[paper][plot]") {
  figure f;
  f.title = "t";
  panel& p = f.add("panel", "nodes", "ms");
  p.log_x = true;
  p.lines.push_back({"auto", "#000", false, {{2, 1}, {4, 2}, {8, nan_v}, {16, 3}, {32, 4}}});
  p.lines.push_back({"dp <&>", "#f00", true, {{2, 2}, {4, 3}}});
  const std::string svg = f.svg();
  CHECK(count(svg, "<polyline") == 3);  // auto: 2..4 and 16..32; dp: one
  CHECK(count(svg, "<circle") == 6);    // every finite point marked
  CHECK(count(svg, "stroke-dasharray") == 2);  // dp's line and its legend sample
  CHECK(svg.find("dp &lt;&amp;&gt;") != std::string::npos);
  for (const char* tick : {">2<", ">4<", ">8<", ">16<", ">32<"}) CHECK(svg.find(tick) != std::string::npos);
}
