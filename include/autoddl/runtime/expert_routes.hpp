#pragma once
// The routes of a dropless dispatch, built on the host from each token's picks (the top-k
// expert indices of its router row, runtime/kernels/moe.hpp): one routed row per (token, pick),
// sorted by expert and, within an expert, by token (a stable counting sort), so that the rows
// bound for one expert, and for the ranks that hold consecutive experts, are contiguous.
//   order[r]              the token of routed row r
//   tokens_per_expert[e]  how many rows go to expert e (sums to tokens x k)
//   row_of[t E + e]       the routed row of token t at expert e, or -1 where t did not pick e
// Example: picks {0 2 | 2 3 | 0 2} (3 tokens, k = 2, E = 4) give order {0 2 | - | 0 1 2 | 1},
// tokens_per_expert {2, 0, 3, 1}, and row_of of token 1 {-1, -1, 3, 5}.
// Every pick is routed, whatever its gate: a picked gate that underflows to 0 still sends its row.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "autoddl/error.hpp"

namespace autoddl {

struct expert_routes {
  std::vector<std::int64_t> order;
  std::vector<std::int64_t> tokens_per_expert;
  std::vector<std::int64_t> row_of;
};

/// Routes of `tokens` tokens with `k` picks each among `experts` (picks [tokens, k], row-major).
/// @pre every pick lies in [0, experts) and a token's picks are distinct (else: an error naming it).
inline expert_routes route_by_expert(std::span<const std::int64_t> picks, std::int64_t tokens, std::int64_t k,
                                     std::int64_t experts) {
  if (std::int64_t(picks.size()) != tokens * k)
    detail::fail<error>("route_by_expert got " + std::to_string(picks.size()) + " picks for " + std::to_string(tokens) +
                " tokens of " + std::to_string(k) + " picks each");
  expert_routes r;
  r.tokens_per_expert.assign(std::size_t(experts), 0);
  r.row_of.assign(std::size_t(tokens * experts), -1);
  for (const std::int64_t e : picks) {
    if (e < 0 || e >= experts)
      detail::fail<error>("a token picked expert " + std::to_string(e) + " of " + std::to_string(experts) +
                  "; picks must lie in [0, experts)");
    ++r.tokens_per_expert[std::size_t(e)];
  }
  std::vector<std::int64_t> next(std::size_t(experts), 0);
  for (std::int64_t e = 1; e < experts; ++e)
    next[std::size_t(e)] = next[std::size_t(e - 1)] + r.tokens_per_expert[std::size_t(e - 1)];
  r.order.assign(std::size_t(tokens * k), 0);
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t j = 0; j < k; ++j) {
      const std::size_t e = std::size_t(picks[std::size_t(t * k + j)]);
      std::int64_t& slot = r.row_of[std::size_t(t * experts) + e];
      if (slot >= 0) detail::fail<error>("token " + std::to_string(t) + " picked expert " + std::to_string(e) + " twice");
      slot = next[e]++;
      r.order[std::size_t(slot)] = t;
    }
  return r;
}

/// Rows this rank sends to each of `ranks` ranks: the counts of the experts each one holds
/// (E / ranks consecutive experts per rank). Example: {2, 0, 3, 1} over 2 ranks gives {2, 4}.
inline std::vector<std::int64_t> rows_per_rank(std::span<const std::int64_t> tokens_per_expert, int ranks) {
  const std::size_t local = tokens_per_expert.size() / std::size_t(ranks);
  std::vector<std::int64_t> rows(std::size_t(ranks), 0);
  for (std::size_t e = 0; e < tokens_per_expert.size(); ++e) rows[e / local] += tokens_per_expert[e];
  return rows;
}

}  // namespace autoddl
