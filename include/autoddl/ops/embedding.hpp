#pragma once
// Per-mesh-axis signature rules of the token embedding (with optional learned positions) and of
// the softmax cross-entropy loss, both with vocabulary-parallel forms (Megatron-LM, Shoeybi 2019:
// parallel input embedding and parallel cross-entropy over vocab-split logits).
#include <optional>

#include "autoddl/ops/detail/lift.hpp"
#include "autoddl/sbp/nd_sbp.hpp"

namespace autoddl {

/// One mesh axis of Y = W[ids] for ids [..] of rank r, W [vocab, hidden]:
///   ids S(d) W B    -> Y S(d)   token split
///   ids B    W S(0) -> Y P      vocab-parallel: each device gathers the rows it owns, zeros elsewhere
///   ids B    W S(1) -> Y S(r)   hidden-parallel
///   ids B    W B    -> Y B
/// Token ids are not summable: never P. Example: embedding_axis(B, S(0), 2) == P.
constexpr std::optional<sbp> embedding_axis(sbp ids, sbp w, int ids_rank) {
  if (ids.is_split() && w.is_broadcast()) return ids;
  if (ids.is_broadcast() && w.is_split()) return w.dim == 0 ? P : S(ids_rank);
  if (ids.is_broadcast() && w.is_broadcast()) return B;
  return std::nullopt;
}

/// The position table [seq, hidden] on an axis where Y [batch, seq, hidden] is `y`:
/// B for B or a batch split, S(0) for a sequence split, S(1) for a hidden split, P for P.
constexpr sbp positions_for(sbp y) {
  if (y.is_split() && y.dim >= 1) return S(y.dim - 1);
  return y.is_partial() ? P : B;
}

/// Embedding with positions (ids [batch, seq]): embedding_axis, and pos as positions_for(Y).
constexpr std::optional<sbp> embedding_axis(sbp ids, sbp w, sbp pos) {
  std::optional<sbp> y = embedding_axis(ids, w, 2);
  if (!y || !(pos == positions_for(*y))) return std::nullopt;
  return y;
}

/// One mesh axis of loss = mean(cross_entropy(logits [..., vocab], labels [...])), rank r logits:
///   logits S(d) labels S(d) -> loss P   d < r-1: token split, each device sums its share
///   logits S(r-1) labels B  -> loss P   vocab-parallel: the row max, sum of exponentials and
///                                       target logit are all-reduced over the axis ([..] stats,
///                                       reported in op_work::stat_all_reduces)
///   logits B labels B -> loss B
/// Nonlinear in the logits: never P. Example: cross_entropy_axis(S(2), B, 3) == P.
constexpr std::optional<sbp> cross_entropy_axis(sbp logits, sbp labels, int logits_rank) {
  if (logits.is_split() && logits.dim < logits_rank - 1 && labels == logits) return P;
  if (logits.is_split() && logits.dim == logits_rank - 1 && labels.is_broadcast()) return P;
  if (logits.is_broadcast() && labels.is_broadcast()) return B;
  return std::nullopt;
}

constexpr std::optional<nd_sbp> embedding_output(const nd_sbp& ids, const nd_sbp& w, int ids_rank) {
  return detail::lift([&](sbp a, sbp b) { return embedding_axis(a, b, ids_rank); }, ids, w);
}
constexpr std::optional<nd_sbp> embedding_output(const nd_sbp& ids, const nd_sbp& w, const nd_sbp& pos) {
  return detail::lift([](sbp a, sbp b, sbp c) { return embedding_axis(a, b, c); }, ids, w, pos);
}
constexpr std::optional<nd_sbp> cross_entropy_output(const nd_sbp& logits, const nd_sbp& labels, int logits_rank) {
  return detail::lift([&](sbp a, sbp b) { return cross_entropy_axis(a, b, logits_rank); }, logits, labels);
}

}  // namespace autoddl
