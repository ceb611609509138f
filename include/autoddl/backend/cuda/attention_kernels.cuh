#pragma once
// The fused attention kernels of the CUDA back end (FlashAttention-2's algorithm, Dao 2023;
// contracts: backend/device.hpp attention_fwd / attention_bwd), on the tiles the CPU device and
// the price use (attention_tiles.hpp), computing in acc_t<T>:
// - forward: one block per (query tile, sequence, query head), one thread per query row; the
//   thread loops over the key tiles its tile sees with an online softmax (running max and sum)
//   and accumulates its output row in shared memory; it writes o and lse = m + log(sum).
// - backward: attention_rowdot first writes D = rowsum(dO * O) per row; then one block per (key
//   tile, sequence, key/value head), one thread per key, loops over the query heads of the group
//   and the query tiles that see its key tile, recomputing P = exp(s - lse) row by row. Each
//   thread owns its key's dK and dV rows (no two blocks share a key/value row, so they add without
//   atomics); dS goes through shared memory, and each query row's dQ is added with atomicAdd.
// Every thread of a block reads the same query (or key) row at the same time, a broadcast load.
// Kept simple, as the rest of the back end: no tensor cores. nvcc only.
#include "autoddl/attention_tiles.hpp"
#include "autoddl/backend/cuda/kernels.cuh"

