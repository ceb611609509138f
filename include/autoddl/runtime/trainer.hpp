#pragma once
// A training step of any valid plan on one device of the mesh: forward, loss, backward,
// gradient boxing to the parameters' storage layouts, optimizer step (DESIGN.md).
//
// Every tensor that crosses an edge of the model is boxed by exactly the path the planner
// priced (plan_problem::edge_paths): activations from the producer's output layout to the
// consumer's input layout, their gradients from dual(input) back to dual(output), parameters
// from storage to compute layout, their gradients from dual(compute) to storage. Gradients
// reaching one tensor from several consumers (residuals, tied weights) are added in the common
// layout. Bytes sent on the mesh axes per step therefore equal the plan's predicted bytes.
#include <cstdint>
#include <span>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <string>
#include <vector>

#include "autoddl/backend/communicator.hpp"
#include "autoddl/backend/device.hpp"
#include "autoddl/cost/memory.hpp"
#include "autoddl/runtime/boxing.hpp"
#include "autoddl/runtime/data.hpp"
#include "autoddl/runtime/op_kernels.hpp"
#include "autoddl/search/planner.hpp"

namespace autoddl {

struct train_options {
  optimizer opt = optimizer::adam;
  double lr = 1e-3;
  std::uint64_t seed = 1;
  bool keep_outputs = false;  ///< keep every op's output shard of the last step (for checks)
};

/// One device's part of training `pp`'s model under the plan `pick` (per node of pp.untied()).
template <class T, Device D, MeshCommunicator M>
class trainer {
 public:
  trainer(const plan_problem& pp, std::vector<int> pick, D& dev, M& comm, train_options o = {})
      : pp_(pp), g_(pp.model()), pick_(std::move(pick)), dev_(dev), comm_(comm), o_(o) {
#if defined(__GLIBC__)
    // Every step allocates the same buffer sizes: keep freed ones in the heap for the next step
    // rather than returning them to the kernel and faulting fresh pages in (a caching allocator's
    // effect; glibc otherwise maps every buffer over 128 KiB anew).
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
    if (!(comm_.shape() == pp_.options().mesh))
      detail::fail<layout_error>("the plan is for mesh " + to_string(pp_.options().mesh) + " but the communicator spans " +
                                 to_string(comm_.shape()));
    const int nops = int(g_.ops.size());
    edge_of_input_.resize(std::size_t(nops));
    edge_of_param_.resize(std::size_t(nops));
    for (int i = 0; i < nops; ++i) {
      edge_of_input_[std::size_t(i)].assign(g_.op_inputs[std::size_t(i)].size(), -1);
      edge_of_param_[std::size_t(i)].assign(g_.ops[std::size_t(i)].param_ids.size(), -1);
    }
    const auto& infos = pp_.edge_infos();
    const auto& u = pp_.untied();
    paths_.reserve(infos.size());
    for (std::size_t e = 0; e < infos.size(); ++e)
      paths_.push_back(pp_.edge_paths(int(e), pick_[std::size_t(u.edges()[e].u)], pick_[std::size_t(u.edges()[e].v)]));
    for (std::size_t e = 0; e < infos.size(); ++e) {
      if (infos[e].param) edge_of_param_[std::size_t(infos[e].to_node)][std::size_t(infos[e].tensor_index)] = int(e);
      else edge_of_input_[std::size_t(infos[e].to_node)][std::size_t(infos[e].tensor_index)] = int(e);
    }
    kinds_ = input_kinds(g_);
    const int np = int(g_.params.size());
    params_.resize(std::size_t(np));
    grads_.resize(std::size_t(np));
    state1_.resize(std::size_t(np));
    state2_.resize(std::size_t(np));
    for (int p = 0; p < np; ++p) {
      shard_info s = make_shard(g_.params[std::size_t(p)].shape, storage(p), comm_.shape(), comm_.coords());
      params_[std::size_t(p)] = init_param_shard<T>(g_, p, s, o_.seed);
      state1_[std::size_t(p)].assign(params_[std::size_t(p)].size(), T{});
      state2_[std::size_t(p)].assign(params_[std::size_t(p)].size(), T{});
    }
  }

