#pragma once
// The loss of a training step on one device: its part of the global loss, the all-reduce that
// sums the parts, the seed of backward, the row statistics a vocab-parallel cross-entropy
// all-reduces over the axes that split the logits, and the stop on a loss or gradient that is
// not finite.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "autoddl/backend/communicator.hpp"
#include "autoddl/backend/device.hpp"
#include "autoddl/error.hpp"
#include "autoddl/index.hpp"
#include "autoddl/models/graph.hpp"
#include "autoddl/runtime/kernels/context.hpp"
#include "autoddl/runtime/kernels/embedding.hpp"
#include "autoddl/sbp/nd_sbp.hpp"

namespace autoddl::detail {

/// Vocab-parallel cross-entropy: its row statistics are all-reduced over the axes that split the
/// logits' last dim (the planner priced these as the op's statistic all-reduces).
template <class T, Device D, MeshCommunicator M>
void wire_statistics(D& dev, M& comm, kernel_context<T>& c) {
  if (c.op.kind != op_kind::cross_entropy) return;
  const int last = c.op.inputs[0].rank() - 1;
  std::vector<int> axes;
  for (int a = 0; a < c.sig.inputs[0].size(); ++a)
    if (c.sig.inputs[0][a].is_split() && c.sig.inputs[0][a].dim == last) axes.push_back(a);
  if (axes.empty()) return;
  using S = statistic_t<T>;
  c.row_all_reduce = [dev = &dev, comm = &comm, axes](std::span<S> v, reduce_kind k) {
    for (int a : axes) {  // in place, through a zero-padded copy where n does not divide the rows
      const std::size_t n = std::size_t(comm->shape()[a]);
      if (v.size() % n == 0) {
        comm->axis(a).all_reduce(v, k);
        continue;
      }
      buffer_t<D, S> pad = dev->template alloc<S>((v.size() + n - 1) / n * n);
      dev->copy(std::span<const S>(v), dev->view(pad).first(v.size()));
      comm->axis(a).all_reduce(dev->view(pad), k);
      dev->copy(std::as_const(*dev).view(pad).first(v.size()), v);
    }
  };
}

/// The loss output is a scalar, P over the axes whose devices hold partial sums and B over the
/// others: the global loss sums one copy per P group. This device's part: its value if it holds
/// one of those copies, else 0. `f` is the loss op's forward (of kind `kind`): a cross-entropy's
/// loss is read in statistic_t<T> (float for a 16-bit T: kernels/embedding.hpp), another op's in T.
template <class T, Device D, MeshCommunicator M>
double local_loss(D& dev, const M& comm, const forward_result<D, T>& f, op_kind kind, const nd_sbp& l) {
  for (int a = 0; a < l.size(); ++a)
    if (!l[a].is_partial() && comm.coords()[a] != 0) return 0;
  auto read = [&dev]<class E>(std::span<const E> x) {
    E v{};
    dev.download(x.first(1), std::span<E>(&v, 1));
    return double(v);
  };
  if (kind == op_kind::cross_entropy) return read(xent_loss_value<T>(std::as_const(dev), f));
  return read(std::as_const(dev).view(f.outputs[0]));
}

/// dLoss/dLoss = 1/m for a step of m micro-batches (the step's loss is their mean), laid out
/// dual(loss layout): B where the loss was P (every device holds it), P where it was B (device 0
/// of that axis holds it, the others 0); times `scale` under a loss scale.
template <class T, Device D, MeshCommunicator M>
buffer_t<D, T> loss_seed(D& dev, const M& comm, const nd_sbp& l, int microbatches, double scale = 1) {
  bool one = true;
  for (int a = 0; a < l.size(); ++a)
    if (l[a].is_broadcast() && comm.coords()[a] != 0) one = false;
  const std::vector<T> h(1, one ? T(scale / microbatches) : T(0));
  buffer_t<D, T> b = dev.template alloc<T>(h.size());
  dev.upload(std::span<const T>(h), dev.view(b));
  return b;
}

/// Stops training on a loss that is NaN or Inf (train_options::check_finite).
[[noreturn]] inline void fail_non_finite_loss(double loss, std::int64_t step_index) {
  fail<error>("step " + std::to_string(step_index) + ": the loss is " + (std::isnan(loss) ? "NaN" : "Inf") +
              "; training stopped (lower the learning rate or check the inputs; train_options::check_finite "
              "= false, autoddl-train --no-check-finite, turns this check off)");
}

/// Stops training on parameter p's gradient holding NaN or Inf, naming the ops that use p.
[[noreturn]] inline void fail_non_finite_gradient(const graph& g, int p, std::int64_t step_index) {
  std::string users;
  for (const op_node& op : g.ops)
    for (int q : op.param_ids)
      if (q == p) users += (users.empty() ? "'" : ", '") + op.name + "'";
  fail<error>("step " + std::to_string(step_index) + ": the gradient of parameter '" + at(g.params, p).name +
              "' (used by op " + users + ") holds NaN or Inf; training stopped (lower the learning rate or "
              "check the inputs; train_options::check_finite = false, autoddl-train --no-check-finite, turns "
              "this check off)");
}

/// x reduced (sum or max) over the devices of communicator c, through the device's memory (the
/// communicator works on it): one double per device, padded to c's size.
template <Device D, class C>
double all_reduce_one(D& dev, C& c, double x, reduce_kind k) {
  std::vector<double> h(std::size_t(c.size()), 0.0);
  h[0] = x;
  buffer_t<D, double> b = dev.template alloc<double>(h.size());
  dev.upload(std::span<const double>(h), dev.view(b));
  c.all_reduce(dev.view(b), k);
  dev.download(std::as_const(dev).view(b).first(1), std::span<double>(h).first(1));
  return h[0];
}

}  // namespace autoddl::detail
