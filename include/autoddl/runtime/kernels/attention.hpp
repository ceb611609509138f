#pragma once
// The multi-head attention core on local shards: q [b, sq, heads * d], k, v [b, sk, kv_heads * d]
// ->  out = dropout(softmax(q k^T / sqrt(d) [+ causal mask])) v   per query head.
// Under a hidden split the device holds whole heads (heads * local h / global h of them); under
// a query-sequence split it holds queries [q0, q0 + sq) with all keys, and the causal mask
// compares global positions: query q0 + i sees keys j <= q0 + i. The dropout on the
// probabilities [B, heads, Sq, Sk] is keyed by their global index, so it matches serial.
// Grouped-query attention (kv_heads < heads): query head h reads key/value head h / g, g = heads
// / kv_heads; the gradients of the query heads of a group add into their key/value head's block.
//
// Two kernels, one result:
// - fused (the default): the Device's attention_fwd / attention_bwd (FlashAttention-2's
//   algorithm, backend/device.hpp attention_desc): keeps the output and one log-sum-exp per row
//   [b, heads, sq] (a statistic); backward reads q, k, v, the output and the lse, and recomputes
//   the probabilities tile by tile. Memory O(s) per row of queries.
// - unfused (op_attrs::unfused_attention): GEMMs and a softmax over Device primitives; saves the
//   probabilities [b, heads, sq, sk] (before dropout) and its backward allocates two more buffers
//   of that size; backward reads q, k, v where they are. A causal attention skips the products of
//   the key blocks its query blocks cannot see (query_blocks).
#include <algorithm>
#include <cmath>
#include <span>
#include <utility>
#include <vector>

#include "autoddl/index.hpp"
#include "autoddl/runtime/kernels/context.hpp"

