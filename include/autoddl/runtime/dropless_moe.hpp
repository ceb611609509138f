#pragma once
// A routed SwiGLU mixture of experts without capacity (dropless), expert parallel over one
// communicator of p ranks, on any Device: each rank holds t tokens and the E/p consecutive
// experts [r E/p, (r+1) E/p). Forward, as Megatron-Core's all-to-all dispatcher runs it:
//   1. routes   the picks [t, k] come to the host; rows sorted by expert (expert_routes.hpp)
//   2. counts   an all-to-all of the E/p counts each rank routes to each other rank's experts
//   3. permute  gather_rows: token rows into the sorted order, [t k, h]
//   4. dispatch an all-to-all with variable counts, exactly the routed rows; what arrives is
//               sorted by source rank, then by local expert, and is regrouped by local expert
//   5. experts  per local expert e, on its n_e rows: a = X W_gate, u = X W_up, Y = (silu(a) u) W_down,
//               one GEMM per matrix and expert (none for an expert without tokens; kernels/grouped_experts.hpp)
//   6. return   the reverse regroup and all-to-all, then combine_rows: y_t = sum_e G[t, e] Y[row_of(t, e)]
// Backward runs the same exchanges on the gradients (dY rows out, dX rows back) and scatters dX
// onto the tokens; dG[t, e] = dy_t . Y[row_of(t, e)] at the picks. The routing is piecewise
// constant in the router's logits, so the picks are inputs here, as in ops/moe.hpp.
// Bytes: every exchange counts what it sent; bytes_predicted is cost/dropless.hpp's figure for the
// counts this run exchanged, so a caller checks the two agree.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "autoddl/backend/device.hpp"
#include "autoddl/cost/dropless.hpp"
#include "autoddl/error.hpp"
#include "autoddl/runtime/expert_routes.hpp"
#include "autoddl/runtime/kernels/context.hpp"
#include "autoddl/runtime/kernels/grouped_experts.hpp"

