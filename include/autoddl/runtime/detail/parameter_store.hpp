#pragma once
// One device's parameters under a plan: their storage shards, initialised from the seed; their
// gradients synchronised once per step into the update layout; the optimizer state beside them
// and the update; the downloads and restores of checkpoints. A 16-bit T (precision.hpp) keeps a
// float master copy of the part of each parameter it updates (laid out as the optimizer state:
// sliced under ZeRO stages 1 and 2), float gradients and float optimizer state: the update runs
// on the master, which is then rounded into the parameter (and gathered, under ZeRO). With 16-bit
// gradient sums (Sum = T) the synchronised gradients stay in T and the update reads a widened copy.
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "autoddl/backend/communicator.hpp"
#include "autoddl/backend/device.hpp"
#include "autoddl/backend/shard.hpp"
#include "autoddl/error.hpp"
#include "autoddl/index.hpp"
#include "autoddl/plan/plan.hpp"
#include "autoddl/runtime/boxing.hpp"
#include "autoddl/runtime/data.hpp"
#include "autoddl/runtime/detail/device_buffers.hpp"
#include "autoddl/runtime/detail/precision.hpp"
#include "autoddl/runtime/train_options.hpp"

namespace autoddl::detail {

/// Parameters, their gradients and optimizer state on one device, laid out as plan `p` stores
/// them (not owned: the plan, dev and comm outlive the store).
template <class T, Device D, MeshCommunicator M, class Sum = master_t<T>>
class parameter_store {
 public:
  using buffer = buffer_t<D, T>;
  using master = master_t<T>;
  using master_buffer = buffer_t<D, master>;
  using sum_buffer = buffer_t<D, Sum>;

  parameter_store(const plan& p, D& dev, M& comm, const train_options& options)
      : plan_(&p), dev_(&dev), comm_(&comm), buffers_(dev), masters_(dev), sums_(dev), options_(options) {}

  /// The shards and optimizer state of the parameters `held` marks (1: this device's pipeline
  /// stage uses it), initialised.
  void init(const std::vector<char>& held) {
    const graph& model = plan_->g();
    const int np = int(model.params.size());
    held_ = held;
    resize(params_, np);
    resize(grads_, np);
    resize(first_moment_, np);
    resize(second_moment_, np);
    resize(master_, np);
    for (int p = 0; p < np; ++p) {
      const tensor_shape& shape = at(model.params, p).shape;
      if (!holds(p)) continue;  // another stage's
      const shard_info s = make_shard(shape, storage(p), comm_->shape(), comm_->coords());
      at(params_, p) = buffers_.uploaded(init_param_shard<T>(model, p, s, options_.seed));
      const std::size_t state = std::size_t(local_shape(shape, layout{update_layout(p), comm_->shape()}).elements());
      at(first_moment_, p) = masters_.alloc(state);
      if (options_.opt == optimizer::adam) at(second_moment_, p) = masters_.alloc(state);
      if constexpr (mixed_precision_v<T>) at(master_, p) = converted<master, T>(*dev_, update_slice(p));
    }
  }

  /// Whether this device keeps parameter p.
  bool holds(int p) const { return at(held_, p) != 0; }
  const param_choice& layouts(int p) const { return at(plan_->params, p).layouts; }
  const nd_sbp& storage(int p) const { return layouts(p).storage; }
  const nd_sbp& update_layout(int p) const { return layouts(p).update; }
  /// Parameter p's storage shard on the device.
  const buffer& param(int p) const { return at(params_, p); }
  int count() const { return int(params_.size()); }

  std::vector<T> param_shard(int p) const { return buffers_.host_copy(at(params_, p)); }
  std::vector<master> grad_shard(int p) const {
    const std::vector<Sum> g = sums_.host_copy(at(grads_, p));
    return std::vector<master>(g.begin(), g.end());
  }
  std::vector<master> moment_shard(int p, int k) const {
    return masters_.host_copy(at(k == 0 ? first_moment_ : second_moment_, p));
  }
  /// The master copy of parameter p's update-layout shard (empty unless T is a 16-bit type).
  std::vector<master> master_shard(int p) const { return masters_.host_copy(at(master_, p)); }
  std::int64_t steps_done() const { return steps_done_; }
  void restore_steps_done(std::int64_t n) { steps_done_ = n; }

