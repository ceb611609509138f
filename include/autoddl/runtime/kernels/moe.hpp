#pragma once
// Kernels of the mixture-of-experts ops (ops/moe.hpp) on local shards:
// - router: g = top-k of softmax(logits); backward recomputes the softmax from the logits.
//   Routing reads each token's picks (topk_experts, [rows, k] int64, freed inside the kernel),
//   never which gates are non-zero: a picked probability that underflows to 0 is still routed.
// - load_balance: Switch Transformer's loss per sequence, coef E / (k s^2) sum_e count_e
//   sum_t p_te, over the batch's sequences divided by the op's global batch; a batch split
//   leaves each device its sequences' share (P).
// - dispatch and combine: the slot map (moe_slots) from the picks of the gates, the top
//   attrs.topk of each row (the router's picks: a picked gate is p or p / S, never below an
//   unpicked one, and ties go to the lower column in both), then a gather of token rows into
//   slots and a weighted sum back; both recompute the map in backward.
// - experts: per sequence of the local block, one strided batched GEMM over the local experts
//   for each of a = X W_gate, u = X W_up (kept for backward) and Y = (silu(a) u) W_down.
#include <cstdint>
#include <span>
#include <utility>

#include "autoddl/runtime/kernels/context.hpp"

namespace autoddl::detail {

/// Each row's k largest columns of `values` [rows, e], ascending: the experts it routes to.
template <class T, class D>
buffer_t<D, std::int64_t> expert_picks(D& d, std::int64_t rows, std::int64_t e, std::int64_t k, std::span<const T> values) {
  buffer_t<D, std::int64_t> picks = d.template alloc<std::int64_t>(std::size_t(rows * k));
  d.topk_experts(rows, e, k, values, d.view(picks));
  return picks;
}

/// The local slot map of a dispatch or combine: gates [b, s, e] local, `capacity` slots.
template <class D>
struct moe_slot_map {
  buffer_t<D, std::int64_t> src, dst;
  std::int64_t b = 0, s = 0, e = 0, capacity = 0;
};

template <class T, class D>
moe_slot_map<D> slot_map(D& d, const kernel_context<T>& c, std::span<const T> gates, std::int64_t capacity) {
  const tensor_shape& g = c.shards.inputs[1].local;
  const std::int64_t k = c.op.attrs.topk;
  moe_slot_map<D> m{{}, {}, g[0], g[1], g[2], capacity};
  const buffer_t<D, std::int64_t> picks = expert_picks(d, m.b * m.s, m.e, k, gates);
  m.src = d.template alloc<std::int64_t>(std::size_t(m.b * m.e * capacity));
  m.dst = d.template alloc<std::int64_t>(std::size_t(m.b * m.s * m.e));
  d.moe_slots(m.b, m.s, m.e, k, capacity, std::as_const(d).view(picks), d.view(m.src), d.view(m.dst));
  return m;
}

/// softmax of the local logits [rows, e] (router and load_balance).
template <class T, class D>
buffer_t<D, T> router_probs(D& d, const kernel_context<T>& c, std::span<const T> logits) {
  const tensor_shape& x = c.shards.inputs[0].local;
  buffer_t<D, T> p = alloc_like<T>(d, c.shards.inputs[0]);
  d.softmax_fwd(x[0] * x[1], x[2], logits, d.view(p));
  return p;
}

template <class T, class D>
forward_result<D, T> router_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  const tensor_shape& x = c.shards.inputs[0].local;
  buffer_t<D, T> p = router_probs(d, c, in.inputs[0]);
  const std::int64_t rows = x[0] * x[1], k = c.op.attrs.topk;
  const buffer_t<D, std::int64_t> picks = expert_picks(d, rows, x[2], k, cview<T>(d, p));
  forward_result<D, T> r;
  r.outputs.push_back(alloc_like<T>(d, c.shards.outputs[0]));
  d.topk_gates(rows, x[2], k, c.op.attrs.renormalize, cview<T>(d, p), std::as_const(d).view(picks), d.view(r.outputs[0]));
  return r;
}

