#pragma once
// Runs a boxing path on one device's shard: exactly the single-axis steps the cost model priced
// (cost/boxing_path.hpp), in order, over the communicator of each step's mesh axis.
//
// A shard is laid out row-major in its local shape. Along the step's axis, device i of the
// group holds chunk i of the split dim (several axes splitting one dim nest, outer axis most
// significant; a step is only taken where no inner axis splits the dims it touches, so the
// group's chunks are consecutive). Per step, with n devices on the axis:
//   S(d) -> B     pack nothing; all-gather; concatenate the n chunks along d
//   P -> B        all-reduce in place (through a zero-padded copy when n does not divide the count)
//   P -> S(d)     split along d into n chunks, contiguous; reduce-scatter; keep chunk i
//   S(d) -> S(e)  split along e into n chunks; all-to-all; concatenate the received along d
//   B -> S(d)     keep chunk i along d
//   B -> P        keep the value on device 0 of the axis, zeros elsewhere
//   S(d) -> P     a zero tensor of the gathered shape with this device's chunk in place
#include <cstdint>
#include <span>
#include <utility>

#include "autoddl/backend/communicator.hpp"
#include "autoddl/backend/device.hpp"
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

inline std::size_t sz(std::int64_t v) { return std::size_t(v); }

/// The n chunks of `src` (shape s) along dim d, each contiguous, chunk after chunk.
template <class T, Device D>
buffer_t<D, T> chunks_along(D& dev, std::span<const T> src, const tensor_shape& s, int d, int n) {
  dim_split p = split_at(s, d);
  const std::int64_t part = p.mid / n, block = part * p.inner;
  buffer_t<D, T> out = dev.template alloc<T>(src.size());
  std::span<T> o = dev.view(out);
  for (int i = 0; i < n; ++i)
    dev.copy_rows(p.outer, block, src.subspan(sz(i * block)), p.mid * p.inner, o.subspan(sz(i * p.outer * block)), block);
  return out;
}

/// Inverse of chunks_along: n contiguous chunks of shape `part` -> one tensor, concatenated
/// along dim d.
template <class T, Device D>
buffer_t<D, T> concat_along(D& dev, std::span<const T> chunks, const tensor_shape& part, int d, int n) {
  dim_split p = split_at(part, d);
  const std::int64_t block = p.mid * p.inner;
  buffer_t<D, T> out = dev.template alloc<T>(chunks.size());
  std::span<T> o = dev.view(out);
  for (int i = 0; i < n; ++i)
    dev.copy_rows(p.outer, block, chunks.subspan(sz(i * p.outer * block)), block, o.subspan(sz(i * block)), p.mid * n * p.inner);
  return out;
}

/// Chunk i of n along dim d.
template <class T, Device D>
buffer_t<D, T> chunk_of(D& dev, std::span<const T> src, const tensor_shape& s, int d, int n, int i) {
  dim_split p = split_at(s, d);
  const std::int64_t block = (p.mid / n) * p.inner;
  buffer_t<D, T> out = dev.template alloc<T>(sz(p.outer * block));
  dev.copy_rows(p.outer, block, src.subspan(sz(i * block)), p.mid * p.inner, dev.view(out), block);
  return out;
}

/// `src` copied into a buffer of n times its size at chunk i, zeros elsewhere.
template <class T, Device D>
buffer_t<D, T> placed_at(D& dev, std::span<const T> src, int n, int i) {
  buffer_t<D, T> all = dev.template alloc<T>(src.size() * std::size_t(n));
  dev.copy(src, dev.view(all).subspan(src.size() * std::size_t(i), src.size()));
  return all;
}

}  // namespace detail

/// Runs one step on `buf`, the local shard (a buffer of `dev`) of a tensor of global shape
/// `global` laid out `state` on `mesh`; returns the new shard. Bytes sent are counted by the
/// communicator, which works on `dev`'s memory.
template <class T, Device D, MeshCommunicator M>
buffer_t<D, T> run_boxing_step(D& dev, M& comm, buffer_t<D, T> buf, const tensor_shape& global, const nd_sbp& state,
                               const boxing_step& st) {
  const mesh_shape& mesh = comm.shape();
  const int n = mesh[st.axis];
  const int me = comm.coords()[st.axis];
  const tensor_shape local = local_shape(global, layout{state, mesh});
  auto& ax = comm.axis(st.axis);
  const std::span<const T> in = dev.view(std::as_const(buf));
  switch (st.op) {
    case collective::none: return buf;
    case collective::all_gather: {
      buffer_t<D, T> all = detail::placed_at<T>(dev, in, n, me);
      ax.all_gather(dev.view(all));
      return detail::concat_along<T>(dev, dev.view(std::as_const(all)), local, st.from.dim, n);
    }
    case collective::all_reduce: {
      const std::size_t size = buf.size(), padded = (size + std::size_t(n) - 1) / std::size_t(n) * std::size_t(n);
      if (padded == size) {
        ax.all_reduce(dev.view(buf));
        return buf;
      }
      buffer_t<D, T> pad = dev.template alloc<T>(padded);  // zero tail: adds nothing
      dev.copy(in, dev.view(pad).first(size));
      ax.all_reduce(dev.view(pad));
      dev.copy(dev.view(std::as_const(pad)).first(size), dev.view(buf));
      return buf;
    }
    case collective::reduce_scatter: {
      buffer_t<D, T> parts = detail::chunks_along<T>(dev, in, local, st.to.dim, n);
      ax.reduce_scatter(dev.view(parts));
      const std::size_t c = parts.size() / std::size_t(n);
      buffer_t<D, T> mine = dev.template alloc<T>(c);
      dev.copy(dev.view(std::as_const(parts)).subspan(std::size_t(me) * c, c), dev.view(mine));
      return mine;
    }
    case collective::all_to_all: {
      buffer_t<D, T> parts = detail::chunks_along<T>(dev, in, local, st.to.dim, n);
      buffer_t<D, T> got = dev.template alloc<T>(parts.size());
      ax.all_to_all(dev.view(std::as_const(parts)), dev.view(got));
      tensor_shape part = local;
      part[st.to.dim] /= n;  // each received chunk: its sender's block along from.dim, my block along to.dim
      return detail::concat_along<T>(dev, dev.view(std::as_const(got)), part, st.from.dim, n);
    }
    case collective::local_slice: return detail::chunk_of<T>(dev, in, local, st.to.dim, n, me);
    case collective::local_partial: {
      if (st.from.is_broadcast()) {
        if (me != 0) dev.fill(dev.view(buf), T{});
        return buf;
      }
      // S(d) -> P: place the chunk in a zero tensor of the gathered shape
      buffer_t<D, T> all = detail::placed_at<T>(dev, in, n, me);
      return detail::concat_along<T>(dev, dev.view(std::as_const(all)), local, st.from.dim, n);
    }
  }
  return buf;
}

/// Runs every step of `path` from layout `from` on `dev`'s shard; returns the shard in the
/// path's target layout.
template <class T, Device D, MeshCommunicator M>
buffer_t<D, T> run_boxing(D& dev, M& comm, buffer_t<D, T> buf, const tensor_shape& global, nd_sbp from,
                          const boxing_path& path) {
  for (const auto& st : path) {
    buf = run_boxing_step<T>(dev, comm, std::move(buf), global, from, st);
    from = from.with(st.axis, st.to);
  }
  return buf;
}

}  // namespace autoddl
