#pragma once
// A step's parameter gradients on one device, summed: over the micro-batches per parameter edge
// (in dual(compute)), then over the edges of each parameter (in its summing layout). In the last
// micro-batch's backward each edge's sum is boxed to the summing layout once; where the Device and
// its communicator offer a side queue (SideQueue<D, M>) that boxing and its addition run there,
// beside the remaining ops' backward, and are kept apart until the join after backward.
// Without a side queue the collectives block, and each one waits for the slowest rank to reach
// it: an all-reduce in place of a parameter with one use (data parallelism's gradients) waits
// for the join instead, where the ranks meet once and run them back to back. It holds the same
// buffer until then that it would hand to the parameter's sum (the same bytes, the same sizes),
// so the step's memory at every sample is what it was (search/step_memory.hpp replays it).
// Sums are kept in Sum: master_t<T> by default (float for a 16-bit T: precision.hpp), each
// contribution widened as it comes; or T itself (16-bit sums: Megatron-LM without
// --accumulate-allreduce-grads-in-fp32). The sums are boxed in Sum: the gradient collectives move
// fp32 with fp32 sums, as Megatron-LM's do with that flag, and T with 16-bit sums (the planner
// prices them so: plan_pricing::as_gradient).
#include <cstddef>
#include <utility>
#include <vector>

#include "autoddl/backend/communicator.hpp"
#include "autoddl/backend/device.hpp"
#include "autoddl/index.hpp"
#include "autoddl/models/graph.hpp"
#include "autoddl/runtime/boxing.hpp"
#include "autoddl/runtime/detail/device_buffers.hpp"
#include "autoddl/runtime/detail/precision.hpp"
#include "autoddl/runtime/train_options.hpp"

namespace autoddl::detail {

template <class T, Device D, MeshCommunicator M, class Sum = master_t<T>>
class gradient_accumulator {
 public:
  using buffer = buffer_t<D, T>;
  using sum_buffer = buffer_t<D, Sum>;

  gradient_accumulator(D& dev, M& comm, int params) : dev_(&dev), comm_(&comm), buffers_(dev) {
    resize(grad_sums_, params);
    resize(boxed_sums_, params);
  }

  /// A new step on `model`: last step's sums freed, one accumulator per parameter slot of each op.
  void begin_step(const graph& model) {
    for (auto& g : grad_sums_) buffers_.release(g);
    param_grad_acc_.clear();  // (buffers may be move-only: no assign)
    resize(param_grad_acc_, model.ops.size());
    uses_.assign(grad_sums_.size(), 0);
    for (std::size_t i = 0; i < model.ops.size(); ++i) {
      at(param_grad_acc_, i).resize(at(model.ops, i).param_ids.size());
      for (int p : at(model.ops, i).param_ids) ++at(uses_, p);
    }
  }

  /// Micro-batch contribution g to the gradient of op i's parameter slot j (parameter p, shaped
  /// `shape`), laid out `compute_grad` (dual(compute)); `path` boxes it to the summing layout. An
  /// edge whose gradient needs no boxing adds it to the summing layout's sum directly; the others
  /// sum it in dual(compute) and box the sum once, in the last micro-batch (with one micro-batch:
  /// each contribution boxed as it comes, as the planner prices it).
  void add(int i, std::size_t j, int p, buffer&& g, bool last_micro_batch, const boxing_path& path,
           const tensor_shape& shape, const nd_sbp& compute_grad, step_profile& profile) {
    auto t = step_clock::now();
    if (path.size() == 0) {
      buffers_.accumulate(at(grad_sums_, p), widened(std::move(g)));
      profile.accumulate_s += lap(t);
      return;
    }
    sum_buffer& sum = at(param_grad_acc_, i)[j];
    buffers_.accumulate(sum, widened(std::move(g)));
    profile.accumulate_s += lap(t);
    if (!last_micro_batch) return;
    if constexpr (SideQueue<D, M>) {
      box_on_side_queue(sum, p, path, shape, compute_grad);
      at(profile.boxing_s, i) += lap(t);
      return;
    } else if (waits_for_join(p, path, sum.size())) {
      deferred_.push_back({i, j, p, &path, shape, compute_grad});
      return;
    }
    sum_buffer boxed = run_boxing<Sum>(*dev_, *comm_, std::move(sum), shape, compute_grad, path);
    buffers_.release(sum);
    at(profile.boxing_s, i) += lap(t);
    buffers_.accumulate(at(grad_sums_, p), std::move(boxed));
    profile.accumulate_s += lap(t);
  }

