#pragma once
// autoddl-train --check-serial: rank 0 trains the same model serially beside the distributed run
// and compares loss, gradients and parameters.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
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

template <class T, class Sum = autoddl::detail::master_t<T>>
using cpu_trainer = trainer<T, cpu_device, mpi::mpi_mesh_comm, Sum>;

/// The CPU device's element type that trains as a run's T does: T itself; the GPU's 16-bit types
/// map to the CPU's (train_cuda.hpp), which round at the same points.
template <class T>
struct cpu_twin {
  using type = T;
};
template <class T>
using cpu_twin_t = typename cpu_twin<T>::type;

/// What --check-serial calls equal, each difference relative to its reference's scale. In fp32:
/// - loss, every step: 1e-4 (a loss of ~5 summed in another order differs by ~1e-7 relative;
///   the steps after the first add Adam's or momentum's drift of that round-off);
/// - gradients after step 1: 1e-3 of the largest gradient (max_rel_error with a floor of 1e-3 of
///   the largest: sums of float products in another order differ by ~1e-7 of the largest term,
///   so 1e-3 leaves a margin of 10 over the worst element near the floor);
/// - parameters after step 1: 1e-4.
/// In bf16 and fp16 (serial training in the same type): loss 1e-2 (two 16-bit roundings of the
/// loss, 2 x 2^-8, rounded up), gradients 2^-3 of the largest (about 32 roundings of 2^-8 along
/// a sum), parameters 2^-6 (one 16-bit step either side of a rounding boundary, 2^-7, and the
/// update's share of it).
/// Adam's first step moves an element by about lr whatever the size of its gradient (m / sqrt(v)
/// = g / |g|), so an element whose serial gradient is below the gradient floor (round-off of an
/// analytically zero gradient: an attention key's bias) moves by +-lr in either run; those
/// elements are not compared under Adam, and counted.
struct serial_tolerance {
  double loss = 1e-4, gradients = 1e-3, parameters = 1e-4;
  const char* precision = "fp32";
};
inline serial_tolerance half_precision_tolerance(const char* name) { return {1e-2, 0.125, 1.0 / 64, name}; }

/// What --check-serial found: the largest relative differences from serial training, and the
/// verdict against `tolerance`.
struct serial_check {
  double worst() const { return std::max({err_loss, err_grads, err_params}); }
  /// Whether every difference is within `tolerance`.
  bool within() const { return err_loss <= tolerance.loss && err_grads <= tolerance.gradients && err_params <= tolerance.parameters; }
  /// "verdict: equal to serial training within fp32 round-off (...)" or "verdict: DIFFERS ...".
  std::string verdict() const {
    const std::string tol = fmt::format("loss {:.0e}, gradients {:.0e}, parameters {:.0e}, relative", tolerance.loss,
                                        tolerance.gradients, tolerance.parameters);
    const std::string skipped =
        adam ? fmt::format("; {} parameter elements whose gradients are round-off differ by Adam's +-lr and are not compared",
                           not_compared)
             : std::string();
    if (within())
      return fmt::format("verdict: equal to serial training within {} round-off ({}{})", tolerance.precision, tol, skipped);
    std::string what;
    if (err_loss > tolerance.loss) what += fmt::format(" loss {:.2e} > {:.0e};", err_loss, tolerance.loss);
    if (err_grads > tolerance.gradients)
      what += fmt::format(" gradients {:.2e} > {:.0e} at {};", err_grads, tolerance.gradients, worst_grad_name);
    if (err_params > tolerance.parameters)
      what += fmt::format(" parameters {:.2e} > {:.0e} at {};", err_params, tolerance.parameters, worst_param_name);
    what.pop_back();
    return "verdict: DIFFERS from serial training:" + what + " (tolerances " + tol + skipped + ")";
  }

  serial_tolerance tolerance;
  bool adam = false;
  double err_loss = 0, err_grads = 0, err_params = 0;
  std::string worst_grad_name, worst_param_name;
  std::int64_t not_compared = 0;  ///< Adam: parameter elements whose serial gradient is round-off
};

// --check-serial: rank 0 trains the same model serially on the CPU in the same element type T
// (cpu_twin_t: a GPU run's bf16 in the CPU's bf16; its gradient sums in Sum, as the run keeps them), step for
// step, with the same micro-batches and no recomputation (recomputing changes no number); the loss
// is compared every step, gradients and parameters after the first step, before differences
// compound.
template <class RunT, class RunSum = autoddl::detail::master_t<RunT>>
class serial_run_check : public serial_check {
  using T = cpu_twin_t<RunT>;
  using Sum = cpu_twin_t<RunSum>;

 public:
  serial_run_check(const prepared& p, int rank) : model_(p.g), rank_(rank) {
    adam = p.to.opt == optimizer::adam;
    if constexpr (std::is_same_v<T, bf16>) tolerance = half_precision_tolerance("bf16");
    if constexpr (std::is_same_v<T, fp16>) tolerance = half_precision_tolerance("fp16");
    if (rank != 0) return;
    plan_options so = p.o;
    so.mesh = mesh_shape{1};
    so.recompute = recompute_mode::none;
    problem_ = std::make_unique<plan_problem>(p.g, so);
    self_ = std::make_unique<mpi::mpi_mesh_comm>(mesh_shape{1}, MPI_COMM_SELF);
    serial_ = std::make_unique<cpu_trainer<T, Sum>>(plan_of(*problem_, solve_plan(*problem_, strategy::dp{}).pick), dev_, *self_, p.to);
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
      if (adam) not_compared += mask_round_off(gp, sp[q], sg[q], gfloor);
      const double ep = max_rel_error(gp, sp[q], pfloor), eg = max_rel_error(gg, sg[q], gfloor);
      if (ep >= err_params) { err_params = ep; worst_param_name = model_.params[q].name; }
      if (eg >= err_grads) { err_grads = eg; worst_grad_name = model_.params[q].name; }
    }
  }

  // Sets the elements of `a` (distributed) to `b`'s (serial) where the serial gradient g is below
  // `floor`, so they drop out of the comparison; returns how many of them differed.
  template <class A, class B, class G>
  static std::int64_t mask_round_off(std::vector<A>& a, const std::vector<B>& b, const std::vector<G>& g, double floor) {
    std::int64_t n = 0;
    for (std::size_t i = 0; i < a.size() && i < b.size() && i < g.size(); ++i)
      if (std::abs(double(g[i])) < floor && double(a[i]) != double(b[i])) {
        a[i] = A(b[i]);
        ++n;
      }
    return n;
  }

  const graph& model_;
  int rank_;
  bool compared_ = false;
  std::unique_ptr<plan_problem> problem_;
  cpu_device dev_;
  std::unique_ptr<mpi::mpi_mesh_comm> self_;
  std::unique_ptr<cpu_trainer<T, Sum>> serial_;
};

}  // namespace autoddl::tools::train