  const signature& sig(int op) const { return pp_.op_candidates(op)[std::size_t(pick_[std::size_t(op)])]; }
  const nd_sbp& storage(int p) const {
    return pp_.param_candidates(p)[std::size_t(pick_[std::size_t(pp_.param_node(p))])];
  }
  /// This device's shard of parameter p (storage layout) and of its last gradient.
  const std::vector<T>& param_shard(int p) const { return params_[std::size_t(p)]; }
  const std::vector<T>& grad_shard(int p) const { return grads_[std::size_t(p)]; }
  /// This device's shard of op `op`'s output in the last step (train_options::keep_outputs).
  const std::vector<T>& output_shard(int op) const { return kept_outputs_.at(std::size_t(op)); }
  /// Bytes this device sent on the mesh axes during the last step (the plan's bytes).
  std::int64_t last_step_bytes() const { return last_bytes_; }

  /// Runs training step `step` (0-based) and returns the global loss (same on every device).
  double step(std::int64_t step) {
    const std::int64_t before = axis_bytes();
    const int nops = int(g_.ops.size());
    std::vector<std::vector<std::vector<T>>> inputs(static_cast<std::size_t>(nops)), params(static_cast<std::size_t>(nops));
    std::vector<std::vector<std::int64_t>> indices(static_cast<std::size_t>(nops));
    std::vector<kernel_context<T>> ctx;
    std::vector<forward_result<D, T>> fwd;
    ctx.reserve(std::size_t(nops));
    fwd.reserve(std::size_t(nops));  // never reallocates: outputs are read in place below
    auto output = [&](int op) -> const std::vector<T>& { return fwd[std::size_t(op)].outputs[0]; };
    // ---- forward
    for (int i = 0; i < nops; ++i) {
      const op_node& n = g_.ops[std::size_t(i)];
      const signature& s = sig(i);
      ctx.push_back(make_kernel_context<T>(n, s, comm_.shape(), comm_.coords(), o_.seed + std::uint64_t(step) * 1000003,
                                           std::uint64_t(i)));
      wire_statistics(ctx.back());
      ctx.back().input_grad_wanted.assign(n.inputs.size(), true);
      for (std::size_t j = 0; j < n.inputs.size(); ++j)  // model inputs need no gradient
        if (g_.op_inputs[std::size_t(i)][j].op < 0) ctx.back().input_grad_wanted[j] = false;
      auto& in = inputs[std::size_t(i)];
      in.resize(n.inputs.size());
      for (std::size_t j = 0; j < n.inputs.size(); ++j) {
        const tensor_ref r = g_.op_inputs[std::size_t(i)][j];
        if (r.op < 0) {
          const shard_info sh = ctx.back().shards.inputs[j];
          if (kinds_[std::size_t(r.index)].indices) {
            indices[std::size_t(i)] = index_shard(sh, r.index, kinds_[std::size_t(r.index)].bound, o_.seed, step);
          } else {
            in[j] = input_shard<T>(sh, r.index, o_.seed, step);
            // taken as P: the value sits on coordinate 0 of each P axis, zeros elsewhere
            for (int a = 0; a < s.inputs[j].size(); ++a)
              if (s.inputs[j][a].is_partial() && comm_.coords()[a] != 0) std::fill(in[j].begin(), in[j].end(), T{});
          }
          continue;
        }
        const int e = edge_of_input_[std::size_t(i)][j];
        const auto& path = paths_[std::size_t(e)].first;
        if (path.size() == 0) continue;  // same layout: the kernel reads the producer's output
        in[j] = run_boxing<T>(comm_, output(r.op), g_.ops[std::size_t(r.op)].outputs[std::size_t(r.index)],
                              sig(r.op).outputs[std::size_t(r.index)], path);
      }
      auto& pr = params[std::size_t(i)];
      pr.resize(n.param_ids.size());
      for (std::size_t j = 0; j < n.param_ids.size(); ++j) {
        const int p = n.param_ids[j];
        const int e = edge_of_param_[std::size_t(i)][j];
        const auto& path = paths_[std::size_t(e)].first;
        if (path.size() == 0) continue;  // stored as computed: the kernel reads the shard itself
        pr[j] = run_boxing<T>(comm_, params_[std::size_t(p)], g_.params[std::size_t(p)].shape, storage(p), path);
      }
      operands<T> ops = make_operands(i, inputs, params, indices, fwd);
      fwd.push_back(op_forward(dev_, ctx.back(), ops));
    }
    const double loss = global_loss(output(g_.loss_op), sig(g_.loss_op).outputs[0]);
    if (o_.keep_outputs) {
      kept_outputs_.clear();
      for (int i = 0; i < nops; ++i) kept_outputs_.push_back(output(i));
    }
    // ---- backward
    std::vector<std::vector<T>> dy(static_cast<std::size_t>(nops));
    dy[std::size_t(g_.loss_op)] = loss_seed(sig(g_.loss_op).outputs[0]);
    for (auto& gr : grads_) gr.clear();
    for (int i = nops - 1; i >= 0; --i) {
      const op_node& n = g_.ops[std::size_t(i)];
      if (dy[std::size_t(i)].empty())
        dy[std::size_t(i)].assign(std::size_t(ctx[std::size_t(i)].shards.outputs[0].local.elements()), T{});
      operands<T> ops = make_operands(i, inputs, params, indices, fwd);
      auto grads = op_backward(dev_, ctx[std::size_t(i)], ops, fwd[std::size_t(i)], std::span<const T>(dy[std::size_t(i)]));
      for (std::size_t j = 0; j < n.inputs.size(); ++j) {
        const tensor_ref r = g_.op_inputs[std::size_t(i)][j];
        if (r.op < 0) continue;
        const int e = edge_of_input_[std::size_t(i)][j];
        const auto& path = paths_[std::size_t(e)].second;
        if (path.size() == 0) {
          accumulate(dy[std::size_t(r.op)], std::move(grads.inputs[j]));
          continue;
        }
        accumulate(dy[std::size_t(r.op)],
                   run_boxing<T>(comm_, std::move(grads.inputs[j]),
                                 g_.ops[std::size_t(r.op)].outputs[std::size_t(r.index)], dual(sig(i).inputs[j]), path));
      }
      for (std::size_t j = 0; j < n.param_ids.size(); ++j) {
        const int p = n.param_ids[j];
        const int e = edge_of_param_[std::size_t(i)][j];
        const auto& path = paths_[std::size_t(e)].second;
        if (path.size() == 0) {
          accumulate(grads_[std::size_t(p)], std::move(grads.params[j]));
          continue;
        }
        accumulate(grads_[std::size_t(p)],
                   run_boxing<T>(comm_, std::move(grads.params[j]),
                                 g_.params[std::size_t(p)].shape, dual(sig(i).params[j]), path));
      }
      dy[std::size_t(i)].clear();
    }
    // ---- optimizer, on each device's storage shard
    ++steps_done_;
    optimizer_step os;
    os.lr = o_.lr;
    os.step = steps_done_;
    for (std::size_t p = 0; p < params_.size(); ++p) {
      if (grads_[p].empty()) grads_[p].assign(params_[p].size(), T{});
      if (o_.opt == optimizer::adam)
        dev_.template adam<T>(os, grads_[p], state1_[p], state2_[p], params_[p]);
      else
        dev_.template sgd_momentum<T>(os, grads_[p], state1_[p], params_[p]);
    }
    last_bytes_ = axis_bytes() - before;
    return loss;
  }

