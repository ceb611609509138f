#pragma once
// What an operator kernel sees on one device: the op and its signature, this device's block of
// every tensor (shard_info), the operands as spans over local shards, and what it returns.
//
// Contract of every kernel (autoddl/runtime/op_kernels.hpp):
// - forward computes, on the local shards, exactly the local computation the signature implies:
//   linear X[S(1)] W[S(0)] -> Y[P] is the local product (a partial sum); a P bias is stored on
//   one device and zeros elsewhere, so the kernel just adds the local bias.
// - backward takes the local block of dY laid out dual(Y) and returns the local blocks of the
//   input and parameter gradients laid out dual(X), dual(W) (backward is derived from forward: gradient of B is P, of
//   P is B, of S stays S). It only computes local products; the executor does the boxing.
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "autoddl/backend/device.hpp"
#include "autoddl/backend/shard.hpp"
#include "autoddl/ops/signatures.hpp"
#include "autoddl/token_order.hpp"

namespace autoddl {

/// The blocks this device holds of every tensor of an op, in op_node order.
struct op_shards {
  std::vector<shard_info> inputs, params, outputs;
};

/// All-reduces a row statistic over the mesh axes that split the logits' vocabulary dim, in
/// place (vocab-parallel cross-entropy). Every device of the group calls it, in the same order.
/// An empty function is the identity (no axis splits the vocabulary). The statistic is kept in
/// statistic_t<T> (backend/device.hpp): T for float and double, float for the half types.
template <class T>
using row_all_reduce_fn = std::function<void(std::span<statistic_t<T>>, reduce_kind)>;

/// Everything a kernel needs besides its operands.
template <class T>
struct kernel_context {
  op_node op;            ///< global shapes and attributes
  signature sig;
  mesh_shape mesh;
  mesh_coord coord{};
  op_shards shards;      ///< this device's block of every tensor
  std::uint64_t seed = 0;   ///< dropout: the run's seed
  std::uint64_t op_id = 0;  ///< dropout: the op's id (e.g. its index in the graph)
  bool training = true;     ///< false: dropout is the identity
  /// Which input gradients the caller uses (empty: all). A GEMM-family kernel skips the
  /// products of an unwanted one (e.g. the model's data input) and returns an empty buffer.
  std::vector<bool> input_grad_wanted;
  bool wants_input_grad(std::size_t i) const { return input_grad_wanted.empty() || input_grad_wanted.at(i); }
  row_all_reduce_fn<T> row_all_reduce;
  /// The order the run feeds each sequence's tokens in (token_order.hpp): a tensor whose dim 1
  /// has order.seq elements holds them permuted; natural by default
  token_order order{};
};

/// The runs of natural positions that shard s's sequence dim (1) holds in `order`: one run from
/// its offset where the order is natural or dim 1 is not a sequence of order.seq tokens.
///   local_runs(token_order{8, 2}, rows [0, 4) of 8) == {{0, 0, 2}, {2, 6, 2}}
inline std::vector<token_run> local_runs(const token_order& order, const shard_info& s) {
  if (s.global.rank() < 2 || s.global[1] != order.seq || order.natural()) {
    if (s.global.rank() < 2) return {{0, 0, 0}};
    return {{0, s.offset[1], s.local[1]}};
  }
  return order.runs(s.offset[1], s.local[1]);
}

/// The blocks of every tensor of `op` that the device at `coord` holds under `sig` on `mesh`.
/// @pre sig is a valid signature of op on mesh (throws layout_error otherwise).
inline op_shards make_op_shards(const op_node& op, const signature& sig, const mesh_shape& mesh, const mesh_coord& coord) {
  check_signature(op, sig, mesh);
  op_shards s;
  for (std::size_t i = 0; i < op.inputs.size(); ++i) s.inputs.push_back(make_shard(op.inputs[i], sig.inputs[i], mesh, coord));
  for (std::size_t i = 0; i < op.params.size(); ++i) s.params.push_back(make_shard(op.params[i], sig.params[i], mesh, coord));
  for (std::size_t i = 0; i < op.outputs.size(); ++i)
    s.outputs.push_back(make_shard(op.outputs[i], sig.outputs[i], mesh, coord));
  return s;
}

/// A kernel context for the device at `coord`. Example, serial execution of `op`:
///   make_kernel_context<double>(op, all_broadcast(op, 1), mesh_shape{1}, {})
template <class T>
kernel_context<T> make_kernel_context(const op_node& op, const signature& sig, const mesh_shape& mesh,
                                      const mesh_coord& coord, std::uint64_t seed = 0, std::uint64_t op_id = 0,
                                      const token_order& order = {}) {
  kernel_context<T> c{op, sig, mesh, coord, make_op_shards(op, sig, mesh, coord), seed, op_id, true, {}, {}, order};
  return c;
}

/// The signature that holds every tensor whole on every device: [B,..,B] everywhere. Every op
/// has it; on mesh_shape{1} it is serial execution.
inline signature all_broadcast(const op_node& op, int mesh_axes) {
  nd_sbp b = nd_sbp::filled(mesh_axes, B);
  signature s;
  s.inputs.assign(op.inputs.size(), b);
  s.params.assign(op.params.size(), b);
  s.outputs.assign(op.outputs.size(), b);
  return s;
}

/// Views of one device's local shards, in op_node order. An index input's entry in `inputs` is
/// an empty span; its values are in `indices`.
template <class T>
struct operands {
  std::vector<std::span<const T>> inputs;
  std::vector<std::span<const T>> params;
  std::span<const std::int64_t> indices;
};

/// A forward's outputs (local blocks, laid out as sig.outputs) and what its backward needs
/// besides the operands, which the caller keeps alive until backward: saved products in T, and
/// row statistics in statistic_t<T> (layernorm's mean and rstd, cross-entropy's row max and
/// stats; float for the half types, whose range and precision they would exceed).
template <class D, class T>
struct forward_result {
  std::vector<buffer_t<D, T>> outputs;
  std::vector<buffer_t<D, T>> saved;
  std::vector<buffer_t<D, statistic_t<T>>> statistics;
  /// Frees what only backward reads, saved products and statistics (recomputation reruns the
  /// forward instead).
  void drop_saved() {
    saved.clear();
    statistics.clear();
  }
};

/// A backward's local gradient blocks: inputs[i] laid out dual(sig.inputs[i]) (empty for an
/// index input), params[j] laid out dual(sig.params[j]).
template <class D, class T>
struct gradients {
  std::vector<buffer_t<D, T>> inputs;
  std::vector<buffer_t<D, T>> params;
};

namespace detail {
inline std::int64_t last_dim(const tensor_shape& s) { return s[s.rank() - 1]; }
/// Elements over the last dim: the rows of a row-wise op.
inline std::int64_t rows_of(const tensor_shape& s) {
  const std::int64_t c = last_dim(s);
  return c ? s.elements() / c : 0;
}
/// The product of all dims but the last `trailing`: the batch of a batched matmul.
inline std::int64_t leading_elements(const tensor_shape& s, int trailing) {
  std::int64_t r = 1;
  for (int d = 0; d + trailing < s.rank(); ++d) r *= s[d];
  return r;
}

/// Throws layout_error unless every operand span has its local shard's size.
template <class T>
void check_operands(const kernel_context<T>& c, const operands<T>& in) {
  const std::string who = std::string(to_string(c.op.kind)) + " op '" + c.op.name + "'";
  if (in.inputs.size() != c.op.inputs.size() || in.params.size() != c.op.params.size())
    fail<layout_error>(who + " takes " + itos(std::int64_t(c.op.inputs.size())) + " inputs and " +
                       itos(std::int64_t(c.op.params.size())) + " parameters, got " + itos(std::int64_t(in.inputs.size())) +
                       " and " + itos(std::int64_t(in.params.size())));
  auto expect = [&](std::size_t got, const shard_info& s, const std::string& what) {
    if (std::int64_t(got) != s.local.elements())
      fail<layout_error>(who + ": " + what + " holds " + itos(std::int64_t(got)) + " elements but its local shard " +
                         to_string(s.local) + " of " + to_string(s.global) + " needs " + itos(s.local.elements()));
  };
  for (std::size_t i = 0; i < in.inputs.size(); ++i)
    expect(is_index_input(c.op.kind, i) ? in.indices.size() : in.inputs[i].size(), c.shards.inputs[i],
           "input " + itos(std::int64_t(i)));
  for (std::size_t i = 0; i < in.params.size(); ++i)
    expect(in.params[i].size(), c.shards.params[i], "parameter " + itos(std::int64_t(i)));
}

template <class T, class D>
buffer_t<D, T> alloc_like(D& d, const shard_info& s) {
  return d.template alloc<T>(std::size_t(s.local.elements()));
}
/// A buffer of n elements that the caller overwrites whole before it reads any: the device's
/// alloc_for_overwrite where it has one (its values unspecified until written, the zeroing pass
/// skipped), alloc otherwise. The bytes are the same either way.
template <class T, class D>
buffer_t<D, T> alloc_for_overwrite(D& d, std::size_t n) {
  if constexpr (requires { { d.template alloc_for_overwrite<T>(n) } -> std::same_as<buffer_t<D, T>>; })
    return d.template alloc_for_overwrite<T>(n);
  else
    return d.template alloc<T>(n);
}
template <class T, class D>
std::span<const T> cview(const D& d, const buffer_t<D, T>& b) {
  return d.view(b);
}
}  // namespace detail

/// The window geometry of a conv2d or max-pool on this device's input block [N, C, H, W].
template <class T>
window_geom local_window(const kernel_context<T>& c) {
  const tensor_shape& x = c.shards.inputs[0].local;
  return window_geom{x[0], x[1], x[2], x[3], c.op.attrs.kernel, c.op.attrs.stride, c.op.attrs.padding};
}

}  // namespace autoddl