  /// The main queue waits for the gradient boxings queued on the side queue, then adds each
  /// parameter's boxed sum to what the main queue summed (a move where it summed nothing).
  /// Without a side queue, or with nothing queued since the last join, nothing.
  void join(step_profile& profile) {
    if constexpr (!SideQueue<D, M>) {
      for (const deferred_boxing& d : deferred_) {
        auto t = step_clock::now();
        sum_buffer& sum = at(param_grad_acc_, d.op)[d.slot];
        sum_buffer boxed = run_boxing<Sum>(*dev_, *comm_, std::move(sum), d.shape, d.compute_grad, *d.path);
        buffers_.release(sum);
        at(profile.boxing_s, d.op) += lap(t);
        buffers_.accumulate(at(grad_sums_, d.param), std::move(boxed));
        profile.accumulate_s += lap(t);
      }
      deferred_.clear();
    } else {
      if (!side_pending_) return;
      auto t = step_clock::now();
      dev_->join_side_queue(*comm_);
      side_pending_ = false;
      profile.side_join_s += lap(t);
      for (std::size_t p = 0; p < boxed_sums_.size(); ++p)
        if (!boxed_sums_[p].empty()) {
          buffers_.accumulate(grad_sums_[p], std::move(boxed_sums_[p]));
          buffers_.release(boxed_sums_[p]);  // (accumulate adds without taking it where grad_sums_[p] held a value)
        }
      profile.accumulate_s += lap(t);
    }
  }

  /// Per parameter: its uses' gradients, summed in its summing layout (after join).
  std::vector<sum_buffer>& sums() { return grad_sums_; }

 private:
  // With a side queue: an edge's summed gradient `sum` (moved out) boxed and added into
  // boxed_sums_[p] there. Every buffer the path makes, and the sum itself, dies before the switch
  // back, so the device releases it in the side queue's order.
  void box_on_side_queue(sum_buffer& sum, int p, const boxing_path& path, const tensor_shape& shape,
                         const nd_sbp& compute_grad) {
    dev_->use_side_queue(*comm_);
    side_pending_ = true;
    {
      sum_buffer boxed = run_boxing<Sum>(*dev_, *comm_, std::move(sum), shape, compute_grad, path);
      buffers_.accumulate(at(boxed_sums_, p), std::move(boxed));
    }
    buffers_.release(sum);
    dev_->use_main_queue(*comm_);
  }

  sum_buffer widened(buffer&& g) { return converted<Sum, T>(*dev_, std::move(g)); }

  /// Whether the boxing of parameter p's only use waits for the join: one all-reduce step,
  /// in place (the axis divides the `elements`), the result moved into p's empty sum.
  bool waits_for_join(int p, const boxing_path& path, std::size_t elements) {
    if (at(uses_, p) != 1 || path.size() != 1 || path[0].op != collective::all_reduce) return false;
    return elements % std::size_t(comm_->shape()[path[0].axis]) == 0;
  }

  /// A boxing waiting for the join: op `op`'s parameter slot `slot` (parameter `param`).
  struct deferred_boxing {
    int op;
    std::size_t slot;
    int param;
    const boxing_path* path;  ///< the trainer's, alive for the step
    tensor_shape shape;
    nd_sbp compute_grad;
  };

  D* dev_;
  M* comm_;
  std::vector<int> uses_;                            ///< per parameter: the op slots that use it
  std::vector<deferred_boxing> deferred_;            ///< without a side queue: all-reduces left for the join
  device_buffers<Sum, D> buffers_;
  std::vector<sum_buffer> grad_sums_;                    ///< per parameter: its uses' gradients, summed
  std::vector<sum_buffer> boxed_sums_;                   ///< per parameter: boxed on the side queue, summed there (until the join)
  std::vector<std::vector<sum_buffer>> param_grad_acc_;  ///< per op slot: gradient summed over micro-batches
  bool side_pending_ = false;                        ///< side-queue work queued since the last join
};

}  // namespace autoddl::detail
