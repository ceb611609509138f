#pragma once
// Kernels of the token embedding and of the softmax cross-entropy on local shards, with their
// vocabulary-parallel forms (Megatron-LM, Shoeybi et al. 2019).
// - embedding: a device whose table block holds global rows [lo, hi) gathers those ids and
//   writes zeros for the others (Y[P] under W[S(0)]); positions [seq, hidden] are added as a
//   bias over the batch (a P position table is stored on one device, zeros elsewhere).
// - cross_entropy: loss = (1/N) sum_rows (log sum_v exp(x_v) - x_label), N = the rows of the
//   GLOBAL logits, so summing the devices' P losses gives the global mean. Under a vocabulary
//   split the row max, the sum of exponentials and the target logit are all-reduced over the
//   splitting axes by kernel_context::row_all_reduce (two calls: max, then sum of [sumexp,
//   target]); the device holding vocabulary block 0 reports the loss, the others 0. The loss and
//   1/N are in the statistics' type (float for the 16-bit types, as the engines compute a bf16
//   model's loss): a 16-bit T keeps the loss as a fourth statistic (xent_loss_value) and its
//   output holds it rounded to T, for the ops that read it.
#include <span>
#include <type_traits>

#include "autoddl/index.hpp"
#include "autoddl/runtime/kernels/context.hpp"

namespace autoddl::detail {

template <class T, class D>
forward_result<D, T> embedding_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  const shard_info& w = c.shards.params[0];
  forward_result<D, T> r;
  r.outputs.push_back(alloc_like<T>(d, c.shards.outputs[0]));
  std::span<T> y = d.view(r.outputs[0]);
  d.gather_rows(in.indices, w.offset[0], in.params[0], y);
  if (c.op.attrs.positions) {
    const std::int64_t per = c.shards.params[1].local.elements();
    d.bias_add(per ? std::int64_t(y.size()) / per : 0, per, std::int64_t(1), in.params[1], y);
  }
  return r;
}

template <class T, class D>
gradients<D, T> embedding_bwd(D& d, const kernel_context<T>& c, const operands<T>& in, std::span<const T> dy) {
  const shard_info& w = c.shards.params[0];
  gradients<D, T> g;
  g.inputs.push_back(d.template alloc<T>(0));
  g.params.push_back(alloc_like<T>(d, w));
  d.scatter_add_rows(in.indices, w.offset[0], dy, d.view(g.params[0]));
  if (c.op.attrs.positions) {
    const std::int64_t per = c.shards.params[1].local.elements();
    g.params.push_back(alloc_like<T>(d, c.shards.params[1]));
    d.bias_grad(per ? std::int64_t(dy.size()) / per : 0, per, std::int64_t(1), dy, d.view(g.params[1]));
  }
  return g;
}

struct xent_dims {
  std::int64_t rows, cols, lo;  ///< local rows and vocabulary columns; global index of column 0
  double inv_n;                 ///< 1 / rows of the global logits
};

template <class T>
xent_dims xent_dims_of(const kernel_context<T>& c) {
  const shard_info& x = c.shards.inputs[0];
  const int last = x.local.rank() - 1;
  const std::int64_t n = rows_of(x.global);
  return {rows_of(x.local), x.local[last], at(x.offset, last), n ? 1.0 / double(n) : 0.0};
}

template <class T, class D>
forward_result<D, T> cross_entropy_fwd(D& d, const kernel_context<T>& c, const operands<T>& in) {
  using S = statistic_t<T>;
  const xent_dims x = xent_dims_of(c);
  forward_result<D, T> r;
  r.statistics.push_back(d.template alloc<S>(std::size_t(x.rows)));      // row max
  r.statistics.push_back(d.template alloc<S>(std::size_t(2 * x.rows)));  // sum exp, target logit
  d.row_max(x.rows, x.cols, in.inputs[0], d.view(r.statistics[0]));
  if (c.row_all_reduce) c.row_all_reduce(d.view(r.statistics[0]), reduce_kind::max);
  d.xent_stats(x.rows, x.cols, in.inputs[0], in.indices, x.lo, cview<S>(d, r.statistics[0]), d.view(r.statistics[1]));
  if (c.row_all_reduce) c.row_all_reduce(d.view(r.statistics[1]), reduce_kind::sum);
  r.outputs.push_back(d.template alloc<T>(1));
  if constexpr (!std::is_same_v<S, T>) r.statistics.push_back(d.template alloc<S>(1));  // the loss in S
  if (x.lo != 0) return r;
  std::span<S> loss;
  if constexpr (std::is_same_v<S, T>) loss = d.view(r.outputs[0]);
  else loss = d.view(r.statistics.back());
  d.xent_loss(x.rows, cview<S>(d, r.statistics[0]), cview<S>(d, r.statistics[1]), S(x.inv_n), loss);
  if constexpr (!std::is_same_v<S, T>) d.convert(std::span<const S>(loss), d.view(r.outputs[0]));
  return r;
}

/// The loss a cross-entropy forward computed, in statistic_t<T>: its output for float and double,
/// its last statistic for a 16-bit T (whose output holds it rounded).
template <class T, class D>
std::span<const statistic_t<T>> xent_loss_value(const D& d, const forward_result<D, T>& f) {
  if constexpr (std::is_same_v<statistic_t<T>, T>) return d.view(f.outputs[0]);
  else return d.view(f.statistics.back());
}

template <class T, class D>
gradients<D, T> cross_entropy_bwd(D& d, const kernel_context<T>& c, const operands<T>& in, const forward_result<D, T>& f,
                                  std::span<const T> dloss) {
  const xent_dims x = xent_dims_of(c);
  gradients<D, T> g;
  g.inputs.push_back(alloc_like<T>(d, c.shards.inputs[0]));
  g.inputs.push_back(d.template alloc<T>(0));
  using S = statistic_t<T>;
  d.xent_bwd(x.rows, x.cols, in.inputs[0], in.indices, x.lo, cview<S>(d, f.statistics[0]), cview<S>(d, f.statistics[1]),
             dloss, S(x.inv_n), d.view(g.inputs[0]));
  return g;
}

}  // namespace autoddl::detail