template <class T, class D>
gradients<D, T> router_bwd(D& d, const kernel_context<T>& c, const operands<T>& in, std::span<const T> dg) {
  const tensor_shape& x = c.shards.inputs[0].local;
  const std::int64_t rows = x[0] * x[1];
  buffer_t<D, T> p = router_probs(d, c, in.inputs[0]);
  const buffer_t<D, std::int64_t> picks = expert_picks(d, rows, x[2], std::int64_t(c.op.attrs.topk), cview<T>(d, p));
  buffer_t<D, T> dp = alloc_like<T>(d, c.shards.inputs[0]);
  d.topk_gates_bwd(rows, x[2], c.op.attrs.topk, c.op.attrs.renormalize, cview<T>(d, p), std::as_const(d).view(picks), dg,
                   d.view(dp));
  gradients<D, T> g;
  g.inputs.push_back(alloc_like<T>(d, c.shards.inputs[0]));
  d.softmax_bwd(rows, x[2], cview<T>(d, p), cview<T>(d, dp), d.view(g.inputs[0]));
  return g;
}

/// coef / the op's global batch: each sequence's loss weighs 1 / batch, as cross-entropy's rows.
template <class T>
T balance_scale(const kernel_context<T>& c) {
  return T(c.op.attrs.aux_coef / double(c.op.inputs[0][0]));
}

template <class T, class D>
forward_result<D, T> load_balance_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  const tensor_shape& x = c.shards.inputs[0].local;
  buffer_t<D, T> p = router_probs(d, c, in.inputs[0]);
  const std::int64_t k = c.op.attrs.topk;
  const buffer_t<D, std::int64_t> picks = expert_picks(d, x[0] * x[1], x[2], k, cview<T>(d, p));
  forward_result<D, T> r;
  r.outputs.push_back(d.template alloc<T>(1));
  d.balance_loss(x[0], x[1], x[2], k, cview<T>(d, p), std::as_const(d).view(picks), balance_scale(c),
                 d.view(r.outputs[0]));
  return r;
}

template <class T, class D>
gradients<D, T> load_balance_bwd(D& d, const kernel_context<T>& c, const operands<T>& in, std::span<const T> dloss) {
  const tensor_shape& x = c.shards.inputs[0].local;
  buffer_t<D, T> p = router_probs(d, c, in.inputs[0]);
  const std::int64_t k = c.op.attrs.topk;
  const buffer_t<D, std::int64_t> picks = expert_picks(d, x[0] * x[1], x[2], k, cview<T>(d, p));
  buffer_t<D, T> dp = alloc_like<T>(d, c.shards.inputs[0]);
  d.balance_loss_bwd(x[0], x[1], x[2], k, std::as_const(d).view(picks), dloss, balance_scale(c), d.view(dp));
  gradients<D, T> g;
  g.inputs.push_back(alloc_like<T>(d, c.shards.inputs[0]));
  d.softmax_bwd(x[0] * x[1], x[2], cview<T>(d, p), cview<T>(d, dp), d.view(g.inputs[0]));
  return g;
}

template <class T, class D>
forward_result<D, T> dispatch_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  const moe_slot_map<D> m = slot_map(d, c, in.inputs[1], c.op.attrs.capacity);
  forward_result<D, T> r;
  r.outputs.push_back(alloc_like<T>(d, c.shards.outputs[0]));
  d.gather_rows(std::as_const(d).view(m.src), std::int64_t(0), in.inputs[0], d.view(r.outputs[0]));
  return r;
}