namespace autoddl::detail {

struct attention_dims {
  std::int64_t b, sq, sk, heads, dh;  ///< local batch, queries, keys, query heads; head size
  std::int64_t q_offset;              ///< global position of the first local query
  shard_info probs;                   ///< this device's block of the probabilities [B, heads, Sq, Sk]
  std::int64_t group = 1;             ///< query heads per key/value head (global)
  std::int64_t head0 = 0;             ///< global index of the first local query head
  std::int64_t kv_heads = 0, kv0 = 0; ///< local key/value heads and the global index of the first
  /// The local key/value head that local query head i reads.
  std::int64_t kv_of(std::int64_t i) const { return (head0 + i) / group - kv0; }
};

template <class T>
attention_dims attention_dims_of(const kernel_context<T>& c) {
  const shard_info& q = c.shards.inputs[0];
  const shard_info& k = c.shards.inputs[1];
  attention_dims a{};
  a.b = q.local[0];
  a.sq = q.local[1];
  a.sk = k.local[1];
  a.dh = q.global[2] / c.op.attrs.heads;
  a.heads = q.local[2] / a.dh;
  a.q_offset = q.offset[1];
  a.probs.global = tensor_shape{q.global[0], c.op.attrs.heads, q.global[1], k.global[1]};
  a.probs.local = tensor_shape{a.b, a.heads, a.sq, a.sk};
  a.probs.offset = {q.offset[0], q.offset[2] / a.dh, q.offset[1], 0};
  a.group = c.op.attrs.heads / c.op.attrs.key_value_heads();
  a.head0 = q.offset[2] / a.dh;
  a.kv_heads = k.local[2] / a.dh;
  a.kv0 = k.offset[2] / a.dh;
  return a;
}

template <class T>
bool attention_drops(const kernel_context<T>& c) {
  return c.training && c.op.attrs.dropout > 0;
}

/// Where local query head i's blocks sit: in q or dq [b, sq, heads * d] at i d (rows heads * d
/// apart, batch entries sq heads d apart), in k, v, dk, dv [b, sk, kv_heads * d] at kv_of(i) d,
/// in the scores [b, heads, sq, sk] at i sq sk (batch entries heads sq sk apart). Each GEMM of a
/// head runs over the batch in one strided call; q, k, v and their gradients are read and
/// written where they are, in the model's layout.
struct head_blocks {
  std::size_t q, kv, scores;
  std::int64_t ldq, ldkv, q_batch, kv_batch, scores_batch;
};
inline head_blocks head_blocks_of(const attention_dims& a, std::int64_t i) {
  const std::int64_t dh = a.dh;
  return {std::size_t(i * dh), std::size_t(a.kv_of(i) * dh), std::size_t(i * a.sq * a.sk),
          a.heads * dh, a.kv_heads * dh, a.sq * a.heads * dh, a.sk * a.kv_heads * dh, a.heads * a.sq * a.sk};
}

/// Rows [r0, r0 + rows) of the local queries and the keys [0, keys) they see. A causal attention
/// runs its queries in blocks of 64 rows, each block's GEMMs over the keys before its last
/// query's position (about half the products of the whole square at long sequences); the scores
/// past them stay what alloc gave until the mask writes -inf there, and their probabilities and
/// gradients are 0. Without the mask one block holds every query and sees every key.
struct query_block {
  std::int64_t r0, rows, keys;
};
inline std::vector<query_block> query_blocks(const attention_dims& a, bool causal) {
  const std::int64_t step = causal ? 64 : std::max<std::int64_t>(a.sq, 1);
  std::vector<query_block> out;
  for (std::int64_t r0 = 0; r0 < a.sq; r0 += step) {
    const std::int64_t rows = std::min(step, a.sq - r0);
    const std::int64_t keys = causal ? std::clamp<std::int64_t>(a.q_offset + r0 + rows, 0, a.sk) : a.sk;
    if (keys > 0) out.push_back({r0, rows, keys});
  }
  return out;
}

template <class T, class D>
forward_result<D, T> unfused_attention_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  const attention_dims a = attention_dims_of(c);
  const std::int64_t g = a.b * a.heads, sq = a.sq, sk = a.sk, dh = a.dh;
  const T scale = T(1 / std::sqrt(double(dh)));
  std::span<const T> q = in.inputs[0], k = in.inputs[1], v = in.inputs[2];
  const std::vector<query_block> blocks = query_blocks(a, c.op.attrs.causal);
  buffer_t<D, T> s = d.template alloc<T>(std::size_t(g * sq * sk));
  for (std::int64_t i = 0; i < a.heads; ++i)  // S = Q K^T / sqrt(d)
    for (const query_block& qb : blocks) {
      const head_blocks h = head_blocks_of(a, i);
      d.gemm(gemm_desc{false, true, qb.rows, qb.keys, dh, h.ldq, h.ldkv, sk, a.b, h.q_batch, h.kv_batch, h.scores_batch},
             scale, q.subspan(h.q + std::size_t(qb.r0 * h.ldq)), k.subspan(h.kv), T(0),
             d.view(s).subspan(h.scores + std::size_t(qb.r0 * sk)));
    }
  if (c.op.attrs.causal) d.scale_causal_mask(g, sq, sk, T(1), a.q_offset, true, d.view(s));
  forward_result<D, T> r;
  r.saved.push_back(d.template alloc<T>(std::size_t(g * sq * sk)));
  d.softmax_fwd(g * sq, sk, cview<T>(d, s), d.view(r.saved[0]));
  std::span<const T> p = cview<T>(d, r.saved[0]);
  if (attention_drops(c)) {
    d.dropout(dropout_key{c.seed, c.op_id, c.op.attrs.dropout}, a.probs, p, d.view(s));
    p = cview<T>(d, s);
  }
  r.outputs.push_back(alloc_like<T>(d, c.shards.outputs[0]));
  for (std::int64_t i = 0; i < a.heads; ++i)  // O = P V, into [b, sq, heads * d]
    for (const query_block& qb : blocks) {
      const head_blocks h = head_blocks_of(a, i);
      d.gemm(gemm_desc{false, false, qb.rows, dh, qb.keys, sk, h.ldkv, h.ldq, a.b, h.scores_batch, h.kv_batch, h.q_batch},
             T(1), p.subspan(h.scores + std::size_t(qb.r0 * sk)), v.subspan(h.kv), T(0),
             d.view(r.outputs[0]).subspan(h.q + std::size_t(qb.r0 * h.ldq)));
    }
  return r;
}

