#pragma once
// Bytes of a dropless expert dispatch over an expert-parallel axis of p ranks, E experts, rank j
// holding the E/p consecutive experts [j E/p, (j+1) E/p). A rank sorts its routed token rows by
// expert (one row per token and pick), then:
//   count exchange   an all-to-all of E/p counts to every rank:        (p-1) (E/p) 8 bytes
//   dispatch         the rows of experts held elsewhere, exactly:      sum_{e not held} n_e h b
//   return           the same rows back after the experts (combine):  the same bytes
// where n_e is this rank's tokens routed to expert e, h the hidden size and b the element's bytes.
// No padding: a capacity-factor dispatch moves E C h b per sequence whatever the routing, a
// dropless one moves what was routed. With balanced routing of t tokens and k picks each,
// E[n_e] = t k / E and the dispatch sends (p-1)/p t k h b: the S(i) -> S(j) row of the boxing
// table with T = p t k h b, the routed buffer of the whole axis.
// Example: p = 2, E = 4, counts {3, 0, 1, 2} on rank 0, h = 8, doubles (rows of 64 bytes): experts
// 2 and 3 live on rank 1, so 1 + 2 rows = 192 bytes go there; the counts cost 1 x 2 x 8 = 16 bytes.
#include <cstdint>
#include <span>

namespace autoddl {

/// Bytes rank `rank` of `ranks` sends when it dispatches rows of `row_bytes` with
/// `tokens_per_expert` (this rank's counts, all E experts) to the experts' owners.
/// Example: dropless_dispatch_bytes({3, 0, 1, 2}, 2, 0, 64) == 192.
constexpr std::int64_t dropless_dispatch_bytes(std::span<const std::int64_t> tokens_per_expert, int ranks, int rank,
                                               std::int64_t row_bytes) {
  const std::int64_t local = std::int64_t(tokens_per_expert.size()) / ranks;
  std::int64_t rows = 0;
  for (std::size_t e = 0; e < tokens_per_expert.size(); ++e)
    if (std::int64_t(e) / local != rank) rows += tokens_per_expert[e];
  return rows * row_bytes;
}

/// Bytes rank `rank` sends back after its experts ran: the rows every other rank routed to the
/// experts it holds. `histogram` is the axis's [ranks, E] tokens per expert, row j from rank j.
/// Example: histogram {3 0 1 2 | 1 1 4 0} over 2 ranks: rank 1 returns 3 + 0 rows to rank 0.
constexpr std::int64_t dropless_return_bytes(std::span<const std::int64_t> histogram, int ranks, int rank,
                                             std::int64_t row_bytes) {
  const std::int64_t experts = std::int64_t(histogram.size()) / ranks, local = experts / ranks;
  std::int64_t rows = 0;
  for (int j = 0; j < ranks; ++j)
    for (std::int64_t e = rank * local; e < (rank + 1) * local && j != rank; ++e) rows += histogram[std::size_t(j * experts + e)];
  return rows * row_bytes;
}

/// Bytes of the count exchange that precedes a dispatch: E/p 64-bit counts to each other rank.
/// Example: dropless_count_bytes(4, 2) == 16.
constexpr std::int64_t dropless_count_bytes(std::int64_t experts, int ranks) {
  return std::int64_t(ranks - 1) * (experts / ranks) * std::int64_t(sizeof(std::int64_t));
}

}  // namespace autoddl