 private:
  std::int64_t axis_bytes() {
    std::int64_t b = 0;
    for (int a = 0; a < comm_.shape().size(); ++a) b += comm_.axis(a).bytes_sent();
    return b;
  }

  // The operands of op i: a boxed copy where its edge boxes, else the producer's output or the
  // stored parameter shard itself (identity paths copy nothing).
  operands<T> make_operands(int i, const std::vector<std::vector<std::vector<T>>>& inputs,
                            const std::vector<std::vector<std::vector<T>>>& params,
                            const std::vector<std::vector<std::int64_t>>& indices,
                            const std::vector<forward_result<D, T>>& fwd) const {
    operands<T> ops;
    const op_node& n = g_.ops[std::size_t(i)];
    for (std::size_t j = 0; j < n.inputs.size(); ++j) {
      const tensor_ref r = g_.op_inputs[std::size_t(i)][j];
      const bool direct = r.op >= 0 && paths_[std::size_t(edge_of_input_[std::size_t(i)][j])].first.size() == 0;
      ops.inputs.push_back(std::span<const T>(direct ? fwd[std::size_t(r.op)].outputs[0] : inputs[std::size_t(i)][j]));
    }
    for (std::size_t j = 0; j < n.param_ids.size(); ++j) {
      const bool direct = paths_[std::size_t(edge_of_param_[std::size_t(i)][j])].first.size() == 0;
      ops.params.push_back(std::span<const T>(direct ? params_[std::size_t(n.param_ids[j])] : params[std::size_t(i)][j]));
    }
    ops.indices = std::span<const std::int64_t>(indices[std::size_t(i)]);
    return ops;
  }

