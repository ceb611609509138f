#pragma once
// The multi-head attention core on local shards: q [b, sq, heads * d], k, v [b, sk, kv_heads * d]
// ->  out = dropout(softmax(q k^T / sqrt(d) [+ causal mask])) v   per query head.
// Under a hidden split the device holds whole heads (heads * local h / global h of them); under
// a query-sequence split it holds queries [q0, q0 + sq) with all keys, and the causal mask
// compares global positions: query q0 + i sees keys j <= q0 + i. The dropout on the
// probabilities [B, heads, Sq, Sk] is keyed by their global index, so it matches serial.
// Grouped-query attention (kv_heads < heads): query head h reads key/value head h / g, g = heads
// / kv_heads; the device copies, for each of its query heads, the key and value head it reads
// out of the ones it holds (expand_groups), runs the multi-head core, and sums the expanded
// gradients back per key/value head (reduce_groups).
// Saves the probabilities (before dropout); q, k, v are re-permuted in backward.
#include <cmath>
#include <span>

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

/// k or v [b, sk, kv_heads * d] expanded to the local query heads, [b, sk, heads * d]: query head
/// i's slot holds key/value head kv_of(i).
template <class T, class D>
buffer_t<D, T> expand_groups(D& d, const attention_dims& a, std::span<const T> kv) {
  buffer_t<D, T> e = d.template alloc<T>(std::size_t(a.b * a.sk * a.heads * a.dh));
  for (std::int64_t i = 0; i < a.heads; ++i)
    d.copy_rows(a.b * a.sk, a.dh, kv.subspan(std::size_t(a.kv_of(i) * a.dh)), a.kv_heads * a.dh,
                d.view(e).subspan(std::size_t(i * a.dh)), a.heads * a.dh);
  return e;
}

/// The gradient of expand_groups: de [b, sk, heads * d] summed per key/value head into dkv [b,
/// sk, kv_heads * d] (accumulated head-major, then laid out as k is).
template <class T, class D>
void reduce_groups(D& d, const attention_dims& a, std::span<const T> de, std::span<T> dkv) {
  const std::int64_t rows = a.b * a.sk;
  buffer_t<D, T> by_head = d.template alloc<T>(std::size_t(a.kv_heads * rows * a.dh));  // [kv_heads, rows, d]
  buffer_t<D, T> one = d.template alloc<T>(std::size_t(rows * a.dh));
  for (std::int64_t i = 0; i < a.heads; ++i) {
    d.copy_rows(rows, a.dh, de.subspan(std::size_t(i * a.dh)), a.heads * a.dh, d.view(one), a.dh);
    d.axpy(T(1), cview<T>(d, one), d.view(by_head).subspan(std::size_t(a.kv_of(i) * rows * a.dh), std::size_t(rows * a.dh)));
  }
  d.permute_0213(1, a.kv_heads, rows, a.dh, cview<T>(d, by_head), dkv);  // [kv_heads, rows, d] -> [rows, kv_heads, d]
}

template <class T>
bool attention_drops(const kernel_context<T>& c) {
  return c.training && c.op.attrs.dropout > 0;
}

template <class T, class D>
buffer_t<D, T> to_heads(D& d, std::span<const T> x, std::int64_t b, std::int64_t s, std::int64_t heads, std::int64_t dh) {
  buffer_t<D, T> y = d.template alloc<T>(x.size());
  d.permute_0213(b, s, heads, dh, x, d.view(y));  // [b, s, heads, dh] -> [b, heads, s, dh]
  return y;
}

// k or v [b, sk, kv_heads * dh] as [b, heads, sk, dh]: each key/value head repeated for the query
// heads of its group first where grouped (expand_groups).
template <class T, class D>
buffer_t<D, T> kv_to_heads(D& d, const attention_dims& a, std::span<const T> x) {
  if (a.group == 1) return to_heads<T>(d, x, a.b, a.sk, a.heads, a.dh);
  return to_heads<T>(d, cview<T>(d, expand_groups<T>(d, a, x)), a.b, a.sk, a.heads, a.dh);
}

template <class T, class D>
forward_result<D, T> attention_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  const attention_dims a = attention_dims_of(c);
  const std::int64_t g = a.b * a.heads, sq = a.sq, sk = a.sk, dh = a.dh;
  buffer_t<D, T> q = to_heads<T>(d, in.inputs[0], a.b, sq, a.heads, dh);
  buffer_t<D, T> k = kv_to_heads<T>(d, a, in.inputs[1]), v = kv_to_heads<T>(d, a, in.inputs[2]);
  buffer_t<D, T> s = d.template alloc<T>(std::size_t(g * sq * sk));
  d.gemm(gemm_desc{false, true, sq, sk, dh, dh, dh, sk, g, sq * dh, sk * dh, sq * sk}, T(1), cview<T>(d, q), cview<T>(d, k),
         T(0), d.view(s));
  d.scale_causal_mask(g, sq, sk, T(1 / std::sqrt(double(dh))), a.q_offset, c.op.attrs.causal, d.view(s));
  forward_result<D, T> r;
  r.saved.push_back(d.template alloc<T>(std::size_t(g * sq * sk)));
  d.softmax_fwd(g * sq, sk, cview<T>(d, s), d.view(r.saved[0]));
  std::span<const T> p = cview<T>(d, r.saved[0]);
  if (attention_drops(c)) {
    d.dropout(dropout_key{c.seed, c.op_id, c.op.attrs.dropout}, a.probs, p, d.view(s));
    p = cview<T>(d, s);
  }
  buffer_t<D, T> o = d.template alloc<T>(std::size_t(g * sq * dh));
  d.gemm(gemm_desc{false, false, sq, dh, sk, sk, dh, dh, g, sq * sk, sk * dh, sq * dh}, T(1), p, cview<T>(d, v), T(0),
         d.view(o));
  r.outputs.push_back(alloc_like<T>(d, c.shards.outputs[0]));
  d.permute_0213(a.b, a.heads, sq, dh, cview<T>(d, o), d.view(r.outputs[0]));
  return r;
}

