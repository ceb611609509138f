#pragma once
// op_instance: how the executor (runtime/trainer.hpp) runs one op through a compiled instance
// of a typed model (runtime/typed_program.hpp makes them), kept apart so that the trainer does
// not pull in the typed-model headers.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "autoddl/backend/device.hpp"
#include "autoddl/error.hpp"
#include "autoddl/index.hpp"
#include "autoddl/models/graph.hpp"
#include "autoddl/ops/signatures.hpp"
#include "autoddl/runtime/kernels/context.hpp"

namespace autoddl {

/// What the executor calls to run one op of a typed model under its picked signature.
template <class T, Device D>
struct op_instance {
  signature sig;  ///< the instance's signature (a run-time copy of its static_signature)
  /// This device's blocks of the op's tensors, from the instance's compile-time local shapes.
  op_shards (*shards)(const mesh_coord& coord) = nullptr;
  forward_result<D, T> (*forward)(D&, const kernel_context<T>&, const operands<T>&) = nullptr;
  gradients<D, T> (*backward)(D&, const kernel_context<T>&, const operands<T>&, const forward_result<D, T>&,
                              std::span<const T>) = nullptr;
  /// Elements of this device's blocks of the op's inputs, parameters and output (constants).
  std::int64_t local_elements = 0;
};

/// One typed model's program: op_instance per op, in the model's op order.
template <class T, Device D>
using op_program = std::vector<op_instance<T, D>>;

namespace detail {
/// Throws layout_error unless `program` is empty or runs each op of `model` with the signature
/// `sig_of(op)` the plan picked.
template <class T, Device D, class SigOf>
void check_program(const op_program<T, D>& program, const graph& model, SigOf sig_of) {
  if (!program.empty() && program.size() != model.ops.size())
    fail<layout_error>("the typed program has " + std::to_string(program.size()) + " ops but the plan's model has " +
                       std::to_string(model.ops.size()));
  for (int i = 0; i < int(program.size()); ++i)
    if (!(at(program, i).sig == sig_of(i)))
      fail<layout_error>("op '" + at(model.ops, i).name + "': the typed program's instance runs " +
                         to_string(at(model.ops, i), at(program, i).sig) + " but the plan picked " +
                         to_string(at(model.ops, i), sig_of(i)));
}
}  // namespace detail

}  // namespace autoddl
