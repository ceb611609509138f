#pragma once
// A typed model runs its compiled instances. The plan picks a signature per op
// (chosen_signatures, search/typed.hpp); typed_program<Model, T>(dev-type, picks) visits each op's
// pick (typed_model::visit<I>) and keeps, per op, the entry points of the instance
// instance_kernels<Op, Index>: code templated on that static signature, whose local shapes and
// byte counts are compile-time constants (instance_shapes) and whose kernel is chosen at compile
// time from the op kind (detail::forward_kernel<K>, the kernels the dynamic path runs too). The
// trainer (runtime/trainer.hpp, trainer::run_instances) then builds each op's kernel context
// from the instance's constant local shapes and calls the instance's forward and backward
// instead of op_forward's run-time dispatch. Zoo and file models keep the dynamic path.
//
//   plan_problem problem(mlp::to_graph("mlp"), typed_plan_options<mlp>(o));
//   plan_result r = solve_plan(problem, strategy::automatic{});
//   trainer<float, cpu_device, mpi::mpi_mesh_comm> t(problem, r.pick, dev, comm);
//   t.run_instances(typed_program<mlp, float, cpu_device>(chosen_signatures(problem, r)));
//
// Both paths call the same kernels on the same blocks, so they train bit for bit alike
// (tests/mpi/runtime/typed_instances.cpp).
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <boost/hana/for_each.hpp>

#include "autoddl/backend/device.hpp"
#include "autoddl/backend/shard.hpp"
#include "autoddl/index.hpp"
#include "autoddl/models/typed.hpp"
#include "autoddl/runtime/op_instance.hpp"
#include "autoddl/runtime/op_kernels.hpp"

namespace autoddl {

/// The local shapes of every tensor of op Op under its signature Index on Op's static mesh,
/// computed by the compiler.
template <static_op Op, int Index>
struct instance_shapes {
  static constexpr static_signature sig = signatures_v<Op>[std::size_t(Index)];
  static constexpr std::array<tensor_shape, 3> inputs = [] {
    std::array<tensor_shape, 3> r{};
    for (int j = 0; j < Op.n_inputs; ++j) at(r, j) = local_shape(at(Op.inputs, j), layout{at(sig.inputs, j), Op.mesh});
    return r;
  }();
  static constexpr std::array<tensor_shape, 2> params = [] {
    std::array<tensor_shape, 2> r{};
    for (int j = 0; j < Op.n_params; ++j) at(r, j) = local_shape(at(Op.params, j), layout{at(sig.params, j), Op.mesh});
    return r;
  }();
  static constexpr tensor_shape output = local_shape(Op.output, layout{sig.output, Op.mesh});
  static constexpr std::int64_t local_elements = [] {
    std::int64_t n = output.elements();
    for (int j = 0; j < Op.n_inputs; ++j) n += at(inputs, j).elements();
    for (int j = 0; j < Op.n_params; ++j) n += at(params, j).elements();
    return n;
  }();
};

/// The instance of op Op under signature Index: its blocks and kernels. Only forward_kernel<K>
/// and backward_kernel<K> are shared between instances (one per op kind, element type, device).
template <static_op Op, int Index, class T, Device D>
struct instance_kernels {
  using shapes = instance_shapes<Op, Index>;

  static op_shards shards(const mesh_coord& coord) {
    op_shards s;
    for (int j = 0; j < Op.n_inputs; ++j)
      s.inputs.push_back(shard_with_local(at(Op.inputs, j), at(shapes::inputs, j), at(shapes::sig.inputs, j), Op.mesh, coord));
    for (int j = 0; j < Op.n_params; ++j)
      s.params.push_back(shard_with_local(at(Op.params, j), at(shapes::params, j), at(shapes::sig.params, j), Op.mesh, coord));
    s.outputs.push_back(shard_with_local(Op.output, shapes::output, shapes::sig.output, Op.mesh, coord));
    return s;
  }
  static forward_result<D, T> forward(D& dev, const kernel_context<T>& ctx, const operands<T>& in) {
    detail::check_operands(ctx, in);
    return detail::forward_kernel<Op.kind, T>(dev, ctx, in);
  }
  static gradients<D, T> backward(D& dev, const kernel_context<T>& ctx, const operands<T>& in,
                                  const forward_result<D, T>& fwd, std::span<const T> dy) {
    detail::check_backward_operands(ctx, in);
    detail::check_dy(ctx, dy);
    return detail::backward_kernel<Op.kind, T>(dev, ctx, in, fwd, dy);
  }
  static op_instance<T, D> entry() {
    return {shapes::sig.runtime(), &shards, &forward, &backward, shapes::local_elements};
  }
};

/// Model's program for the plan's signature picks (chosen_signatures): each op's pick visited,
/// its instance's entry points kept. @throws layout_error when `picks` does not have one allowed
/// signature per op of Model.
template <class Model, class T, Device D>
op_program<T, D> typed_program(const std::vector<int>& picks) {
  if (picks.size() != Model::size)
    detail::fail<layout_error>("typed_program: " + detail::itos(std::int64_t(picks.size())) + " signature picks for a typed "
                               "model of " + detail::itos(std::int64_t(Model::size)) + " ops");
  op_program<T, D> prog(Model::size);
  boost::hana::for_each(detail::indices_c<Model::size>, [&](auto i) {
    Model::template visit<i>(at(picks, int(i)), [&](auto instance) {
      using S = decltype(instance);
      at(prog, int(i)) = instance_kernels<S::op, S::index, T, D>::entry();
    });
  });
  return prog;
}

}  // namespace autoddl