template <class T, class D>
gradients<D, T> attention_bwd(D& d, const kernel_context<T>& c, const operands<T>& in, const forward_result<D, T>& f,
                              std::span<const T> dy) {
  const attention_dims a = attention_dims_of(c);
  const std::int64_t g = a.b * a.heads, sq = a.sq, sk = a.sk, dh = a.dh;
  const dropout_key key{c.seed, c.op_id, c.op.attrs.dropout};
  buffer_t<D, T> q = to_heads<T>(d, in.inputs[0], a.b, sq, a.heads, dh);
  buffer_t<D, T> k = kv_to_heads<T>(d, a, in.inputs[1]), v = kv_to_heads<T>(d, a, in.inputs[2]);
  buffer_t<D, T> dout = to_heads<T>(d, dy, a.b, sq, a.heads, dh);
  std::span<const T> p = cview<T>(d, f.saved[0]);
  buffer_t<D, T> pd = d.template alloc<T>(std::size_t(g * sq * sk));  // dropped probabilities, then dP
  if (attention_drops(c)) d.dropout(key, a.probs, p, d.view(pd));
  else d.copy(p, d.view(pd));
  buffer_t<D, T> dv = d.template alloc<T>(std::size_t(g * sk * dh));
  d.gemm(gemm_desc{true, false, sk, dh, sq, sk, dh, dh, g, sq * sk, sq * dh, sk * dh}, T(1), cview<T>(d, pd),
         cview<T>(d, dout), T(0), d.view(dv));
  buffer_t<D, T> dp = d.template alloc<T>(std::size_t(g * sq * sk));
  d.gemm(gemm_desc{false, true, sq, sk, dh, dh, dh, sk, g, sq * dh, sk * dh, sq * sk}, T(1), cview<T>(d, dout),
         cview<T>(d, v), T(0), d.view(dp));
  if (attention_drops(c)) d.dropout(key, a.probs, cview<T>(d, dp), d.view(pd));
  else d.copy(cview<T>(d, dp), d.view(pd));
  d.softmax_bwd(g * sq, sk, p, cview<T>(d, pd), d.view(dp));  // dp := dS
  d.scale(T(1 / std::sqrt(double(dh))), d.view(dp));           // masked scores have p = 0, so dS = 0 there
  buffer_t<D, T> dq = d.template alloc<T>(std::size_t(g * sq * dh));
  buffer_t<D, T> dk = d.template alloc<T>(std::size_t(g * sk * dh));
  d.gemm(gemm_desc{false, false, sq, dh, sk, sk, dh, dh, g, sq * sk, sk * dh, sq * dh}, T(1), cview<T>(d, dp),
         cview<T>(d, k), T(0), d.view(dq));
  d.gemm(gemm_desc{true, false, sk, dh, sq, sk, dh, dh, g, sq * sk, sq * dh, sk * dh}, T(1), cview<T>(d, dp),
         cview<T>(d, q), T(0), d.view(dk));
  gradients<D, T> r;
  for (int i = 0; i < 3; ++i) r.inputs.push_back(alloc_like<T>(d, at(c.shards.inputs, i)));
  d.permute_0213(a.b, a.heads, sq, dh, cview<T>(d, dq), d.view(r.inputs[0]));
  if (a.group == 1) {
    d.permute_0213(a.b, a.heads, sk, dh, cview<T>(d, dk), d.view(r.inputs[1]));
    d.permute_0213(a.b, a.heads, sk, dh, cview<T>(d, dv), d.view(r.inputs[2]));
  } else {  // back to [b, sk, heads * d], then summed per key/value head
    buffer_t<D, T> expanded = d.template alloc<T>(std::size_t(a.b * sk * a.heads * dh));
    d.permute_0213(a.b, a.heads, sk, dh, cview<T>(d, dk), d.view(expanded));
    reduce_groups<T>(d, a, cview<T>(d, expanded), d.view(r.inputs[1]));
    d.permute_0213(a.b, a.heads, sk, dh, cview<T>(d, dv), d.view(expanded));
    reduce_groups<T>(d, a, cview<T>(d, expanded), d.view(r.inputs[2]));
  }
  return r;
}

}  // namespace autoddl::detail