/// dV = P'^T dO (P' the dropped probabilities), dP' = dO V^T, dP = dropout(dP'), dS = softmax
/// backward of dP, dQ = dS K / sqrt(d), dK = dS^T Q / sqrt(d). The query blocks, and the query
/// heads of one key/value head, add their dK and dV into its block (alloc gives zeros; beta = 1).
template <class T, class D>
gradients<D, T> unfused_attention_bwd(D& d, const kernel_context<T>& c, const operands<T>& in, const forward_result<D, T>& f,
                              std::span<const T> dy) {
  const attention_dims a = attention_dims_of(c);
  const std::int64_t g = a.b * a.heads, sq = a.sq, sk = a.sk, dh = a.dh;
  const T scale = T(1 / std::sqrt(double(dh)));
  const dropout_key key{c.seed, c.op_id, c.op.attrs.dropout};
  const bool drops = attention_drops(c);
  const std::vector<query_block> blocks = query_blocks(a, c.op.attrs.causal);
  std::span<const T> q = in.inputs[0], k = in.inputs[1], v = in.inputs[2];
  std::span<const T> p = cview<T>(d, f.saved[0]), pd = p;
  buffer_t<D, T> work = d.template alloc<T>(std::size_t(g * sq * sk));  // dropped P, then dP or dS
  if (drops) {
    d.dropout(key, a.probs, p, d.view(work));
    pd = cview<T>(d, work);
  }
  gradients<D, T> r;
  for (int i = 0; i < 3; ++i) r.inputs.push_back(alloc_like<T>(d, at(c.shards.inputs, i)));
  buffer_t<D, T> dp = d.template alloc<T>(std::size_t(g * sq * sk));
  for (std::int64_t i = 0; i < a.heads; ++i)
    for (const query_block& qb : blocks) {
      const head_blocks h = head_blocks_of(a, i);
      const std::size_t qo = h.q + std::size_t(qb.r0 * h.ldq), so = h.scores + std::size_t(qb.r0 * sk);
      d.gemm(gemm_desc{true, false, qb.keys, dh, qb.rows, sk, h.ldq, h.ldkv, a.b, h.scores_batch, h.q_batch, h.kv_batch},
             T(1), pd.subspan(so), dy.subspan(qo), T(1), d.view(r.inputs[2]).subspan(h.kv));
      d.gemm(gemm_desc{false, true, qb.rows, qb.keys, dh, h.ldq, h.ldkv, sk, a.b, h.q_batch, h.kv_batch, h.scores_batch},
             T(1), dy.subspan(qo), v.subspan(h.kv), T(0), d.view(dp).subspan(so));
    }
  std::span<const T> ds = cview<T>(d, work);
  if (drops) {
    d.dropout(key, a.probs, cview<T>(d, dp), d.view(work));
    d.softmax_bwd(g * sq, sk, p, cview<T>(d, work), d.view(dp));
    ds = cview<T>(d, dp);
  } else {
    d.softmax_bwd(g * sq, sk, p, cview<T>(d, dp), d.view(work));
  }
  for (std::int64_t i = 0; i < a.heads; ++i)  // masked scores have p = 0, so dS = 0 there
    for (const query_block& qb : blocks) {
      const head_blocks h = head_blocks_of(a, i);
      const std::size_t qo = h.q + std::size_t(qb.r0 * h.ldq), so = h.scores + std::size_t(qb.r0 * sk);
      d.gemm(gemm_desc{false, false, qb.rows, dh, qb.keys, sk, h.ldkv, h.ldq, a.b, h.scores_batch, h.kv_batch, h.q_batch},
             scale, ds.subspan(so), k.subspan(h.kv), T(0), d.view(r.inputs[0]).subspan(qo));
      d.gemm(gemm_desc{true, false, qb.keys, dh, qb.rows, sk, h.ldq, h.ldkv, a.b, h.scores_batch, h.q_batch, h.kv_batch},
             scale, ds.subspan(so), q.subspan(qo), T(1), d.view(r.inputs[1]).subspan(h.kv));
    }
  return r;
}

/// The fused primitives' description of this device's call (attention_dims in the Device's words).
template <class T>
attention_desc attention_desc_of(const kernel_context<T>& c) {
  const attention_dims a = attention_dims_of(c);
  attention_desc r;
  r.b = a.b;
  r.sq = a.sq;
  r.sk = a.sk;
  r.heads = a.heads;
  r.dh = a.dh;
  r.kv_heads = a.kv_heads;
  r.group = a.group;
  r.head0 = a.head0;
  r.kv0 = a.kv0;
  r.q_offset = a.q_offset;
  r.causal = c.op.attrs.causal;
  r.scale = 1 / std::sqrt(double(a.dh));
  r.drops = attention_drops(c);
  r.dropout = dropout_key{c.seed, c.op_id, c.op.attrs.dropout};
  r.probs = a.probs;
  return r;
}

/// The fused forward: the output, and the lse [b, heads, sq] kept as the op's statistic.
template <class T, class D>
forward_result<D, T> fused_attention_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  const attention_desc a = attention_desc_of(c);
  forward_result<D, T> r;
  r.outputs.push_back(alloc_for_overwrite<T>(d, std::size_t(c.shards.outputs[0].local.elements())));
  r.statistics.push_back(d.template alloc<statistic_t<T>>(std::size_t(a.b * a.heads * a.sq)));
  d.attention_fwd(a, in.inputs[0], in.inputs[1], in.inputs[2], d.view(r.outputs[0]), d.view(r.statistics[0]));
  return r;
}