  /// Replaces parameter p's storage shard and optimizer state with host values (a checkpoint's).
  /// @throws error on a size mismatch.
  /// A 16-bit T's master copy is `master_copy`, or else the restored value (widened, and sliced as
  /// the update is).
  void restore_shard(int p, const std::vector<T>& param, const std::vector<master>& m, const std::vector<master>& v,
                     const std::vector<master>& master_copy) {
    auto put = [&]<class E>(buffer_t<D, E>& b, const std::vector<E>& h, const char* what) {
      if (h.size() != b.size())
        fail<error>("restoring " + std::string(what) + " of parameter '" + at(plan_->g().params, p).name + "': " +
                    std::to_string(h.size()) + " values for a shard of " + std::to_string(b.size()));
      if (!h.empty()) dev_->upload(std::span<const E>(h), dev_->view(b));
    };
    put(at(params_, p), param, "the value");
    put(at(first_moment_, p), m, "the first moment");
    put(at(second_moment_, p), v, "the second moment");
    if constexpr (mixed_precision_v<T>) {
      if (master_copy.empty()) at(master_, p) = converted<master, T>(*dev_, update_slice(p));
      else put(at(master_, p), master_copy, "the master weights");
    }
  }

  /// Frees the last step's gradients.
  void release_gradients() {
    for (auto& g : grads_) sums_.release(g);
  }

  /// Each parameter's summed gradient (grad_sums, in its summing layout; consumed) boxed to its
  /// update layout: nothing for a parameter with one use (its contribution already went there),
  /// one synchronisation for a tied one. Then `after_each(p, gradient)` (the pipeline's tied
  /// exchange, a memory sample).
  /// The synchronisation moves Sum (fp32 beside a 16-bit T with fp32 sums), as the gradient sums' boxings do.
  template <class AfterEach>
  void synchronise(std::vector<sum_buffer>& grad_sums, AfterEach after_each) {
    const graph& model = plan_->g();
    for (std::size_t p = 0; p < grads_.size(); ++p) {
      if (!holds(int(p))) continue;
      const param_choice& pc = layouts(int(p));
      if (grad_sums[p].empty())  // a parameter no op reached this step
        grads_[p] = sums_.alloc(first_moment_[p].size());
      else if (at(plan_->params, p).sync.size() == 0)
        grads_[p] = std::move(grad_sums[p]);
      else
        grads_[p] = run_boxing<Sum>(*dev_, *comm_, std::move(grad_sums[p]), model.params[p].shape, pc.grad_sum,
                                    at(plan_->params, p).sync);
      sums_.release(grad_sums[p]);
      after_each(int(p), grads_[p]);
    }
  }

  /// n - p for the first parameter p whose gradient shard here holds NaN or Inf, else 0 (so a max
  /// over devices picks the least such p).
  double non_finite_flag() const {
    const int n = int(grads_.size());
    double flag = 0;
    for (int p = 0; p < n && flag == 0; ++p)
      if (!dev_->all_finite(sums_.view(at(grads_, p)))) flag = double(n - p);
    return flag;
  }

