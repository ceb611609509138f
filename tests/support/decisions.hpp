#pragma once
// The discrete decisions of a forward pass, compared between two runs of one model: which
// elements a ReLU passes (x > 0) and which element of each max-pool window wins (the first
// maximum, as the kernels pick it). Where two runs sum in another order (another GEMM shape, a
// BLAS's other kernel), a value within round-off of zero or of its window's runner-up may decide
// the other way, and the gradient then flows elsewhere: a difference of order 1, not of order
// round-off. flipped_decisions names the first such element of every ReLU and max-pool op.
//
// The tensors are assembled on world rank 0 from the trainer's kept outputs
// (train_options::keep_outputs): a ReLU's or max-pool's input is its producer's output, whose
// logical value is the sum over P axes of one replica over B axes (assemble_on_root).
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "autoddl/backend/communicator.hpp"
#include "autoddl/backend/device.hpp"
#include "autoddl/backend/shard.hpp"
#include "autoddl/models/graph.hpp"
#include "autoddl/runtime/data.hpp"

namespace autoddl::testing {

/// The logical tensor of layout `l` on world rank 0 (empty elsewhere): shards placed at their
/// offsets, summed over P axes, one replica (coordinate 0) of every B axis.
template <class T, MeshCommunicator M>
std::vector<T> assemble_on_root(M& comm, const std::vector<T>& local, const tensor_shape& global, const nd_sbp& l) {
  auto& world = comm.world();
  const device_mesh dm = uniform_mesh(comm.shape(), link{});
  if (world.rank() != 0) {
    world.send(std::span<const T>(local), 0);
    return {};
  }
  std::vector<T> out(std::size_t(global.elements()), T(0));
  for (int r = 0; r < world.size(); ++r) {
    const mesh_coord c = dm.coords(r);
    const shard_info s = make_shard(global, l, comm.shape(), c);
    std::vector<T> part = r == 0 ? local : std::vector<T>(std::size_t(s.local.elements()));
    if (r != 0) world.recv(std::span<T>(part), r);
    bool replica = true;
    for (int a = 0; a < l.size(); ++a) replica = replica && !(l[a].is_broadcast() && c[a] != 0);
    if (replica) for_each_global_index(s, [&](std::int64_t k, std::int64_t gi) { at(out, gi) += at(part, k); });
  }
  return out;
}

/// One decision that two runs took differently.
struct flipped_decision {
  int op = -1;
  std::string text;  ///< op, element and the values both runs decided on
};

namespace detail {

inline std::string index_text(const tensor_shape& s, std::int64_t flat) {
  std::string t;
  for (int d = s.rank() - 1; d >= 0; --d) {
    t = std::to_string(flat % s[d]) + (t.empty() ? "" : ",") + t;
    flat /= s[d];
  }
  return "[" + t + "]";
}

/// Per output element of a max-pool over NCHW `x`, the flat input index of its window's first
/// maximum (padding never wins), as cpu_device::max_pool_fwd picks it.
template <class T>
std::vector<std::int64_t> pool_winners(const op_node& op, const std::vector<T>& x) {
  const tensor_shape& xs = op.inputs[0];
  const window_geom g{xs[0], xs[1], xs[2], xs[3], op.attrs.kernel, op.attrs.stride, op.attrs.padding};
  std::vector<std::int64_t> win;
  for (std::int64_t nc = 0; nc < g.n * g.c; ++nc)
    for (std::int64_t i = 0; i < g.out_h(); ++i)
      for (std::int64_t j = 0; j < g.out_w(); ++j) {
        std::int64_t arg = -1;
        for (int ki = 0; ki < g.kernel; ++ki)
          for (int kj = 0; kj < g.kernel; ++kj) {
            const std::int64_t h = i * g.stride - g.padding + ki, w = j * g.stride - g.padding + kj;
            if (h < 0 || h >= g.h || w < 0 || w >= g.w) continue;
            const std::int64_t pos = (nc * g.h + h) * g.w + w;
            if (arg < 0 || x[std::size_t(pos)] > x[std::size_t(arg)]) arg = pos;
          }
        win.push_back(arg);
      }
  return win;
}

}  // namespace detail

/// The first element of every relu and max_pool op of `g` whose decision differs between two
/// runs, given every op's first output in each (`ours[op]`, `theirs[op]`, whole tensors; an op
/// whose input is a graph input is skipped). Empty: both runs decided alike everywhere.
template <class T>
std::vector<flipped_decision> flipped_decisions(const graph& g, const std::vector<std::vector<T>>& ours,
                                                const std::vector<std::vector<T>>& theirs) {
  std::vector<flipped_decision> flips;
  for (int i = 0; i < int(g.ops.size()); ++i) {
    const op_node& op = g.ops[std::size_t(i)];
    const tensor_ref src = g.op_inputs[std::size_t(i)][0];
    if (src.op < 0 || src.index != 0) continue;
    const std::vector<T>& a = ours[std::size_t(src.op)];
    const std::vector<T>& b = theirs[std::size_t(src.op)];
    if (op.kind == op_kind::relu) {
      for (std::size_t k = 0; k < a.size(); ++k)
        if ((a[k] > T(0)) != (b[k] > T(0))) {
          char buf[160];
          std::snprintf(buf, sizeof buf, "relu input %.9g here, %.9g in serial: one passes, the other does not",
                        double(a[k]), double(b[k]));
          flips.push_back({i, "op '" + op.name + "' element " + detail::index_text(op.inputs[0], std::int64_t(k)) + ": " + buf});
          break;
        }
    } else if (op.kind == op_kind::max_pool) {
      const std::vector<std::int64_t> wa = detail::pool_winners(op, a), wb = detail::pool_winners(op, b);
      for (std::size_t k = 0; k < wa.size(); ++k)
        if (wa[k] != wb[k]) {
          const auto ua = std::size_t(wa[k]), ub = std::size_t(wb[k]);
          char buf[240];
          std::snprintf(buf, sizeof buf,
                        "window winner %s here (%.9g vs %.9g at the other), %s in serial (%.9g vs %.9g)",
                        detail::index_text(op.inputs[0], wa[k]).c_str(), double(a[ua]), double(a[ub]),
                        detail::index_text(op.inputs[0], wb[k]).c_str(), double(b[ub]), double(b[ua]));
          flips.push_back({i, "op '" + op.name + "' output " + detail::index_text(op.outputs[0], std::int64_t(k)) + ": " + buf});
          break;
        }
    }
  }
  return flips;
}

}  // namespace autoddl::testing