/// The fused backward: dq, dk, dv from q, k, v, the forward's output and lse, and dO.
template <class T, class D>
gradients<D, T> fused_attention_bwd(D& d, const kernel_context<T>& c, const operands<T>& in, const forward_result<D, T>& f,
                                    std::span<const T> dy) {
  gradients<D, T> r;
  for (int i = 0; i < 3; ++i)
    r.inputs.push_back(alloc_for_overwrite<T>(d, std::size_t(at(c.shards.inputs, i).local.elements())));
  d.attention_bwd(attention_desc_of(c), in.inputs[0], in.inputs[1], in.inputs[2], cview<T>(d, f.outputs[0]),
                  cview<statistic_t<T>>(d, f.statistics[0]), dy, d.view(r.inputs[0]), d.view(r.inputs[1]),
                  d.view(r.inputs[2]));
  return r;
}

// ---- the balanced token order (token_order.hpp) -----------------------------------------------
// Under a permuted order the keys and values, whole on the sequence, arrive permuted and the
// local queries are runs of consecutive natural positions (local_runs). The fused kernels run on
// keys and values copied into the natural order, once per (sequence, query run), each call's
// queries at their run's positions: its mask, its dropout keys and its tiles are those of the
// natural order. Each call keeps its rows' lse contiguous ([b, runs, heads, rows of the run]);
// backward adds the dK and dV of a sequence's later runs into its first's, and puts them back in
// the permuted order. ops/work.hpp prices the tiles and the copies.

/// Whether op c's keys arrive in a permuted token order (a self-attention in such a run).
template <class T>
bool attention_permuted(const kernel_context<T>& c) {
  return !c.order.natural() && c.shards.inputs[1].global[1] == c.order.seq;
}

/// Keys or values [b, seq, ld] moved from the permuted order to the natural one (or back).
template <class T, class D>
void reorder_keys(D& d, const token_order& o, std::int64_t b, std::int64_t ld, std::span<const T> x, std::span<T> y,
                  bool to_natural) {
  for (const token_run& r : o.runs(0, o.seq)) {
    const std::int64_t from = to_natural ? r.row : r.position, to = to_natural ? r.position : r.row;
    d.copy_rows(b, r.length * ld, x.subspan(std::size_t(from * ld)), o.seq * ld, y.subspan(std::size_t(to * ld)), o.seq * ld);
  }
}

/// The call of sequence n's query run r: one sequence, the run's rows at its positions.
inline attention_desc run_desc(attention_desc a, std::int64_t n, const token_run& r) {
  a.b = 1;
  a.sq = r.length;
  a.q_offset = r.position;
  a.probs.local = tensor_shape{1, a.heads, r.length, a.sk};
  a.probs.offset[0] += n;
  a.probs.offset[2] = r.position;
  return a;
}

/// Where the call of (n, r) reads and writes: its rows of q, o, dO, dq; the sequence's keys; its lse.
struct run_spans {
  std::size_t q, nq, kv, nkv, lse, nlse;
};
inline run_spans run_spans_of(const attention_desc& a, std::int64_t n, const token_run& r) {
  return {std::size_t((n * a.sq + r.row) * a.ldq()), std::size_t(r.length * a.ldq()), std::size_t(n * a.sk * a.ldkv()),
          std::size_t(a.sk * a.ldkv()), std::size_t(n * a.heads * a.sq + a.heads * r.row), std::size_t(a.heads * r.length)};
}

// The gathered keys and values of `in` copied into natural token order (the balanced order's
// kernels run on them), forward and again in backward.
template <class T, class D>
std::pair<buffer_t<D, T>, buffer_t<D, T>> natural_keys(D& d, const kernel_context<T>& c, const attention_desc& a,
                                                       const operands<T>& in) {
  const auto nkv = std::size_t(a.b * a.sk * a.ldkv());
  buffer_t<D, T> k = alloc_for_overwrite<T>(d, nkv), v = alloc_for_overwrite<T>(d, nkv);
  reorder_keys(d, c.order, a.b, a.ldkv(), in.inputs[1], d.view(k), true);
  reorder_keys(d, c.order, a.b, a.ldkv(), in.inputs[2], d.view(v), true);
  return {std::move(k), std::move(v)};
}

