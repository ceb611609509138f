#pragma once
// The order a context-parallel run feeds the tokens of each sequence in: load balancing of a
// causal attention by pairing chunks, as Megatron-Core's and Llama 3's context parallelism do
// (Dubey et al. 2024, section 3.3.2). The S tokens of a sequence are cut into 2p chunks of
// c = S / (2p); the run lays them out so that part d of a contiguous split into p parts holds
// chunks d and 2p-1-d, in that order:
//   S = 8, p = 2 (c = 2): permuted index 0 1 2 3 4 5 6 7 holds natural position 0 1 6 7 2 3 4 5
// Under a causal mask every part then sees the same number of (query, key) pairs: chunk d's
// queries see d + 1/2 chunks of keys, chunk 2p-1-d's see 2p - d - 1/2, together 2p chunks.
// A contiguous split into q parts, q dividing p, is balanced too: part d's p/q consecutive parts
// of the finer split hold chunks d and 2q-1-d of a cut into 2q chunks.
// Everything per token (norms, linears, the loss) is indifferent to the order; what reads a
// position (the data, rotary embeddings, the causal mask) maps an index of the permuted sequence
// to its natural position. p = 1 is the natural order.
#include <algorithm>
#include <cstdint>
#include <vector>

namespace autoddl {

/// A run of tokens that are consecutive both where a device holds them and in the natural order:
/// local rows [row, row + length) hold natural positions [position, position + length).
struct token_run {
  std::int64_t row = 0, position = 0, length = 0;
  friend constexpr bool operator==(const token_run&, const token_run&) = default;
};

/// The permutation of one sequence of `seq` tokens for a split into `parts` (see above).
struct token_order {
  std::int64_t seq = 0;    ///< tokens per sequence
  std::int64_t parts = 1;  ///< p: 2p chunks; 1 is the natural order

  constexpr bool natural() const { return parts <= 1; }
  constexpr std::int64_t chunk() const { return seq / (2 * parts); }
  /// The natural position of index j of the permuted sequence.
  constexpr std::int64_t position(std::int64_t j) const {
    if (natural()) return j;
    const std::int64_t c = chunk(), d = j / (2 * c), r = j % (2 * c);
    return r < c ? d * c + r : (2 * parts - 1 - d) * c + r - c;
  }
  /// Permuted indices [first, first + count) as runs in local order (a device holding them has
  /// local row 0 at `first`), adjacent runs merged where their positions continue.
  ///   token_order{8, 2}.runs(0, 4) == {{0, 0, 2}, {2, 6, 2}}
  constexpr std::vector<token_run> runs(std::int64_t first, std::int64_t count) const {
    std::vector<token_run> out;
    for (std::int64_t r = 0; r < count;) {
      const std::int64_t j = first + r;
      const std::int64_t len = natural() ? count : std::min(count - r, chunk() - j % chunk());
      if (!out.empty() && out.back().position + out.back().length == position(j)) out.back().length += len;
      else out.push_back({r, position(j), len});
      r += len;
    }
    return out;
  }
  friend constexpr bool operator==(const token_order&, const token_order&) = default;
};

/// The balanced order for a sequence of `seq` tokens split into `parts`: chunks paired where
/// 2 parts divide seq, else the natural order (the split runs unbalanced).
constexpr token_order balanced_order(std::int64_t seq, std::int64_t parts) {
  if (parts > 1 && seq > 0 && seq % (2 * parts) == 0) return {seq, parts};
  return {seq, 1};
}

static_assert(token_order{8, 2}.position(2) == 6 && token_order{8, 2}.position(4) == 2);
static_assert(token_order{8, 2}.runs(0, 4) == std::vector<token_run>{{0, 0, 2}, {2, 6, 2}});
static_assert(token_order{8, 4}.runs(0, 4) == std::vector<token_run>{{0, 0, 1}, {1, 7, 1}, {2, 1, 1}, {3, 6, 1}});
static_assert(token_order{8, 1}.runs(2, 3) == std::vector<token_run>{{0, 2, 3}});
static_assert(balanced_order(6, 2).natural() && !balanced_order(8, 2).natural());

}  // namespace autoddl
