#pragma once
// The mixture-of-experts kernels of the CUDA back end, mirroring backend/cpu/moe.hpp (contracts:
// backend/device.hpp). Routing runs one thread per token or per (sequence, expert): the slot
// map is sequential in token order within a sequence, as the CPU's. nvcc only.
#include "autoddl/backend/cuda/kernels.cuh"

namespace autoddl::cuda::detail {

/// Whether column c of row p is among its k largest, ties to the lower column.
template <class T>
__device__ inline bool in_top_k(const T* p, idx e, idx k, idx c) {
  const acc_t<T> v = to_acc(p[c]);
  idx before = 0;
  for (idx j = 0; j < e; ++j) {
    const acc_t<T> w = to_acc(p[j]);
    if (w > v || (w == v && j < c)) ++before;
  }
  return before < k;
}

template <class T>
__global__ void topk_gates_kernel(idx rows, idx e, idx k, bool renormalize, const T* p, T* g) {
  using A = acc_t<T>;
  for (idx r = grid_start(); r < rows; r += grid_step()) {
    const T* pr = p + r * e;
    A sum = 0;
    for (idx c = 0; c < e; ++c)
      if (in_top_k(pr, e, k, c)) sum += to_acc(pr[c]);
    for (idx c = 0; c < e; ++c) {
      const A v = in_top_k(pr, e, k, c) ? to_acc(pr[c]) : A(0);
      g[r * e + c] = from_acc<T>(renormalize ? v / sum : v);
    }
  }
}

template <class T>
__global__ void topk_gates_bwd_kernel(idx rows, idx e, idx k, bool renormalize, const T* p, const T* dg, T* dp) {
  using A = acc_t<T>;
  for (idx r = grid_start(); r < rows; r += grid_step()) {
    const T* pr = p + r * e;
    A sum = 0, dot = 0;
    for (idx c = 0; c < e; ++c)
      if (in_top_k(pr, e, k, c)) sum += to_acc(pr[c]);
    for (idx c = 0; c < e; ++c)
      if (in_top_k(pr, e, k, c)) dot += to_acc(pr[c]) / sum * to_acc(dg[r * e + c]);
    for (idx c = 0; c < e; ++c) {
      const A d = to_acc(dg[r * e + c]);
      dp[r * e + c] = from_acc<T>(!in_top_k(pr, e, k, c) ? A(0) : renormalize ? (d - dot) / sum : d);
    }
  }
}

/// Per (sequence i, expert c): count[i e + c] = tokens routed to c, mass[i e + c] = sum_t p.
template <class T>
__global__ void routed_counts_kernel(idx b, idx s, idx e, idx k, const T* p, acc_t<T>* count, acc_t<T>* mass) {
  using A = acc_t<T>;
  for (idx o = grid_start(); o < b * e; o += grid_step()) {
    const idx i = o / e, c = o % e;
    A n = 0, m = 0;
    for (idx t = 0; t < s; ++t) {
      const T* pr = p + (i * s + t) * e;
      if (in_top_k(pr, e, k, c)) n += A(1);
      m += to_acc(pr[c]);
    }
    count[o] = n;
    mass[o] = m;
  }
}

/// out[0] = f sum_o count[o] mass[o], one thread (the sum's order fixed).
template <class T>
__global__ void balance_sum_kernel(idx n, const acc_t<T>* count, const acc_t<T>* mass, acc_t<T> f, T* out) {
  if (grid_start() != 0) return;
  acc_t<T> total = 0;
  for (idx o = 0; o < n; ++o) total += count[o] * mass[o];
  out[0] = from_acc<T>(f * total);
}

template <class T>
__global__ void balance_bwd_kernel(idx b, idx s, idx e, const acc_t<T>* count, const T* dloss, acc_t<T> f, T* dp) {
  for (idx o = grid_start(); o < b * s * e; o += grid_step()) {
    const idx c = o % e, i = o / (s * e);
    dp[o] = from_acc<T>(to_acc(dloss[0]) * f * count[i * e + c]);
  }
}

/// One thread per (sequence i, expert c) walks the sequence's tokens in order.
template <class T>
__global__ void moe_slots_kernel(idx b, idx s, idx e, idx capacity, const T* g, idx* src, idx* dst) {
  for (idx o = grid_start(); o < b * e; o += grid_step()) {
    const idx i = o / e, c = o % e;
    for (idx slot = 0; slot < capacity; ++slot) src[o * capacity + slot] = -1;
    idx used = 0;
    for (idx t = 0; t < s; ++t) {
      const idx row = i * s + t;
      idx& d = dst[row * e + c];
      d = -1;
      if (to_acc(g[row * e + c]) == acc_t<T>(0)) continue;
      const idx slot = used++;
      if (slot >= capacity) continue;
      d = o * capacity + slot;
      src[d] = row;
    }
  }
}

template <class T>
__global__ void combine_rows_kernel(idx rows, idx e, idx cols, const idx* dst, const T* g, const T* x, T* y) {
  using A = acc_t<T>;
  for (idx o = grid_start(); o < rows * cols; o += grid_step()) {
    const idx r = o / cols, j = o % cols;
    A v = 0;
    for (idx c = 0; c < e; ++c) {
      const idx d = dst[r * e + c];
      if (d >= 0) v += to_acc(g[r * e + c]) * to_acc(x[d * cols + j]);
    }
    y[o] = from_acc<T>(v);
  }
}

/// dx[dst, j] = g dy[r, j] for every routed (r, c); dx must be zero beforehand.
template <class T>
__global__ void combine_rows_dx_kernel(idx rows, idx e, idx cols, const idx* dst, const T* g, const T* dy, T* dx) {
  for (idx o = grid_start(); o < rows * e * cols; o += grid_step()) {
    const idx rc = o / cols, j = o % cols;
    const idx d = dst[rc];
    if (d >= 0) dx[d * cols + j] = from_acc<T>(to_acc(g[rc]) * to_acc(dy[(rc / e) * cols + j]));
  }
}

template <class T>
__global__ void combine_rows_dg_kernel(idx rows, idx e, idx cols, const idx* dst, const T* x, const T* dy, T* dg) {
  using A = acc_t<T>;
  for (idx rc = grid_start(); rc < rows * e; rc += grid_step()) {
    const idx d = dst[rc], r = rc / e;
    A v = 0;
    if (d >= 0)
      for (idx j = 0; j < cols; ++j) v += to_acc(dy[r * cols + j]) * to_acc(x[d * cols + j]);
    dg[rc] = from_acc<T>(v);
  }
}

}  // namespace autoddl::cuda::detail
