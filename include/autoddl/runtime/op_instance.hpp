#pragma once
// op_instance: how the executor (runtime/trainer.hpp) runs one op through a compiled instance
// of a typed model (runtime/typed_program.hpp makes them), kept apart so that the trainer does
// not pull in the typed-model headers.
#include <cstdint>
#include <span>
#include <vector>

#include "autoddl/backend/device.hpp"
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

}  // namespace autoddl
