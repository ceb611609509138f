// planning_clock's attribution rules (search/planning_time.hpp), none of them about how long
// anything takes: a phase opened inside another counts nothing of its own, the exact reference
// counts on its own wherever it runs, the phases never add up to more than a clock read around
// them, and another thread's phases are its own.
#include <catch2/catch_test_macros.hpp>

#include <chrono>
#include <thread>

#include "autoddl/search/planning_time.hpp"

using namespace autoddl;

namespace planning_time_cases {

namespace {

double total() {
  double s = 0;
  for (std::size_t p = 0; p < planning_phases; ++p) s += planning_clock::seconds(planning_phase(p));
  return s;
}

}  // namespace

TEST_CASE("after reset every phase reads zero", "[search][planning_time]") {
  { const planning_clock::scope s(planning_phase::layout_search); }
  planning_clock::reset();
  CHECK(total() == 0);
}

TEST_CASE("a phase opened inside another counts towards the outer one", "[search][planning_time]") {
  planning_clock::reset();
  {
    const planning_clock::scope outer(planning_phase::megatron_layouts);
    const planning_clock::scope pipelines(planning_phase::pipeline_search);
    const planning_clock::scope layouts(planning_phase::layout_search);
  }
  CHECK(planning_clock::seconds(planning_phase::pipeline_search) == 0);
  CHECK(planning_clock::seconds(planning_phase::layout_search) == 0);
  CHECK(planning_clock::seconds(planning_phase::exact_reference) == 0);
}

TEST_CASE("the exact reference counts on its own inside another phase, and the phases fit in the time around them",
          "[search][planning_time]") {
  planning_clock::reset();
  const auto t0 = std::chrono::steady_clock::now();
  {
    const planning_clock::scope outer(planning_phase::pipeline_search);
    { const planning_clock::scope gap(planning_phase::exact_reference); }
    const planning_clock::scope inner(planning_phase::layout_search);  // still the pipeline search's
  }
  const double around = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(planning_clock::seconds(planning_phase::layout_search) == 0);
  CHECK(planning_clock::seconds(planning_phase::pipeline_search) >= 0);
  CHECK(planning_clock::seconds(planning_phase::exact_reference) >= 0);
  CHECK(total() <= around + 1e-9);  // (sums of nanosecond counts in seconds may round up)
}

TEST_CASE("another thread's phases are its own", "[search][planning_time]") {
  planning_clock::reset();
  std::thread([] {
    planning_clock::reset();
    const planning_clock::scope s(planning_phase::megatron_layouts);
  }).join();
  CHECK(planning_clock::seconds(planning_phase::megatron_layouts) == 0);
}

}  // namespace planning_time_cases
