// The 1F1B order (runtime/pipeline_schedule.hpp) replayed for every p <= 8 stages and m <= 16
// micro-batches as the trainer runs it: sends never block, a forward on stage s > 0 waits for
// stage s-1's forward of the same micro-batch, a backward on s < p-1 for stage s+1's backward.
// Oracles: the replay finishes (no deadlock); each stage runs every forward and backward once,
// backward k after forward k; a stage holds at most min(p - s, m) micro-batches (Narayanan et al.
// 2021: the first stage holds p); with unit-time forwards and backwards the step takes
// (m + p - 1) x 2 units (the 1F1B bubble, section 2.2.1).
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <vector>

#include "autoddl/runtime/pipeline_schedule.hpp"

using namespace autoddl;

namespace {

struct replay {
  bool finished = false;
  int makespan = 0;                  // time units, one per slot
  std::vector<int> most_in_flight;   // per stage
};

// Event-by-event: at each time unit every stage whose next slot's message is in runs it.
replay run(int p, int m) {
  std::vector<std::vector<pipeline_slot>> order;
  for (int s = 0; s < p; ++s) order.push_back(one_f_one_b(p, s, m));
  std::vector<std::vector<int>> fwd_done(p, std::vector<int>(m, -1)), bwd_done(p, std::vector<int>(m, -1));
  std::vector<std::size_t> next(p, 0);
  replay r;
  r.most_in_flight.assign(p, 0);
  std::vector<int> in_flight(p, 0);
  for (int t = 0; t < 4 * (m + p) + 8; ++t) {
    bool all = true;
    for (int s = 0; s < p; ++s) {
      if (next[s] == order[s].size()) continue;
      all = false;
      const pipeline_slot x = order[s][next[s]];
      const int k = x.microbatch;
      // a message sent at the end of time unit u is there from u + 1
      const bool ready = x.forward ? (s == 0 || (fwd_done[s - 1][k] >= 0 && fwd_done[s - 1][k] < t))
                                   : (fwd_done[s][k] >= 0 && (s == p - 1 || (bwd_done[s + 1][k] >= 0 && bwd_done[s + 1][k] < t)));
      if (!ready) continue;
      (x.forward ? fwd_done : bwd_done)[s][k] = t;
      in_flight[s] += x.forward ? 1 : -1;
      r.most_in_flight[s] = std::max(r.most_in_flight[s], in_flight[s]);
      ++next[s];
      r.makespan = t + 1;
    }
    if (all) {
      r.finished = true;
      return r;
    }
  }
  return r;
}

}  // namespace

TEST_CASE("1F1B orders run every micro-batch once, backward after forward", "[runtime][pipeline]") {
  CHECK(one_f_one_b(2, 0, 3) == std::vector<pipeline_slot>{{true, 0}, {true, 1}, {false, 0}, {true, 2}, {false, 1}, {false, 2}});
  CHECK(one_f_one_b(2, 1, 3) == std::vector<pipeline_slot>{{true, 0}, {false, 0}, {true, 1}, {false, 1}, {true, 2}, {false, 2}});
  for (int p = 1; p <= 8; ++p)
    for (int s = 0; s < p; ++s)
      for (int m = 1; m <= 16; ++m) {
        const auto o = one_f_one_b(p, s, m);
        REQUIRE(o.size() == std::size_t(2 * m));
        std::vector<int> f(m, -1), b(m, -1);
        for (int i = 0; i < int(o.size()); ++i) {
          int& slot = (o[std::size_t(i)].forward ? f : b)[std::size_t(o[std::size_t(i)].microbatch)];
          CHECK(slot == -1);
          slot = i;
        }
        for (int k = 0; k < m; ++k) CHECK(f[std::size_t(k)] < b[std::size_t(k)]);
      }
  CHECK_THROWS_AS(one_f_one_b(2, 2, 1), error);
  CHECK_THROWS_AS(one_f_one_b(2, 0, 0), error);
}

TEST_CASE("1F1B with non-blocking sends never deadlocks, holds min(p - s, m) micro-batches, takes (m + p - 1) x 2",
          "[runtime][pipeline]") {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m) {
      INFO(p << " stages, " << m << " micro-batches");
      const replay r = run(p, m);
      REQUIRE(r.finished);
      CHECK(r.makespan == 2 * (m + p - 1));
      for (int s = 0; s < p; ++s) CHECK(r.most_in_flight[std::size_t(s)] == std::min(p - s, m));
    }
}