namespace autoddl {

/// A communicator that exchanges variable counts (mpi::ring_comm, nccl::nccl_comm).
template <class C, class T>
concept VariableAllToAll = requires(C c, const C cc, std::span<const T> in, std::span<T> out,
                                    std::span<const std::int64_t> counts) {
  { cc.rank() } -> std::convertible_to<int>;
  { cc.size() } -> std::convertible_to<int>;
  { c.all_to_all_v(in, counts, out, counts) } -> std::convertible_to<std::int64_t>;
};

/// Sizes of a dropless layer on one rank: its tokens, hidden size, each expert's FFN size, all
/// experts of the axis, picks per token.
struct dropless_geometry {
  std::int64_t tokens = 0, hidden = 0, ffn = 0, experts = 0, topk = 0;
};

/// What the forward keeps for the backward, and the bytes of both.
template <class T, class D>
struct dropless_state {
  expert_routes routes;
  std::vector<std::int64_t> histogram;              ///< [p, E]: row j holds rank j's tokens per expert (own experts' columns filled from the count exchange)
  std::vector<std::int64_t> send_rows, recv_rows;   ///< rows to and from each rank
  std::vector<std::int64_t> group_rows;             ///< received rows per local expert
  buffer_t<D, std::int64_t> order, row_of, to_expert_major, to_rank_major;
  buffer_t<D, T> xe, a, u;  ///< received rows grouped by local expert, and the SwiGLU's two products
  buffer_t<D, T> ys;        ///< the experts' outputs back in this rank's routed order
  std::int64_t bytes_sent = 0, bytes_predicted = 0;
};

template <class T, class D>
struct dropless_gradients {
  buffer_t<D, T> dx, dgates, dw_gate, dw_up, dw_down;
};

namespace detail {

template <class D>
buffer_t<D, std::int64_t> upload_ids(D& d, const std::vector<std::int64_t>& ids) {
  buffer_t<D, std::int64_t> b = d.template alloc<std::int64_t>(ids.size());
  if (!ids.empty()) d.upload(std::span<const std::int64_t>(ids), d.view(b));
  return b;
}

/// The two regroupings of received rows: source-rank-major (as the all-to-all delivers) to
/// local-expert-major (as the GEMMs read), and back. counts[s E_l + l]: rows from s for expert l.
inline std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> regroup_rows(const std::vector<std::int64_t>& counts,
                                                                                      int ranks, std::int64_t local) {
  std::vector<std::int64_t> start(counts.size(), 0);  // source-major offset of block (s, l)
  std::int64_t total = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) start[i] = total, total += counts[i];
  std::vector<std::int64_t> to_expert(static_cast<std::size_t>(total)), to_rank(static_cast<std::size_t>(total));
  std::int64_t row = 0;
  for (std::int64_t l = 0; l < local; ++l)
    for (int s = 0; s < ranks; ++s) {
      const std::size_t blk = std::size_t(s * local + l);
      for (std::int64_t i = 0; i < counts[blk]; ++i, ++row) {
        to_expert[std::size_t(row)] = start[blk] + i;
        to_rank[std::size_t(start[blk] + i)] = row;
      }
    }
  return {to_expert, to_rank};
}

/// Sends rows [n_j, h] to each rank j and regroups what arrives by local expert (steps 4 and 5's input).
template <class T, class D, class C>
buffer_t<D, T> dispatch_rows(D& d, C& comm, dropless_state<T, D>& st, std::int64_t h, std::span<const T> rows) {
  std::vector<std::int64_t> sc(st.send_rows), rc(st.recv_rows);
  for (auto& v : sc) v *= h;
  for (auto& v : rc) v *= h;
  std::int64_t received = 0;
  for (const std::int64_t r : st.recv_rows) received += r;
  buffer_t<D, T> by_rank = d.template alloc<T>(std::size_t(received * h));
  st.bytes_sent += comm.all_to_all_v(rows, std::span<const std::int64_t>(sc), d.view(by_rank), std::span<const std::int64_t>(rc));
  buffer_t<D, T> by_expert = d.template alloc<T>(std::size_t(received * h));
  if (received > 0) d.gather_rows(std::as_const(d).view(st.to_expert_major), std::int64_t(0), cview<T>(d, by_rank), d.view(by_expert));
  return by_expert;
}

/// The reverse of dispatch_rows: rows grouped by local expert go back to the ranks they came from.
template <class T, class D, class C>
buffer_t<D, T> return_rows(D& d, C& comm, dropless_state<T, D>& st, std::int64_t h, std::span<const T> by_expert) {
  std::int64_t received = 0, sent_back = 0;
  for (const std::int64_t r : st.recv_rows) received += r;
  for (const std::int64_t r : st.send_rows) sent_back += r;
  buffer_t<D, T> by_rank = d.template alloc<T>(std::size_t(received * h));
  if (received > 0) d.gather_rows(std::as_const(d).view(st.to_rank_major), std::int64_t(0), by_expert, d.view(by_rank));
  std::vector<std::int64_t> sc(st.recv_rows), rc(st.send_rows);
  for (auto& v : sc) v *= h;
  for (auto& v : rc) v *= h;
  buffer_t<D, T> back = d.template alloc<T>(std::size_t(sent_back * h));
  st.bytes_sent += comm.all_to_all_v(cview<T>(d, by_rank), std::span<const std::int64_t>(sc), d.view(back),
                                     std::span<const std::int64_t>(rc));
  return back;
}

/// Routes, exchanges the counts and fills the state's row counts, regroup maps and prediction.
template <class T, class D, class C>
void plan_routes(D& d, C& comm, const dropless_geometry& g, std::span<const std::int64_t> picks_host,
                 dropless_state<T, D>& st) {
  const int p = comm.size(), me = comm.rank();
  const std::int64_t local = g.experts / p;
  st.routes = route_by_expert(picks_host, g.tokens, g.topk, g.experts);
  st.send_rows = rows_per_rank(st.routes.tokens_per_expert, p);
  std::vector<std::int64_t> per_rank(std::size_t(p), local), received(std::size_t(g.experts), 0);
  buffer_t<D, std::int64_t> mine = upload_ids(d, st.routes.tokens_per_expert);
  buffer_t<D, std::int64_t> theirs = d.template alloc<std::int64_t>(std::size_t(g.experts));
  st.bytes_sent += comm.all_to_all_v(std::as_const(d).view(mine), std::span<const std::int64_t>(per_rank), d.view(theirs),
                                     std::span<const std::int64_t>(per_rank));
  d.download(std::as_const(d).view(theirs), std::span<std::int64_t>(received));
  st.histogram.assign(std::size_t(p * g.experts), 0);
  st.recv_rows.assign(std::size_t(p), 0);
  st.group_rows.assign(std::size_t(local), 0);
  for (int s = 0; s < p; ++s)
    for (std::int64_t l = 0; l < local; ++l) {
      const std::int64_t n = received[std::size_t(s * local + l)];
      st.histogram[std::size_t(s * g.experts + me * local + l)] = n;
      st.recv_rows[std::size_t(s)] += n;
      st.group_rows[std::size_t(l)] += n;
    }
  for (std::int64_t e = 0; e < g.experts; ++e) st.histogram[std::size_t(me * g.experts + e)] = st.routes.tokens_per_expert[std::size_t(e)];
  auto [to_expert, to_rank] = regroup_rows(received, p, local);
  st.to_expert_major = upload_ids(d, to_expert);
  st.to_rank_major = upload_ids(d, to_rank);
  st.order = upload_ids(d, st.routes.order);
  st.row_of = upload_ids(d, st.routes.row_of);
  const std::int64_t row_bytes = g.hidden * std::int64_t(sizeof(T));
  st.bytes_predicted = dropless_count_bytes(g.experts, p) +
                       dropless_dispatch_bytes(st.routes.tokens_per_expert, p, me, row_bytes) +
                       dropless_return_bytes(st.histogram, p, me, row_bytes);
}

/// @pre experts divisible by the communicator's size; topk in [1, experts].
inline void check_dropless(const dropless_geometry& g, int ranks) {
  if (g.experts < 1 || g.topk < 1 || g.topk > g.experts)
    detail::fail<error>("a dropless layer needs topk=" + std::to_string(g.topk) + " in [1, experts=" + std::to_string(g.experts) + "]");
  if (g.experts % ranks != 0)
    detail::fail<error>("experts=" + std::to_string(g.experts) + " do not split over " + std::to_string(ranks) +
                " expert-parallel ranks; choose a degree that divides the experts");
}

}  // namespace detail