  static void accumulate(std::vector<T>& into, std::vector<T>&& v) {
    if (into.empty()) {
      into = std::move(v);
      return;
    }
    for (std::size_t k = 0; k < v.size(); ++k) into[k] += v[k];
  }

  // Vocab-parallel cross-entropy: its row statistics are all-reduced over the axes that split
  // the logits' last dim (the planner priced these as the op's statistic all-reduces).
  void wire_statistics(kernel_context<T>& c) {
    if (c.op.kind != op_kind::cross_entropy) return;
    const int last = c.op.inputs[0].rank() - 1;
    std::vector<int> axes;
    for (int a = 0; a < c.sig.inputs[0].size(); ++a)
      if (c.sig.inputs[0][a].is_split() && c.sig.inputs[0][a].dim == last) axes.push_back(a);
    if (axes.empty()) return;
    c.row_all_reduce = [this, axes](std::span<T> v, reduce_kind k) {
      for (int a : axes) {
        const std::size_t n = std::size_t(comm_.shape()[a]);
        std::vector<T> buf(v.begin(), v.end());
        buf.resize((v.size() + n - 1) / n * n, T{});
        comm_.axis(a).all_reduce(std::span<T>(buf), k);
        std::copy_n(buf.begin(), v.size(), v.begin());
      }
    };
  }

  // The loss output is a scalar, P over the axes whose devices hold partial sums and B over the
  // others: the global loss sums one copy per P group. Reported over the world communicator,
  // outside the plan's bytes.
  double global_loss(const std::vector<T>& local, const nd_sbp& l) {
    bool counted = true;
    for (int a = 0; a < l.size(); ++a)
      if (!l[a].is_partial() && comm_.coords()[a] != 0) counted = false;
    const std::size_t n = std::size_t(comm_.world().size());
    std::vector<double> buf(n, 0.0);
    if (counted) buf[0] = double(local.at(0));
    comm_.world().all_reduce(std::span<double>(buf));
    return buf[0];
  }

  // dLoss/dLoss = 1, laid out dual(loss layout): B where the loss was P (every device holds
  // 1), P where it was B (device 0 of that axis holds 1, the others 0).
  std::vector<T> loss_seed(const nd_sbp& l) const {
    bool one = true;
    for (int a = 0; a < l.size(); ++a)
      if (l[a].is_broadcast() && comm_.coords()[a] != 0) one = false;
    return std::vector<T>(1, one ? T(1) : T(0));
  }

  const plan_problem& pp_;
  const graph& g_;
  std::vector<int> pick_;
  D& dev_;
  M& comm_;
  train_options o_;
  std::vector<std::vector<int>> edge_of_input_, edge_of_param_;
  std::vector<std::pair<boxing_path, boxing_path>> paths_;  // per edge: forward, backward
  std::vector<input_kind> kinds_;
  std::vector<std::vector<T>> params_, grads_, state1_, state2_, kept_outputs_;
  std::int64_t steps_done_ = 0;
  std::int64_t last_bytes_ = 0;
};

}  // namespace autoddl
