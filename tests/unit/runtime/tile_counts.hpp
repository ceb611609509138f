#pragma once
// Test harness: the attention tiles the CPU device counts while one device of a mesh runs an
// attention op's forward and backward (fused_attention.cpp, balanced_attention.cpp).
#include <cstdint>
#include <span>
#include <vector>

#include "autoddl/autoddl.hpp"
#include "autoddl/runtime/kernels/context.hpp"
#include "autoddl/runtime/op_kernels.hpp"
#include "autoddl/token_order.hpp"

namespace tile_counting {

/// Multiply-adds and scores the CPU device counted in one device's forward and backward.
struct tile_counts {
  std::int64_t fwd_macs = 0, fwd_scores = 0, bwd_macs = 0, bwd_scores = 0;
};

/// The counts of op (layouts sig) on the device at `coord` of `mesh`, its tokens in `order`, on
/// inputs of 0.5 and an output gradient of 1.
inline tile_counts count_tiles(const autoddl::op_node& op, const autoddl::signature& sig, const autoddl::mesh_shape& mesh,
                               const autoddl::mesh_coord& coord, const autoddl::token_order& order = {}) {
  using namespace autoddl;
  cpu_device dev;
  const kernel_context<double> ctx = make_kernel_context<double>(op, sig, mesh, coord, 5, 7, order);
  std::vector<std::vector<double>> local;
  operands<double> in;
  for (const shard_info& s : ctx.shards.inputs) local.emplace_back(std::size_t(s.local.elements()), 0.5);
  for (const auto& v : local) in.inputs.push_back(std::span<const double>(v));
  const std::vector<double> dy(std::size_t(ctx.shards.outputs[0].local.elements()), 1.0);
  tile_counts c;
  const std::int64_t m0 = dev.attention_tile_macs(), s0 = dev.attention_tile_scores();
  const auto f = op_forward(dev, ctx, in);
  const std::int64_t m1 = dev.attention_tile_macs(), s1 = dev.attention_tile_scores();
  (void)op_backward(dev, ctx, in, f, std::span<const double>(dy));
  c.fwd_macs = m1 - m0;
  c.fwd_scores = s1 - s0;
  c.bwd_macs = dev.attention_tile_macs() - m1;
  c.bwd_scores = dev.attention_tile_scores() - s1;
  return c;
}

}  // namespace tile_counting
