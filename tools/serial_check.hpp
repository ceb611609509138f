#pragma once
// autoddl-train --check-serial: rank 0 trains the same model serially beside the distributed run
// and compares loss, gradients and parameters.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "autoddl/backend/cpu.hpp"
#include "autoddl/backend/mpi.hpp"
#include "autoddl/runtime/gather.hpp"
#include "autoddl/runtime/trainer.hpp"
#include "autoddl/search/plan_of.hpp"
#include "autoddl/search/solve.hpp"
#include "train_checkpoints.hpp"
#include "train_setup.hpp"

namespace autoddl::tools::train {

template <class T>
using cpu_trainer = trainer<T, cpu_device, mpi::mpi_mesh_comm>;

/// What --check-serial found: the largest relative differences from serial training.
struct serial_check {
  double worst() const { return std::max({err_loss, err_grads, err_params}); }

  double err_loss = 0, err_grads = 0, err_params = 0;
  std::string worst_grad_name, worst_param_name;
};

// --check-serial: rank 0 trains the same model serially in the same element type T, step for
// step, with the same micro-batches and no recomputation (recomputing changes no number); the loss
// is compared every step, gradients and parameters after the first step, before differences
// compound.
template <class T>
class serial_run_check : public serial_check {
 public:
  serial_run_check(const prepared& p, int rank) : model_(p.g), rank_(rank) {
    if (rank != 0) return;
    plan_options so = p.o;
    so.mesh = mesh_shape{1};
    so.recompute = recompute_mode::none;
    problem_ = std::make_unique<plan_problem>(p.g, so);
    self_ = std::make_unique<mpi::mpi_mesh_comm>(mesh_shape{1}, MPI_COMM_SELF);
    serial_ = std::make_unique<cpu_trainer<T>>(plan_of(*problem_, solve_plan(*problem_, strategy::dp{}).pick), dev_, *self_, p.to);
    if (!p.resume_folder.empty()) restore(*serial_, p, model_, mesh_shape{1}, mesh_coord{});
  }

  /// After step k of the distributed trainer t; gather(q, shard, layout) assembles parameter q's
  /// whole tensor on rank 0 from every device's shard (called alike on every rank).
  template <class Trainer, class Gather>
  void after_step(int k, double loss, const Trainer& t, Gather&& gather) {
    if (rank_ == 0) {
      const double sl = serial_->train_step(k);
      err_loss = std::max(err_loss, std::abs(loss - sl) / std::max(1e-12, std::abs(sl)));
    }
    if (!compared_) compare_tensors(t, gather);
    compared_ = true;
  }

 private:
  // Every parameter and gradient gathered to rank 0 and compared with the serial run's.
  template <class Trainer, class Gather>
  void compare_tensors(const Trainer& t, Gather& gather) {
    std::vector<std::vector<float>> sp, sg;
    if (rank_ == 0)
      for (std::size_t q = 0; q < model_.params.size(); ++q) {
        const std::vector<T> value = serial_->param_shard(int(q));
        sp.emplace_back(value.begin(), value.end());
        sg.push_back(serial_->grad_shard(int(q)));
      }
    const double gfloor = rank_ == 0 ? 1e-3 * max_abs(sg) : 0, pfloor = rank_ == 0 ? 1e-3 * max_abs(sp) : 0;
    for (std::size_t q = 0; q < model_.params.size(); ++q) {
      auto gp = gather(int(q), t.param_shard(int(q)), t.storage(int(q)));
      auto gg = gather(int(q), t.grad_shard(int(q)), t.update_layout(int(q)));
      if (rank_ != 0) continue;
      const double ep = max_rel_error(gp, sp[q], pfloor), eg = max_rel_error(gg, sg[q], gfloor);
      if (ep >= err_params) { err_params = ep; worst_param_name = model_.params[q].name; }
      if (eg >= err_grads) { err_grads = eg; worst_grad_name = model_.params[q].name; }
    }
  }

  const graph& model_;
  int rank_;
  bool compared_ = false;
  std::unique_ptr<plan_problem> problem_;
  cpu_device dev_;
  std::unique_ptr<mpi::mpi_mesh_comm> self_;
  std::unique_ptr<cpu_trainer<T>> serial_;
};

}  // namespace autoddl::tools::train