/// dX sums each slot's gradient back into its token row; G's gradient is 0 (the slot map is
/// piecewise constant in G).
template <class T, class D>
gradients<D, T> dispatch_bwd(D& d, const kernel_context<T>& c, const operands<T>& in, std::span<const T> dbuf) {
  const moe_slot_map<D> m = slot_map(d, c, in.inputs[1], c.op.attrs.capacity);
  gradients<D, T> g;
  g.inputs.push_back(alloc_like<T>(d, c.shards.inputs[0]));
  d.scatter_add_rows(std::as_const(d).view(m.src), std::int64_t(0), dbuf, d.view(g.inputs[0]));
  g.inputs.push_back(alloc_like<T>(d, c.shards.inputs[1]));
  return g;
}

template <class T, class D>
forward_result<D, T> combine_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  const moe_slot_map<D> m = slot_map(d, c, in.inputs[1], c.op.inputs[0][2]);
  forward_result<D, T> r;
  r.outputs.push_back(alloc_like<T>(d, c.shards.outputs[0]));
  d.combine_rows(m.b * m.s, m.e, std::as_const(d).view(m.dst), in.inputs[1], in.inputs[0], d.view(r.outputs[0]));
  return r;
}

template <class T, class D>
gradients<D, T> combine_bwd(D& d, const kernel_context<T>& c, const operands<T>& in, std::span<const T> dy) {
  const moe_slot_map<D> m = slot_map(d, c, in.inputs[1], c.op.inputs[0][2]);
  gradients<D, T> g;
  g.inputs.push_back(alloc_like<T>(d, c.shards.inputs[0]));
  g.inputs.push_back(alloc_like<T>(d, c.shards.inputs[1]));
  d.combine_rows_bwd(m.b * m.s, m.e, std::as_const(d).view(m.dst), in.inputs[1], in.inputs[0], dy, d.view(g.inputs[0]),
                     d.view(g.inputs[1]));
  return g;
}

/// The local geometry of an experts op: X [b, e, slots, h], F of its weights.
struct experts_dims {
  std::int64_t b, e, slots, h, f;
  std::int64_t rows() const { return b * e * slots; }
};

template <class T>
experts_dims experts_dims_of(const kernel_context<T>& c) {
  const tensor_shape& x = c.shards.inputs[0].local;
  return {x[0], x[1], x[2], x[3], c.shards.params[0].local[2]};
}

/// One operand of per_sequence_gemm: its span, the elements between experts' blocks, and
/// whether it advances with the sequence (X, dY and the products do; the weights do not).
template <class T>
struct expert_blocks {
  std::span<T> v;
  std::int64_t block = 0;
  bool per_sequence = true;
};

/// For each sequence i of the local block, one strided batched GEMM over its e experts:
/// C_e = op(A_e) op(B_e) (+ C_e where C does not advance with the sequence: the weight
/// gradients, summed over the sequences).
template <class T, class D>
void per_sequence_gemm(D& d, const experts_dims& x, gemm_desc g, expert_blocks<const T> a, expert_blocks<const T> b,
                       expert_blocks<T> cm) {
  g.batch = x.e;
  g.stride_a = a.block;
  g.stride_b = b.block;
  g.stride_c = cm.block;
  auto at_seq = [&](auto& o, std::int64_t i) { return o.v.subspan(std::size_t(o.per_sequence ? i * x.e * o.block : 0)); };
  for (std::int64_t i = 0; i < x.b; ++i)
    d.gemm(g, T(1), at_seq(a, i), at_seq(b, i), !cm.per_sequence && i > 0 ? T(1) : T(0), at_seq(cm, i));
}

