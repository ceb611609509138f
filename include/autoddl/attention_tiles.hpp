#pragma once
// The tiling of the fused attention kernel (FlashAttention-2, Dao 2023): queries in tiles of
// attention_query_tile rows against keys in tiles of attention_key_tile, a causal mask skipping
// every key tile that lies wholly after a query tile's last position. The CPU kernel
// (backend/cpu/attention.hpp) loops over exactly these tiles and the price (ops/work.hpp) counts
// them, so both read the one definition here.
//   sq = sk = 130, causal, q_offset 0: query tiles [0,64) [64,128) [128,130) see 64, 128, 130
//   keys; 64*64 + 64*128 + 2*130 = 12,548 scores per head, against 16,900 for the whole square.
#include <algorithm>
#include <cstdint>

#include "autoddl/token_order.hpp"

namespace autoddl {

inline constexpr std::int64_t attention_query_tile = 64;  ///< query rows per tile
inline constexpr std::int64_t attention_key_tile = 64;    ///< keys per tile

/// The keys [0, result) that the query tile of `rows` local queries from row r0 visits: all sk
/// without a mask; under a causal mask, the key tiles up to the one holding the global position
/// of its last query, q_offset + r0 + rows - 1 (keys past it inside that tile are masked).
constexpr std::int64_t attention_tile_keys(std::int64_t r0, std::int64_t rows, std::int64_t sk, std::int64_t q_offset,
                                           bool causal) {
  if (!causal) return sk;
  const std::int64_t last = q_offset + r0 + rows - 1;
  if (last < 0) return 0;
  return std::min(sk, (last / attention_key_tile + 1) * attention_key_tile);
}

namespace detail {
/// floor(a / b) for b > 0.
constexpr std::int64_t floor_div(std::int64_t a, std::int64_t b) { return a / b - (a % b != 0 && a < 0 ? 1 : 0); }
}  // namespace detail

/// The scores (query, key pairs) the fused kernel computes for one head of one sequence: the
/// rows of each query tile times the keys it visits, in closed form (a sequence of 10^10 tokens
/// prices as fast as one of 10). Under a causal mask the full query tile i (rows 64 i ..
/// 64 i + 63) visits no keys while its last position q_offset + 64 i + 63 < 0, else
/// min(sk, 64 (i + c + 1)) keys with c = floor((q_offset + 63) / 64): an arithmetic series up to
/// the tile that reaches sk, sk from there on; the partial last tile is counted on its own.
constexpr double attention_tile_scores(std::int64_t sq, std::int64_t sk, std::int64_t q_offset, bool causal) {
  constexpr std::int64_t t = attention_query_tile;
  static_assert(attention_query_tile == attention_key_tile, "the series below steps one key tile per query tile");
  if (sq <= 0 || sk <= 0) return 0;
  const std::int64_t full = sq / t, rest = sq - full * t;
  const double last = rest > 0 ? double(rest) * double(attention_tile_keys(full * t, rest, sk, q_offset, causal)) : 0.0;
  if (!causal) return double(full) * double(t) * double(sk) + last;
  const std::int64_t c = detail::floor_div(q_offset + t - 1, t);
  const std::int64_t a = std::clamp<std::int64_t>(-c, 0, full);                           // first tile seeing a key
  const std::int64_t b = std::clamp<std::int64_t>((sk + t - 1) / t - c - 1, a, full);     // first tile seeing all sk
  const double n = double(b - a);
  const double series = double(t) * (n * (double(a) + double(b) - 1) / 2 + n * double(c + 1));  // sum of 64 (i + c + 1)
  return double(t) * (series + double(full - b) * double(sk)) + last;
}

/// The scores of one head of one sequence whose local queries are `runs` (token_order.hpp) of
/// natural positions, against sk keys in natural order: each run is tiled on its own, as the
/// kernel calls it run by run.
constexpr double attention_run_scores(const std::vector<token_run>& runs, std::int64_t sk, bool causal) {
  double n = 0;
  for (const token_run& r : runs) n += attention_tile_scores(r.length, sk, r.position, causal);
  return n;
}

/// The scores of the busiest of `parts` devices splitting the queries of one head of one
/// sequence of `seq` tokens contiguously, in the token order `order`: under a causal mask the
/// last device where the order is natural, any device where it pairs chunks for a divisor of
/// its parts. seq = 256, causal, 2 parts: natural 64 * 192 + 64 * 256 (the second half's two
/// query tiles), balanced (chunks 0 and 3, 1 and 2 of 64) 64 * 64 + 64 * 256 = 64 * 128 + 64 * 192.
constexpr double attention_busiest_scores(std::int64_t seq, std::int64_t parts, const token_order& order, bool causal) {
  const std::int64_t sq = seq / parts;
  double most = 0;
  for (std::int64_t d = 0; d < parts; ++d)
    most = std::max(most, attention_run_scores(order.runs(d * sq, sq), seq, causal));
  return most;
}

static_assert(attention_busiest_scores(256, 2, token_order{256, 1}, true) == 64 * 192 + 64 * 256);
static_assert(attention_busiest_scores(256, 2, token_order{256, 2}, true) == 64 * 64 + 64 * 256);
static_assert(attention_busiest_scores(256, 2, token_order{256, 2}, true) == 64 * 128 + 64 * 192);

static_assert(attention_tile_scores(130, 130, 0, true) == 64 * 64 + 64 * 128 + 2 * 130);
static_assert(attention_tile_scores(7, 9, 0, false) == 63);
static_assert(attention_tile_scores(256, 256, 0, true) == 64.0 * (64 + 128 + 192 + 256));
static_assert(attention_tile_scores(128, 256, 128, true) == 64.0 * (192 + 256));  // the second half's queries

}  // namespace autoddl
