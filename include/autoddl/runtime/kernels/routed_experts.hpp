#pragma once
// Kernels of routed_experts (ops/moe.hpp), dropless: each token's picks (the top attrs.topk of its
// row of G, ties to the lower expert, as dispatch reads them) come to the host, the routed rows
// are sorted by expert (runtime/expert_routes.hpp), and the device runs the experts it holds
// (params[0]'s block of the expert dim, [e0, e0 + E_l)) on exactly their rows:
//   forward   Xe = the rows of X routed to the local experts (gather_rows), grouped by expert;
//             a, u, Ye by kernels/grouped_experts.hpp; y_t = sum over local picks G[t, e] Ye[row(t, e)]
//   backward  the routes again from G; dYe and dG from combine_rows_bwd; the grouped backward;
//             dX scatter-added back onto the tokens
// Kept: a, u and Ye (forward_result::saved); X and G are the op's inputs. Under W S(0) with X B
// (whole experts per device, every token) y is this device's experts' share, a partial sum (P).
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "autoddl/runtime/expert_routes.hpp"
#include "autoddl/runtime/kernels/context.hpp"
#include "autoddl/runtime/kernels/grouped_experts.hpp"
#include "autoddl/runtime/kernels/moe.hpp"

namespace autoddl::detail {

/// The routes of the local experts: their rows' tokens (ids), each token's row per expert or -1
/// (dst [t, E]), and the rows per local expert.
template <class D>
struct local_routes {
  buffer_t<D, std::int64_t> ids, dst;
  std::vector<std::int64_t> group_rows;
  std::int64_t tokens = 0, experts = 0, rows = 0;
};

template <class T, class D>
local_routes<D> routes_of(D& d, const kernel_context<T>& c, std::span<const T> gates) {
  const tensor_shape& g = c.shards.inputs[1].local;
  const std::int64_t t = g[0] * g[1], e = g[2], k = c.op.attrs.topk;
  const std::int64_t e0 = c.shards.params[0].offset[0], el = c.shards.params[0].local[0];
  const buffer_t<D, std::int64_t> picks = expert_picks(d, t, e, k, gates);
  std::vector<std::int64_t> host(std::size_t(t * k));
  if (!host.empty()) d.download(std::as_const(d).view(picks), std::span<std::int64_t>(host));
  const expert_routes r = route_by_expert(host, t, k, e);
  local_routes<D> l;
  l.tokens = t;
  l.experts = e;
  std::int64_t first = 0;
  for (std::int64_t x = 0; x < e0; ++x) first += r.tokens_per_expert[std::size_t(x)];
  l.group_rows.assign(r.tokens_per_expert.begin() + e0, r.tokens_per_expert.begin() + e0 + el);
  for (const std::int64_t n : l.group_rows) l.rows += n;
  std::vector<std::int64_t> ids(r.order.begin() + first, r.order.begin() + first + l.rows), dst(r.row_of);
  for (std::int64_t& row : dst) row = row >= first && row < first + l.rows ? row - first : -1;
  l.ids = d.template alloc<std::int64_t>(ids.size());
  l.dst = d.template alloc<std::int64_t>(dst.size());
  if (!ids.empty()) d.upload(std::span<const std::int64_t>(ids), d.view(l.ids));
  if (!dst.empty()) d.upload(std::span<const std::int64_t>(dst), d.view(l.dst));
  return l;
}

template <class T>
dropless_weights<T> local_weights(const operands<T>& in) {
  return {in.params[0], in.params[1], in.params[2]};
}

template <class T, class D>
forward_result<D, T> routed_experts_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  const local_routes<D> l = routes_of(d, c, in.inputs[1]);
  const std::int64_t h = c.shards.inputs[0].local[2], f = c.shards.params[0].local[2];
  buffer_t<D, T> xe = d.template alloc<T>(std::size_t(l.rows * h));
  if (l.rows > 0) d.gather_rows(std::as_const(d).view(l.ids), std::int64_t(0), in.inputs[0], d.view(xe));
  forward_result<D, T> r;
  r.saved.push_back(d.template alloc<T>(std::size_t(l.rows * f)));  // a = Xe W_gate
  r.saved.push_back(d.template alloc<T>(std::size_t(l.rows * f)));  // u = Xe W_up
  r.saved.push_back(d.template alloc<T>(std::size_t(l.rows * h)));  // Ye
  grouped_swiglu_fwd(d, l.group_rows, h, f, cview<T>(d, xe), local_weights(in), d.view(r.saved[0]), d.view(r.saved[1]),
                     d.view(r.saved[2]));
  r.outputs.push_back(alloc_like<T>(d, c.shards.outputs[0]));
  if (l.tokens > 0)
    d.combine_rows(l.tokens, l.experts, std::as_const(d).view(l.dst), in.inputs[1], cview<T>(d, r.saved[2]), d.view(r.outputs[0]));
  return r;
}

template <class T, class D>
gradients<D, T> routed_experts_bwd(D& d, const kernel_context<T>& c, const operands<T>& in, const forward_result<D, T>& fwd,
                                   std::span<const T> dy) {
  const local_routes<D> l = routes_of(d, c, in.inputs[1]);
  const std::int64_t h = c.shards.inputs[0].local[2], f = c.shards.params[0].local[2];
  buffer_t<D, T> xe = d.template alloc<T>(std::size_t(l.rows * h)), dye = d.template alloc<T>(std::size_t(l.rows * h));
  if (l.rows > 0) d.gather_rows(std::as_const(d).view(l.ids), std::int64_t(0), in.inputs[0], d.view(xe));
  gradients<D, T> g;
  g.inputs.push_back(alloc_like<T>(d, c.shards.inputs[0]));
  g.inputs.push_back(alloc_like<T>(d, c.shards.inputs[1]));
  if (l.tokens > 0)
    d.combine_rows_bwd(l.tokens, l.experts, std::as_const(d).view(l.dst), in.inputs[1], cview<T>(d, fwd.saved[2]), dy,
                       d.view(dye), d.view(g.inputs[1]));
  for (std::size_t j = 0; j < 3; ++j) g.params.push_back(alloc_like<T>(d, c.shards.params[j]));
  buffer_t<D, T> dxe = d.template alloc<T>(std::size_t(l.rows * h));
  grouped_swiglu_bwd(d, l.group_rows, h, f, cview<T>(d, xe), cview<T>(d, fwd.saved[0]), cview<T>(d, fwd.saved[1]),
                     cview<T>(d, dye), local_weights(in),
                     grouped_grads<T>{d.view(dxe), d.view(g.params[0]), d.view(g.params[1]), d.view(g.params[2])});
  if (l.rows > 0) d.scatter_add_rows(std::as_const(d).view(l.ids), std::int64_t(0), cview<T>(d, dxe), d.view(g.inputs[0]));
  return g;
}

}  // namespace autoddl::detail