/// Forward of the layer on this rank's tokens x [t, h] with gates G [t, E] (device) and the
/// picks [t, k] (host, ascending per token). Returns y [t, h]; `st` keeps what backward reads.
template <class T, class D, class C>
  requires VariableAllToAll<C, T> && VariableAllToAll<C, std::int64_t>
buffer_t<D, T> dropless_moe_forward(D& d, C& comm, const dropless_geometry& g, std::span<const T> x, std::span<const T> gates,
                                    std::span<const std::int64_t> picks, dropless_weights<T> w, dropless_state<T, D>& st) {
  using detail::cview;
  detail::check_dropless(g, comm.size());
  detail::plan_routes(d, comm, g, picks, st);
  const std::int64_t h = g.hidden, f = g.ffn, routed = g.tokens * g.topk;
  buffer_t<D, T> xs = d.template alloc<T>(std::size_t(routed * h));
  if (routed > 0) d.gather_rows(std::as_const(d).view(st.order), std::int64_t(0), x, d.view(xs));
  st.xe = detail::dispatch_rows(d, comm, st, h, cview<T>(d, xs));
  const std::size_t rows = st.xe.size() / std::size_t(h);
  st.a = d.template alloc<T>(rows * std::size_t(f));
  st.u = d.template alloc<T>(rows * std::size_t(f));
  buffer_t<D, T> ye = d.template alloc<T>(rows * std::size_t(h));
  detail::grouped_swiglu_fwd(d, st.group_rows, h, f, cview<T>(d, st.xe), w, d.view(st.a), d.view(st.u), d.view(ye));
  st.ys = detail::return_rows(d, comm, st, h, cview<T>(d, ye));
  buffer_t<D, T> y = d.template alloc<T>(std::size_t(g.tokens * h));
  if (g.tokens > 0)
    d.combine_rows(g.tokens, g.experts, std::as_const(d).view(st.row_of), gates, cview<T>(d, st.ys), d.view(y));
  return y;
}

/// Backward from dy [t, h]: dx [t, h], dG [t, E] and the local experts' weight gradients
/// (kernels/grouped_experts.hpp states the products).
template <class T, class D, class C>
  requires VariableAllToAll<C, T>
dropless_gradients<T, D> dropless_moe_backward(D& d, C& comm, const dropless_geometry& g, std::span<const T> gates,
                                                dropless_weights<T> w, dropless_state<T, D>& st, std::span<const T> dy) {
  using detail::cview;
  const std::int64_t h = g.hidden, f = g.ffn, routed = g.tokens * g.topk;
  dropless_gradients<T, D> r;
  r.dgates = d.template alloc<T>(std::size_t(g.tokens * g.experts));
  buffer_t<D, T> dys = d.template alloc<T>(std::size_t(routed * h));
  if (g.tokens > 0)
    d.combine_rows_bwd(g.tokens, g.experts, std::as_const(d).view(st.row_of), gates, cview<T>(d, st.ys), dy, d.view(dys),
                       d.view(r.dgates));
  const buffer_t<D, T> dye = detail::dispatch_rows(d, comm, st, h, cview<T>(d, dys));
  const std::size_t local = st.group_rows.size(), wsize = std::size_t(h * f);
  buffer_t<D, T> dxe = d.template alloc<T>(st.xe.size());
  r.dw_gate = d.template alloc<T>(local * wsize);
  r.dw_up = d.template alloc<T>(local * wsize);
  r.dw_down = d.template alloc<T>(local * wsize);
  detail::grouped_swiglu_bwd(d, st.group_rows, h, f, cview<T>(d, st.xe), cview<T>(d, st.a), cview<T>(d, st.u), cview<T>(d, dye), w,
                             detail::grouped_grads<T>{d.view(dxe), d.view(r.dw_gate), d.view(r.dw_up), d.view(r.dw_down)});
  const buffer_t<D, T> dxs = detail::return_rows(d, comm, st, h, cview<T>(d, dxe));
  r.dx = d.template alloc<T>(std::size_t(g.tokens * h));
  if (routed > 0) d.scatter_add_rows(std::as_const(d).view(st.order), std::int64_t(0), cview<T>(d, dxs), d.view(r.dx));
  const std::int64_t row_bytes = h * std::int64_t(sizeof(T));
  st.bytes_predicted += dropless_dispatch_bytes(st.routes.tokens_per_expert, comm.size(), comm.rank(), row_bytes) +
                        dropless_return_bytes(st.histogram, comm.size(), comm.rank(), row_bytes);
  return r;
}

}  // namespace autoddl