template <class T, class D>
forward_result<D, T> experts_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  const experts_dims x = experts_dims_of(c);
  const std::int64_t n = x.slots, h = x.h, f = x.f;
  using cb = expert_blocks<const T>;
  forward_result<D, T> r;
  r.saved.push_back(d.template alloc<T>(std::size_t(x.rows() * f)));  // a = X W_gate
  r.saved.push_back(d.template alloc<T>(std::size_t(x.rows() * f)));  // u = X W_up
  const gemm_desc up{false, false, n, f, h, h, f, f};
  for (std::size_t j = 0; j < 2; ++j)
    per_sequence_gemm(d, x, up, cb{in.inputs[0], n * h}, cb{in.params[j], h * f, false},
                      expert_blocks<T>{d.view(r.saved[j]), n * f});
  buffer_t<D, T> m = d.template alloc<T>(std::size_t(x.rows() * f));
  d.silu_fwd(cview<T>(d, r.saved[0]), d.view(m));
  d.mul(cview<T>(d, m), cview<T>(d, r.saved[1]), d.view(m));
  r.outputs.push_back(alloc_like<T>(d, c.shards.outputs[0]));
  per_sequence_gemm(d, x, gemm_desc{false, false, n, h, f, f, h, h}, cb{cview<T>(d, m), n * f},
                    cb{in.params[2], f * h, false}, expert_blocks<T>{d.view(r.outputs[0]), n * h});
  return r;
}

/// m = silu(a) u; dW_down = m^T dY; dm = dY W_down^T; du = dm silu(a); da = silu'(a) (dm u);
/// dW_gate = X^T da, dW_up = X^T du; dX = da W_gate^T + du W_up^T.
template <class T, class D>
gradients<D, T> experts_bwd(D& d, const kernel_context<T>& c, const operands<T>& in, const forward_result<D, T>& fwd,
                            std::span<const T> dy) {
  const experts_dims x = experts_dims_of(c);
  const std::int64_t n = x.slots, h = x.h, f = x.f;
  const std::size_t rf = std::size_t(x.rows() * f);
  using cb = expert_blocks<const T>;
  using mb = expert_blocks<T>;
  std::span<const T> a = cview<T>(d, fwd.saved[0]), u = cview<T>(d, fwd.saved[1]);
  buffer_t<D, T> s = d.template alloc<T>(rf), m = d.template alloc<T>(rf), dm = d.template alloc<T>(rf),
                 du = d.template alloc<T>(rf);
  d.silu_fwd(a, d.view(s));
  d.mul(cview<T>(d, s), u, d.view(m));
  gradients<D, T> g;
  for (std::size_t j = 0; j < 3; ++j) g.params.push_back(alloc_like<T>(d, c.shards.params[j]));
  per_sequence_gemm(d, x, gemm_desc{true, false, f, h, n, f, h, h}, cb{cview<T>(d, m), n * f}, cb{dy, n * h},
                    mb{d.view(g.params[2]), f * h, false});
  per_sequence_gemm(d, x, gemm_desc{false, true, n, f, h, h, h, f}, cb{dy, n * h}, cb{in.params[2], f * h, false},
                    mb{d.view(dm), n * f});
  d.mul(cview<T>(d, dm), cview<T>(d, s), d.view(du));
  d.mul(cview<T>(d, dm), u, d.view(m));
  d.silu_bwd(a, cview<T>(d, m), d.view(s));  // s becomes da
  const gemm_desc dw{true, false, h, f, n, h, f, f};
  per_sequence_gemm(d, x, dw, cb{in.inputs[0], n * h}, cb{cview<T>(d, s), n * f}, mb{d.view(g.params[0]), h * f, false});
  per_sequence_gemm(d, x, dw, cb{in.inputs[0], n * h}, cb{cview<T>(d, du), n * f}, mb{d.view(g.params[1]), h * f, false});
  g.inputs.push_back(alloc_like<T>(d, c.shards.inputs[0]));
  buffer_t<D, T> dx_up = alloc_like<T>(d, c.shards.inputs[0]);
  const gemm_desc dx{false, true, n, h, f, f, f, h};
  per_sequence_gemm(d, x, dx, cb{cview<T>(d, s), n * f}, cb{in.params[0], h * f, false}, mb{d.view(g.inputs[0]), n * h});
  per_sequence_gemm(d, x, dx, cb{cview<T>(d, du), n * f}, cb{in.params[1], h * f, false}, mb{d.view(dx_up), n * h});
  d.axpy(T(1), cview<T>(d, dx_up), d.view(g.inputs[0]));
  return g;
}

}  // namespace autoddl::detail
