// The routes of a dropless dispatch (runtime/expert_routes.hpp) and the bytes it sends
// (cost/dropless.hpp): a hand-worked case, then random picks against brute force (tokens per
// expert counted pick by pick; every (token, pick) lands on exactly one row of its expert's
// contiguous block, in token order), and the refusals of picks that make no sense.
#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "autoddl/cost/dropless.hpp"
#include "autoddl/runtime/expert_routes.hpp"

using namespace autoddl;

namespace {
constexpr std::array<std::int64_t, 4> counts{3, 0, 1, 2};
constexpr std::array<std::int64_t, 8> histogram{3, 0, 1, 2, 1, 1, 4, 0};
}  // namespace

// Rank 0 of 2 holds experts 0 and 1: it sends experts 2 and 3's rows (1 + 2 of 64 bytes); rank 1
// returns the 3 + 0 rows rank 0 sent to experts 0 and 1, rank 0 returns rank 1's 1 + 1.
static_assert(dropless_dispatch_bytes(counts, 2, 0, 64) == 3 * 64);
static_assert(dropless_dispatch_bytes(counts, 2, 1, 64) == 3 * 64);
static_assert(dropless_return_bytes(histogram, 2, 0, 64) == 2 * 64);
static_assert(dropless_return_bytes(histogram, 2, 1, 64) == 3 * 64);
static_assert(dropless_count_bytes(4, 2) == 16 && dropless_count_bytes(8, 1) == 0);

TEST_CASE("dropless routes of a hand-worked case: rows sorted by expert, in token order within one", "[moe][dropless]") {
  const std::vector<std::int64_t> picks{0, 2, 2, 3, 0, 2};
  const expert_routes r = route_by_expert(picks, 3, 2, 4);
  CHECK(r.order == std::vector<std::int64_t>{0, 2, 0, 1, 2, 1});
  CHECK(r.tokens_per_expert == std::vector<std::int64_t>{2, 0, 3, 1});
  CHECK(r.row_of == std::vector<std::int64_t>{0, -1, 2, -1, -1, -1, 3, 5, 1, -1, 4, -1});
  CHECK(rows_per_rank(r.tokens_per_expert, 2) == std::vector<std::int64_t>{2, 4});
}

TEST_CASE("dropless routes of random picks agree with a brute-force count", "[moe][dropless]") {
  for (unsigned seed = 1; seed <= 200; ++seed) {
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    const std::int64_t experts = 1 + rng() % 9, k = 1 + rng() % experts, tokens = rng() % 13;
    std::vector<std::int64_t> picks;
    for (std::int64_t t = 0; t < tokens; ++t) {
      std::vector<std::int64_t> all(static_cast<std::size_t>(experts));
      for (std::int64_t e = 0; e < experts; ++e) all[std::size_t(e)] = e;
      std::shuffle(all.begin(), all.end(), rng);
      picks.insert(picks.end(), all.begin(), all.begin() + k);
    }
    const expert_routes r = route_by_expert(picks, tokens, k, experts);
    std::vector<std::int64_t> brute(static_cast<std::size_t>(experts), 0), start(static_cast<std::size_t>(experts), 0);
    for (const std::int64_t e : picks) ++brute[std::size_t(e)];
    CHECK(r.tokens_per_expert == brute);
    for (std::int64_t e = 1; e < experts; ++e) start[std::size_t(e)] = start[std::size_t(e - 1)] + brute[std::size_t(e - 1)];
    std::vector<int> hits(picks.size(), 0);
    for (std::int64_t t = 0; t < tokens; ++t)
      for (std::int64_t e = 0; e < experts; ++e) {
        const std::int64_t row = r.row_of[std::size_t(t * experts + e)];
        const bool picked = std::find(picks.begin() + t * k, picks.begin() + (t + 1) * k, e) != picks.begin() + (t + 1) * k;
        REQUIRE((row >= 0) == picked);
        if (!picked) continue;
        CHECK(row >= start[std::size_t(e)]);
        CHECK(row < start[std::size_t(e)] + brute[std::size_t(e)]);
        CHECK(r.order[std::size_t(row)] == t);
        ++hits[std::size_t(row)];
      }
    CHECK(std::count(hits.begin(), hits.end(), 1) == std::int64_t(picks.size()));
    for (std::size_t i = 1; i < r.order.size(); ++i)  // within an expert's block, tokens ascend
      if (std::upper_bound(start.begin(), start.end(), std::int64_t(i)) == std::upper_bound(start.begin(), start.end(), std::int64_t(i - 1)))
        CHECK(r.order[i - 1] < r.order[i]);
  }
}

TEST_CASE("dropless routes refuse a pick outside the experts and a token that picks one expert twice", "[moe][dropless]") {
  const std::vector<std::int64_t> outside{0, 4}, twice{1, 1};
  CHECK_THROWS_WITH(route_by_expert(outside, 1, 2, 4), "a token picked expert 4 of 4; picks must lie in [0, experts)");
  CHECK_THROWS_WITH(route_by_expert(twice, 1, 2, 4), "token 0 picked expert 1 twice");
}