namespace autoddl::cuda::detail {

/// The plain-integer copy of attention_desc a kernel takes by value.
struct attention_geom {
  idx b, sq, sk, heads, dh, kv_heads, group, head0, kv0, q_offset;
  bool causal, drops;
  double scale;
  std::uint64_t seed, op_id;
  double p;
  idx probs_global[4], probs_offset[4];
  __device__ idx ldq() const { return heads * dh; }
  __device__ idx ldkv() const { return kv_heads * dh; }
  __device__ idx kv_of(idx i) const { return (head0 + i) / group - kv0; }
  __device__ std::uint64_t prob_row(idx n, idx i, idx r) const {
    const idx* g = probs_global;
    const idx* o = probs_offset;
    return std::uint64_t((((n + o[0]) * g[1] + i + o[1]) * g[2] + r + o[2]) * g[3] + o[3]);
  }
  /// keep / (1 - p) of local probability (n, i, r, c), or 1 without dropout.
  template <class A>
  __device__ A drop_scale(idx n, idx i, idx r, idx c) const {
    if (!drops) return A(1);
    return dropout_keep(seed, op_id, prob_row(n, i, r) + std::uint64_t(c), p) ? A(1.0 / (1.0 - p)) : A(0);
  }
  __device__ bool masked(idx r, idx c) const { return causal && c > q_offset + r; }
};

__device__ inline idx imin(idx a, idx b) { return a < b ? a : b; }
__device__ inline idx imax(idx a, idx b) { return a < b ? b : a; }

template <class T>
__device__ acc_t<T> row_dot(const T* a, const T* b, idx n) {
  acc_t<T> s = 0;
  for (idx e = 0; e < n; ++e) s += to_acc(a[e]) * to_acc(b[e]);
  return s;
}

/// Dynamic shared memory: the tile's output rows [Bq, dh] and scores [Bq, Bk], in acc_t<T>.
template <class T>
__global__ void attention_fwd_kernel(attention_geom a, const T* q, const T* k, const T* v, T* o, statistic_t<T>* lse) {
  using A = acc_t<T>;
  extern __shared__ unsigned char attention_shared[];
  constexpr idx bq = attention_query_tile, bk = attention_key_tile;
  const idx n = blockIdx.y / a.heads, i = blockIdx.y % a.heads, r0 = idx(blockIdx.x) * bq, t = threadIdx.x;
  const idx rows = imin(bq, a.sq - r0), r = r0 + t;
  if (t >= rows) return;  // no barrier below: each thread works alone
  A* acc = reinterpret_cast<A*>(attention_shared) + t * a.dh;
  A* s = reinterpret_cast<A*>(attention_shared) + bq * a.dh + t * bk;
  const T* qr = q + (n * a.sq + r) * a.ldq() + i * a.dh;
  const T* kv0 = k + n * a.sk * a.ldkv() + a.kv_of(i) * a.dh;
  const T* vv0 = v + n * a.sk * a.ldkv() + a.kv_of(i) * a.dh;
  for (idx e = 0; e < a.dh; ++e) acc[e] = 0;
  A m = neg_inf<A>(), l = 0;
  const idx keys = attention_tile_keys(r0, rows, a.sk, a.q_offset, a.causal);
  for (idx c0 = 0; c0 < keys; c0 += bk) {
    const idx cols = imin(bk, keys - c0);
    A mt = neg_inf<A>();
    for (idx c = 0; c < cols; ++c) {
      s[c] = a.masked(r, c0 + c) ? neg_inf<A>() : A(a.scale) * row_dot(qr, kv0 + (c0 + c) * a.ldkv(), a.dh);
      mt = max_op{}(mt, s[c]);
    }
    const A mn = max_op{}(m, mt), alpha = mn == m ? A(1) : dexp(m - mn), shift = mn == neg_inf<A>() ? A(0) : mn;
    l *= alpha;
    for (idx e = 0; e < a.dh; ++e) acc[e] *= alpha;
    m = mn;
    for (idx c = 0; c < cols; ++c) {
      const A pc = dexp(s[c] - shift);
      l += pc;
      const A pd = pc * a.template drop_scale<A>(n, i, r, c0 + c);
      const T* vr = vv0 + (c0 + c) * a.ldkv();
      for (idx e = 0; e < a.dh; ++e) acc[e] += pd * to_acc(vr[e]);
    }
  }
  T* orow = o + (n * a.sq + r) * a.ldq() + i * a.dh;
  for (idx e = 0; e < a.dh; ++e) orow[e] = from_acc<T>(acc[e] / l);
  lse[(n * a.heads + i) * a.sq + r] = statistic_t<T>(m + dlog(l));
}

/// d[row] = rowsum(dO * O) over every local (sequence, query head, query) row, [b, heads, sq].
template <class T>
__global__ void attention_rowdot_kernel(attention_geom a, const T* o, const T* dout, acc_t<T>* d) {
  const idx rows = a.b * a.heads * a.sq;
  for (idx x = grid_start(); x < rows; x += grid_step()) {
    const idx r = x % a.sq, i = (x / a.sq) % a.heads, n = x / (a.sq * a.heads);
    const idx at = (n * a.sq + r) * a.ldq() + i * a.dh;
    d[x] = row_dot(dout + at, o + at, a.dh);
  }
}

/// One thread per key of the block's key tile; dk, dv, dq in acc_t<T> (zeroed by the caller).
template <class T>
__global__ void attention_bwd_kernel(attention_geom a, const T* q, const T* k, const T* v, const statistic_t<T>* lse,
                                     const acc_t<T>* rowdot, const T* dout, acc_t<T>* dq, acc_t<T>* dk, acc_t<T>* dv) {
  using A = acc_t<T>;
  constexpr idx bq = attention_query_tile, bk = attention_key_tile;
  __shared__ A ds[bq * bk];
  const idx n = blockIdx.y / a.kv_heads, kvh = blockIdx.y % a.kv_heads, c0 = idx(blockIdx.x) * bk, t = threadIdx.x;
  const idx kv_at = (n * a.sk + c0 + t) * a.ldkv() + kvh * a.dh;  // this thread's key row
  const idx first = imax(idx(0), (kvh + a.kv0) * a.group - a.head0), last = imin(a.heads, (kvh + a.kv0 + 1) * a.group - a.head0);
  for (idx i = first; i < last; ++i)
    for (idx r0 = 0; r0 < a.sq; r0 += bq) {
      const idx rows = imin(bq, a.sq - r0), keys = attention_tile_keys(r0, rows, a.sk, a.q_offset, a.causal);
      if (c0 >= keys) continue;  // a tile pair the forward skipped (the same for every thread)
      const bool mine = t < imin(bk, keys - c0);
      for (idx r = 0; r < rows; ++r) {
        const idx row = (n * a.heads + i) * a.sq + r0 + r, q_at = (n * a.sq + r0 + r) * a.ldq() + i * a.dh;
        A dsv = 0;
        if (mine && !a.masked(r0 + r, c0 + t)) {
          const A pv = dexp(A(a.scale) * row_dot(q + q_at, k + kv_at, a.dh) - A(lse[row]));
          const A keep = a.template drop_scale<A>(n, i, r0 + r, c0 + t);
          const A dp = row_dot(dout + q_at, v + kv_at, a.dh) * keep;
          dsv = pv * (dp - rowdot[row]);
          for (idx e = 0; e < a.dh; ++e) {
            dv[kv_at + e] += pv * keep * to_acc(dout[q_at + e]);
            dk[kv_at + e] += A(a.scale) * dsv * to_acc(q[q_at + e]);
          }
        }
        if (t < bk) ds[r * bk + t] = dsv;
      }
      __syncthreads();
      if (t < rows) {  // dQ of query row r0 + t from this key tile
        const idx q_at = (n * a.sq + r0 + t) * a.ldq() + i * a.dh, cols = imin(bk, keys - c0);
        for (idx e = 0; e < a.dh; ++e) {
          A sum = 0;
          for (idx c = 0; c < cols; ++c) sum += ds[t * bk + c] * to_acc(k[(n * a.sk + c0 + c) * a.ldkv() + kvh * a.dh + e]);
          atomicAdd(dq + q_at + e, A(a.scale) * sum);
        }
      }
      __syncthreads();
    }
}

}  // namespace autoddl::cuda::detail
