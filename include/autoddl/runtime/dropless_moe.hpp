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
//               one GEMM per matrix and expert (none for an expert without tokens)
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

/// The local experts' weights: W_gate, W_up [E/p, h, F] and W_down [E/p, F, h].
template <class T>
struct dropless_weights {
  std::span<const T> w_gate, w_up, w_down;
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

/// The block of expert l among rows grouped by local expert: rows [off, off + n) of width w.
template <class T>
std::span<T> group_block(std::span<T> v, std::int64_t off, std::int64_t n, std::int64_t w) {
  return v.subspan(std::size_t(off * w), std::size_t(n * w));
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
  std::int64_t rows = 0;
  for (const std::int64_t n : st.group_rows) rows += n;
  st.a = d.template alloc<T>(std::size_t(rows * f));
  st.u = d.template alloc<T>(std::size_t(rows * f));
  buffer_t<D, T> m = d.template alloc<T>(std::size_t(rows * f)), ye = d.template alloc<T>(std::size_t(rows * h));
  std::int64_t off = 0;
  for (std::size_t l = 0; l < st.group_rows.size(); off += st.group_rows[l], ++l) {
    const std::int64_t n = st.group_rows[l];
    if (n == 0) continue;
    const auto xl = detail::group_block(cview<T>(d, st.xe), off, n, h);
    const gemm_desc up{false, false, n, f, h, h, f, f};
    d.gemm(up, T(1), xl, w.w_gate.subspan(l * std::size_t(h * f)), T(0), detail::group_block(d.view(st.a), off, n, f));
    d.gemm(up, T(1), xl, w.w_up.subspan(l * std::size_t(h * f)), T(0), detail::group_block(d.view(st.u), off, n, f));
  }
  if (rows > 0) {
    d.silu_fwd(cview<T>(d, st.a), d.view(m));
    d.mul(cview<T>(d, m), cview<T>(d, st.u), d.view(m));
  }
  off = 0;
  for (std::size_t l = 0; l < st.group_rows.size(); off += st.group_rows[l], ++l) {
    const std::int64_t n = st.group_rows[l];
    if (n == 0) continue;
    d.gemm(gemm_desc{false, false, n, h, f, f, h, h}, T(1), detail::group_block(cview<T>(d, m), off, n, f),
           w.w_down.subspan(l * std::size_t(f * h)), T(0), detail::group_block(d.view(ye), off, n, h));
  }
  st.ys = detail::return_rows(d, comm, st, h, cview<T>(d, ye));
  buffer_t<D, T> y = d.template alloc<T>(std::size_t(g.tokens * h));
  if (g.tokens > 0)
    d.combine_rows(g.tokens, g.experts, std::as_const(d).view(st.row_of), gates, cview<T>(d, st.ys), d.view(y));
  return y;
}

/// Backward from dy [t, h]: dx [t, h], dG [t, E] and the local experts' weight gradients.
/// m = silu(a) u; dW_down = m^T dY; dm = dY W_down^T; du = dm silu(a); da = silu'(a) (dm u);
/// dW_gate = X^T da, dW_up = X^T du; dX = da W_gate^T + du W_up^T (per local expert).
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
  std::int64_t rows = 0;
  for (const std::int64_t n : st.group_rows) rows += n;
  const std::size_t rf = std::size_t(rows * f), local = st.group_rows.size();
  buffer_t<D, T> s = d.template alloc<T>(rf), m = d.template alloc<T>(rf), dm = d.template alloc<T>(rf), du = d.template alloc<T>(rf);
  buffer_t<D, T> dxe = d.template alloc<T>(std::size_t(rows * h));
  r.dw_gate = d.template alloc<T>(local * std::size_t(h * f));
  r.dw_up = d.template alloc<T>(local * std::size_t(h * f));
  r.dw_down = d.template alloc<T>(local * std::size_t(f * h));
  if (rows > 0) {
    d.silu_fwd(cview<T>(d, st.a), d.view(s));
    d.mul(cview<T>(d, s), cview<T>(d, st.u), d.view(m));
  }
  std::int64_t off = 0;
  for (std::size_t l = 0; l < local; off += st.group_rows[l], ++l) {  // dW_down and dm
    const std::int64_t n = st.group_rows[l];
    if (n == 0) continue;
    const auto dyl = detail::group_block(cview<T>(d, dye), off, n, h);
    d.gemm(gemm_desc{true, false, f, h, n, f, h, h}, T(1), detail::group_block(cview<T>(d, m), off, n, f), dyl, T(0),
           d.view(r.dw_down).subspan(l * std::size_t(f * h), std::size_t(f * h)));
    d.gemm(gemm_desc{false, true, n, f, h, h, h, f}, T(1), dyl, w.w_down.subspan(l * std::size_t(f * h)), T(0),
           detail::group_block(d.view(dm), off, n, f));
  }
  if (rows > 0) {
    d.mul(cview<T>(d, dm), cview<T>(d, s), d.view(du));
    d.mul(cview<T>(d, dm), cview<T>(d, st.u), d.view(m));
    d.silu_bwd(cview<T>(d, st.a), cview<T>(d, m), d.view(s));  // s becomes da
  }
  off = 0;
  for (std::size_t l = 0; l < local; off += st.group_rows[l], ++l) {  // dW_gate, dW_up and dX
    const std::int64_t n = st.group_rows[l];
    if (n == 0) continue;
    const auto xl = detail::group_block(cview<T>(d, st.xe), off, n, h);
    const auto dal = detail::group_block(cview<T>(d, s), off, n, f), dul = detail::group_block(cview<T>(d, du), off, n, f);
    const std::size_t wo = l * std::size_t(h * f), ws = std::size_t(h * f);
    const gemm_desc dw{true, false, h, f, n, h, f, f}, dx{false, true, n, h, f, f, f, h};
    d.gemm(dw, T(1), xl, dal, T(0), d.view(r.dw_gate).subspan(wo, ws));
    d.gemm(dw, T(1), xl, dul, T(0), d.view(r.dw_up).subspan(wo, ws));
    const auto dxl = detail::group_block(d.view(dxe), off, n, h);
    d.gemm(dx, T(1), dal, w.w_gate.subspan(wo), T(0), dxl);
    d.gemm(dx, T(1), dul, w.w_up.subspan(wo), T(1), dxl);
  }
  const buffer_t<D, T> dxs = detail::return_rows(d, comm, st, h, cview<T>(d, dxe));
  r.dx = d.template alloc<T>(std::size_t(g.tokens * h));
  if (routed > 0) d.scatter_add_rows(std::as_const(d).view(st.order), std::int64_t(0), cview<T>(d, dxs), d.view(r.dx));
  const std::int64_t row_bytes = h * std::int64_t(sizeof(T));
  st.bytes_predicted += dropless_dispatch_bytes(st.routes.tokens_per_expert, comm.size(), comm.rank(), row_bytes) +
                        dropless_return_bytes(st.histogram, comm.size(), comm.rank(), row_bytes);
  return r;
}

}  // namespace autoddl