  /// SGD with momentum or Adam on each device's shard in the update layout: the storage shard
  /// itself, or (ZeRO stages 1 and 2) this device's slice of it, updated and then gathered back.
  /// Gradients are first multiplied by `grad_scale` (a loss scale's reciprocal; 16-bit sums in float, widened).
  void update(double grad_scale = 1) {
    ++steps_done_;
    grad_scale_ = grad_scale;
    optimizer_step os;
    os.lr = options_.lr;
    os.step = steps_done_;
    for (std::size_t p = 0; p < params_.size(); ++p) {
      if (!holds(int(p))) continue;
      const boxing_path& gather = at(plan_->params, p).gather;
      const param_choice& pc = layouts(int(p));
      const tensor_shape& shape = at(plan_->g().params, p).shape;
      if (grad_scale != 1 && std::is_same_v<Sum, master>) dev_->scale(Sum(grad_scale), sums_.view(grads_[p]));
      if constexpr (mixed_precision_v<T>) {  // the master updated, rounded into T, gathered where sliced
        update_shard(os, p, masters_.view(master_[p]));
        buffer rounded = converted_copy<T, master>(*dev_, master_[p]);
        params_[p] = gather.size() == 0 ? std::move(rounded) : run_boxing<T>(*dev_, *comm_, std::move(rounded), shape, pc.update, gather);
      } else if (gather.size() == 0) {
        update_shard(os, p, buffers_.view(params_[p]));
      } else {
        buffer slice = run_boxing<T>(*dev_, *comm_, buffers_.clone(params_[p]), shape, pc.storage, at(plan_->params, p).slice);
        update_shard(os, p, buffers_.view(slice));
        params_[p] = run_boxing<T>(*dev_, *comm_, std::move(slice), shape, pc.update, gather);
      }
    }
  }

  /// Bytes of what persists between steps: parameter shards and optimizer state.
  std::int64_t stored_bytes() const {
    std::int64_t low = 0, high = 0;
    for (std::size_t p = 0; p < params_.size(); ++p) {
      low += std::int64_t(params_[p].size());
      high += std::int64_t(first_moment_[p].size() + second_moment_[p].size() + master_[p].size());
    }
    return low * std::int64_t(sizeof(T)) + high * std::int64_t(sizeof(master));
  }

 private:
  /// This device's part of parameter p in its update layout: the storage shard, or its slice.
  buffer update_slice(int p) {
    buffer copy = buffers_.clone(at(params_, p));
    const boxing_path& slice = at(plan_->params, p).slice;
    if (at(plan_->params, p).gather.size() == 0) return copy;
    return run_boxing<T>(*dev_, *comm_, std::move(copy), at(plan_->g().params, p).shape, storage(p), slice);
  }
  void update_shard(const optimizer_step& os, std::size_t p, std::span<master> param) {
    if constexpr (std::is_same_v<Sum, master>) {
      run_optimizer(os, p, masters_.view(std::as_const(grads_[p])), param);
    } else {  // 16-bit sums: the update reads a widened copy of the gradient, unscaled in float
      master_buffer wide = converted_copy<master, Sum>(*dev_, grads_[p]);
      if (grad_scale_ != 1) dev_->scale(master(grad_scale_), masters_.view(wide));
      run_optimizer(os, p, masters_.view(std::as_const(wide)), param);
    }
  }
  void run_optimizer(const optimizer_step& os, std::size_t p, std::span<const master> g, std::span<master> param) {
    if (options_.opt == optimizer::adam)
      dev_->adam(os, g, masters_.view(first_moment_[p]), masters_.view(second_moment_[p]), param);
    else
      dev_->sgd_momentum(os, g, masters_.view(first_moment_[p]), param);
  }

  const plan* plan_;
  D* dev_;
  M* comm_;
  device_buffers<T, D> buffers_;
  device_buffers<master, D> masters_;
  device_buffers<Sum, D> sums_;
  train_options options_;
  std::vector<char> held_;                 ///< per parameter: kept here
  std::vector<buffer> params_;             ///< storage shards of parameters
  std::vector<sum_buffer> grads_;          ///< their synchronised gradients (update layout)
  std::vector<master_buffer> master_;      ///< a 16-bit T's master copy (update layout; else empty)
  std::vector<master_buffer> first_moment_;  ///< Adam's m, or SGD-momentum's velocity
  std::vector<master_buffer> second_moment_;  ///< Adam's v (empty for SGD)
  std::int64_t steps_done_ = 0;
  double grad_scale_ = 1;  ///< this update's gradient factor (a loss scale's reciprocal)
};

}  // namespace autoddl::detail
