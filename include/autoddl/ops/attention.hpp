#pragma once
// Per-mesh-axis signature rules of the multi-head attention core,
//   out = softmax(q k^T / sqrt(d) [+ causal mask]) v  per head,
// with q [batch, seq_q, heads * d], k, v [batch, seq_k, kv_heads * d]: grouped-query attention
// (Ainslie et al. 2023) where kv_heads < heads, query head h reading key/value head h / (heads /
// kv_heads), as LLaMA-2/3, Mistral and Qwen do; multi-head attention where kv_heads == heads.
// Exact splits only (Megatron-LM, Shoeybi 2019: attention heads split across devices; sequence
// split of the queries as in Korthikanti 2022, with k and v whole: context parallelism, where k
// and v arrive split on the sequence too and the boxing S(1) -> B all-gathers them, as Llama 3's
// context parallelism does, Dubey et al. 2024 section 3.3.2).
#include <cstdint>
#include <optional>

#include "autoddl/ops/detail/lift.hpp"
#include "autoddl/sbp/layout.hpp"

namespace autoddl {

/// One mesh axis of the attention core:
///   q S(0) k S(0) v S(0) -> S(0)   batch split
///   q S(2) k S(2) v S(2) -> S(2)   heads split (hidden dim, whole heads per device: see attention_exact)
///   q S(2) k B    v B    -> S(2)   query heads split, key/value heads whole (grouped-query only:
///                                  a tensor-parallel degree beyond kv_heads, each device reading
///                                  the key/value heads its query heads share, as Megatron-Core
///                                  replicates them)
///   q S(1) k B    v B    -> S(1)   query-sequence split, keys and values whole (causal too: the
///                                  mask uses global positions)
///   q B    k B    v B    -> B
/// Nonlinear (softmax), so never P. Example: attention_axis(S(1), B, B) == S(1).
constexpr std::optional<sbp> attention_axis(sbp q, sbp k, sbp v, bool grouped = false) {
  if (q.is_partial() || k.is_partial() || v.is_partial()) return std::nullopt;
  if (q.is_split() && (q.dim == 0 || q.dim == 2) && k == q && v == q) return q;
  if (q.is_split() && q.dim == 2 && grouped && k.is_broadcast() && v.is_broadcast()) return q;
  if (q.is_split() && q.dim == 1 && k.is_broadcast() && v.is_broadcast()) return q;
  if (q.is_broadcast() && k.is_broadcast() && v.is_broadcast()) return B;
  return std::nullopt;
}

constexpr std::optional<nd_sbp> attention_output(const nd_sbp& q, const nd_sbp& k, const nd_sbp& v, bool grouped = false) {
  return detail::lift([grouped](sbp a, sbp b, sbp c) { return attention_axis(a, b, c, grouped); }, q, k, v);
}

/// The n-D condition the per-axis rule cannot see: the hidden dims may be split only into whole
/// heads (the ways q's is split divide `heads`, the ways k's is split divide `kv_heads`), and a
/// device must hold the key/value heads its query heads read: the axes that split k's heads are
/// the outermost of those that split q's (the chunk order is mixed-radix, outer axis most
/// significant), so that query heads [h0, h0 + n) find key/value heads [h0 / g, (h0 + n) / g).
/// Example: q [B,S(2)]@2x4 needs heads % 4 == 0; q [S(2),S(2)] k [S(2),B]@2x4 is exact,
/// q [S(2),S(2)] k [B,S(2)] is not.
constexpr bool attention_exact(const nd_sbp& q, const nd_sbp& k, const mesh_shape& mesh, int heads, int kv_heads) {
  if (heads % split_factor(q, mesh, 2) != 0 || kv_heads % split_factor(k, mesh, 2) != 0) return false;
  bool k_split_ended = false;
  for (int a = 0; a < q.size(); ++a) {
    if (!(q[a] == S(2))) continue;
    if (k[a] == S(2)) {
      if (k_split_ended) return false;
    } else {
      k_split_ended = true;
    }
  }
  return true;
}

}  // namespace autoddl