template <class T, class D>
forward_result<D, T> balanced_attention_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  if (c.op.attrs.unfused_attention) fail<error>("attention '" + c.op.name + "': the unfused kernel runs in the natural token order only");
  const attention_desc a = attention_desc_of(c);
  const std::vector<token_run> runs = local_runs(c.order, c.shards.inputs[0]);
  auto [k, v] = natural_keys(d, c, a, in);
  forward_result<D, T> f;
  f.outputs.push_back(alloc_for_overwrite<T>(d, std::size_t(c.shards.outputs[0].local.elements())));
  f.statistics.push_back(d.template alloc<statistic_t<T>>(std::size_t(a.b * a.heads * a.sq)));
  for (std::int64_t n = 0; n < a.b; ++n)
    for (const token_run& r : runs) {
      const run_spans s = run_spans_of(a, n, r);
      d.attention_fwd(run_desc(a, n, r), in.inputs[0].subspan(s.q, s.nq), cview<T>(d, k).subspan(s.kv, s.nkv),
                      cview<T>(d, v).subspan(s.kv, s.nkv), d.view(f.outputs[0]).subspan(s.q, s.nq),
                      d.view(f.statistics[0]).subspan(s.lse, s.nlse));
    }
  return f;
}

template <class T, class D>
gradients<D, T> balanced_attention_bwd(D& d, const kernel_context<T>& c, const operands<T>& in, const forward_result<D, T>& f,
                                       std::span<const T> dy) {
  const attention_desc a = attention_desc_of(c);
  const std::vector<token_run> runs = local_runs(c.order, c.shards.inputs[0]);
  const auto nkv = std::size_t(a.b * a.sk * a.ldkv());
  auto [k, v] = natural_keys(d, c, a, in);
  buffer_t<D, T> dk = alloc_for_overwrite<T>(d, nkv), dv = alloc_for_overwrite<T>(d, nkv);
  const std::size_t extra = runs.size() > 1 ? std::size_t(a.sk * a.ldkv()) : 0;  // a later run's dK, dV
  buffer_t<D, T> dk_run = alloc_for_overwrite<T>(d, extra), dv_run = alloc_for_overwrite<T>(d, extra);
  gradients<D, T> g;
  g.inputs.push_back(alloc_for_overwrite<T>(d, std::size_t(c.shards.inputs[0].local.elements())));
  for (std::int64_t n = 0; n < a.b; ++n)
    for (std::size_t i = 0; i < runs.size(); ++i) {
      const run_spans s = run_spans_of(a, n, runs[i]);
      std::span<T> to_k = i ? d.view(dk_run) : d.view(dk).subspan(s.kv, s.nkv);
      std::span<T> to_v = i ? d.view(dv_run) : d.view(dv).subspan(s.kv, s.nkv);
      d.attention_bwd(run_desc(a, n, runs[i]), in.inputs[0].subspan(s.q, s.nq), cview<T>(d, k).subspan(s.kv, s.nkv),
                      cview<T>(d, v).subspan(s.kv, s.nkv), cview<T>(d, f.outputs[0]).subspan(s.q, s.nq),
                      cview<statistic_t<T>>(d, f.statistics[0]).subspan(s.lse, s.nlse), dy.subspan(s.q, s.nq),
                      d.view(g.inputs[0]).subspan(s.q, s.nq), to_k, to_v);
      if (i == 0) continue;
      d.axpy(T(1), cview<T>(d, dk_run), d.view(dk).subspan(s.kv, s.nkv));
      d.axpy(T(1), cview<T>(d, dv_run), d.view(dv).subspan(s.kv, s.nkv));
    }
  for (int x = 1; x < 3; ++x) {
    g.inputs.push_back(alloc_for_overwrite<T>(d, nkv));
    reorder_keys(d, c.order, a.b, a.ldkv(), cview<T>(d, x == 1 ? dk : dv), d.view(g.inputs[std::size_t(x)]), false);
  }
  return g;
}

template <class T, class D>
forward_result<D, T> attention_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  if (attention_permuted(c)) return balanced_attention_fwd(d, c, in);
  return c.op.attrs.unfused_attention ? unfused_attention_fwd(d, c, in) : fused_attention_fwd(d, c, in);
}
template <class T, class D>
gradients<D, T> attention_bwd(D& d, const kernel_context<T>& c, const operands<T>& in, const forward_result<D, T>& f,
                              std::span<const T> dy) {
  if (attention_permuted(c)) return balanced_attention_bwd(d, c, in, f, dy);
  return c.op.attrs.unfused_attention ? unfused_attention_bwd(d, c, in, f, dy) : fused_attention_bwd(d, c, in, f, dy);
}

}  // namespace autoddl::detail
