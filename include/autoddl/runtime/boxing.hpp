#pragma once
// Runs a boxing path on one device's shard: exactly the single-axis steps the cost model priced
// (cost/boxing_path.hpp), in order, over the communicator of each step's mesh axis.
//
// A shard is laid out row-major in its local shape. Along the step's axis, device i of the
// group holds chunk i of the split dim (several axes splitting one dim nest, outer axis most
// significant; a step is only taken where no inner axis splits the dims it touches, so the
// group's chunks are consecutive). Per step, with n devices on the axis:
//   S(d) -> B     pack nothing; all-gather; concatenate the n chunks along d
//   P -> B        all-reduce in place (zero-padded to a multiple of n elements)
//   P -> S(d)     split along d into n chunks, contiguous; reduce-scatter; keep chunk i
//   S(d) -> S(e)  split along e into n chunks; all-to-all; concatenate the received along d
//   B -> S(d)     keep chunk i along d
//   B -> P        keep the value on device 0 of the axis, zeros elsewhere
//   S(d) -> P     a zero tensor of the gathered shape with this device's chunk in place
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "autoddl/backend/communicator.hpp"
#include "autoddl/cost/boxing_path.hpp"
#include "autoddl/sbp/layout.hpp"

namespace autoddl {

namespace detail {

struct dim_split {
  std::int64_t outer = 1, mid = 1, inner = 1;  // elements before, along, after dim d
};
inline dim_split split_at(const tensor_shape& s, int d) {
  dim_split r;
  for (int i = 0; i < s.rank(); ++i) {
    if (i < d) r.outer *= s[i];
    else if (i == d) r.mid = s[i];
    else r.inner *= s[i];
  }
  return r;
}

/// The n chunks of `src` (shape s) along dim d, each contiguous, chunk after chunk.
template <class T>
std::vector<T> chunks_along(std::span<const T> src, const tensor_shape& s, int d, int n) {
  dim_split p = split_at(s, d);
  const std::int64_t part = p.mid / n, block = part * p.inner;
  std::vector<T> out(src.size());
  for (int i = 0; i < n; ++i)
    for (std::int64_t o = 0; o < p.outer; ++o)
      std::copy_n(src.data() + o * p.mid * p.inner + i * block, block, out.data() + (i * p.outer + o) * block);
  return out;
}

/// Inverse of chunks_along: n contiguous chunks of shape `part` -> one tensor, concatenated
/// along dim d.
template <class T>
std::vector<T> concat_along(std::span<const T> chunks, const tensor_shape& part, int d, int n) {
  dim_split p = split_at(part, d);
  const std::int64_t block = p.mid * p.inner;
  std::vector<T> out(chunks.size());
  for (int i = 0; i < n; ++i)
    for (std::int64_t o = 0; o < p.outer; ++o)
      std::copy_n(chunks.data() + (i * p.outer + o) * block, block, out.data() + o * p.mid * n * p.inner + i * block);
  return out;
}

/// Chunk i of n along dim d.
template <class T>
std::vector<T> chunk_of(std::span<const T> src, const tensor_shape& s, int d, int n, int i) {
  dim_split p = split_at(s, d);
  const std::int64_t block = (p.mid / n) * p.inner;
  std::vector<T> out(std::size_t(p.outer * block));
  for (std::int64_t o = 0; o < p.outer; ++o)
    std::copy_n(src.data() + o * p.mid * p.inner + i * block, block, out.data() + o * block);
  return out;
}

}  // namespace detail

/// Runs one step on `buf`, the local shard of a tensor of global shape `global` laid out
/// `state` on `mesh`; returns the new shard. Bytes sent are counted by the communicator.
template <class T, MeshCommunicator M>
std::vector<T> run_boxing_step(M& comm, std::vector<T> buf, const tensor_shape& global, const nd_sbp& state,
                               const boxing_step& st) {
  const mesh_shape& mesh = comm.shape();
  const int n = mesh[st.axis];
  const int me = comm.coords()[st.axis];
  const tensor_shape local = local_shape(global, layout{state, mesh});
  const nd_sbp next = state.with(st.axis, st.to);
  const tensor_shape after = local_shape(global, layout{next, mesh});
  auto& ax = comm.axis(st.axis);
  switch (st.op) {
    case collective::none: return buf;
    case collective::all_gather: {
      std::vector<T> all(buf.size() * std::size_t(n));
      std::copy(buf.begin(), buf.end(), all.begin() + std::ptrdiff_t(std::size_t(me) * buf.size()));
      ax.all_gather(std::span<T>(all));
      return detail::concat_along<T>(all, local, st.from.dim, n);
    }
    case collective::all_reduce: {
      const std::size_t size = buf.size();
      buf.resize((size + std::size_t(n) - 1) / std::size_t(n) * std::size_t(n), T{});
      ax.all_reduce(std::span<T>(buf));
      buf.resize(size);
      return buf;
    }
    case collective::reduce_scatter: {
      std::vector<T> parts = detail::chunks_along<T>(buf, local, st.to.dim, n);
      ax.reduce_scatter(std::span<T>(parts));
      const std::size_t c = parts.size() / std::size_t(n);
      return std::vector<T>(parts.begin() + std::ptrdiff_t(std::size_t(me) * c),
                            parts.begin() + std::ptrdiff_t(std::size_t(me + 1) * c));
    }
    case collective::all_to_all: {
      std::vector<T> parts = detail::chunks_along<T>(buf, local, st.to.dim, n);
      std::vector<T> got(parts.size());
      ax.all_to_all(std::span<const T>(parts), std::span<T>(got));
      tensor_shape part = local;
      part[st.to.dim] /= n;  // each received chunk: its sender's block along from.dim, my block along to.dim
      return detail::concat_along<T>(got, part, st.from.dim, n);
    }
    case collective::local_slice: return detail::chunk_of<T>(buf, local, st.to.dim, n, me);
    case collective::local_partial: {
      if (st.from.is_broadcast()) {
        if (me != 0) std::fill(buf.begin(), buf.end(), T{});
        return buf;
      }
      // S(d) -> P: place the chunk in a zero tensor of the gathered shape
      std::vector<T> all(std::size_t(after.elements()), T{});
      std::copy(buf.begin(), buf.end(), all.begin() + std::ptrdiff_t(std::size_t(me) * buf.size()));
      return detail::concat_along<T>(all, local, st.from.dim, n);
    }
  }
  return buf;
}

/// Runs every step of `path` from layout `from`; returns the shard in the path's target layout.
template <class T, MeshCommunicator M>
std::vector<T> run_boxing(M& comm, std::vector<T> buf, const tensor_shape& global, nd_sbp from, const boxing_path& path) {
  for (const auto& st : path) {
    buf = run_boxing_step<T>(comm, std::move(buf), global, from, st);
    from = from.with(st.axis, st.to);
  }
  return buf;
}

}  // namespace autoddl
