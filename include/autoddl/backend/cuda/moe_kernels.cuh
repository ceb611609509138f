#pragma once
// The mixture-of-experts kernels of the CUDA back end, mirroring backend/cpu/moe.hpp (contracts:
// backend/device.hpp). Routing runs one thread per token or per (sequence, expert): the slot
// map is sequential in token order within a sequence, as the CPU's. Every routing decision
// reads the picks (topk_experts_kernel), never whether a gate is 0. nvcc only.
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

/// picks[r k + j] = the j-th of row r's k largest columns, ascending.
template <class T>
__global__ void topk_experts_kernel(idx rows, idx e, idx k, const T* p, idx* picks) {
  for (idx r = grid_start(); r < rows; r += grid_step()) {
    idx j = 0;
    for (idx c = 0; c < e; ++c)
      if (in_top_k(p + r * e, e, k, c)) picks[r * k + j++] = c;
  }
}

template <class T>
__global__ void topk_gates_kernel(idx rows, idx e, idx k, bool renormalize, const T* p, const idx* picks, T* g) {
  using A = acc_t<T>;
  for (idx r = grid_start(); r < rows; r += grid_step()) {
    const T* pr = p + r * e;
    const idx* sel = picks + r * k;
    A sum = 0;
    for (idx j = 0; j < k; ++j) sum += to_acc(pr[sel[j]]);
    for (idx c = 0; c < e; ++c) g[r * e + c] = from_acc<T>(A(0));
    for (idx j = 0; j < k; ++j) {
      const A v = to_acc(pr[sel[j]]);
      g[r * e + sel[j]] = from_acc<T>(renormalize ? v / sum : v);
    }
  }
}

template <class T>
__global__ void topk_gates_bwd_kernel(idx rows, idx e, idx k, bool renormalize, const T* p, const idx* picks,
                                      const T* dg, T* dp) {
  using A = acc_t<T>;
  for (idx r = grid_start(); r < rows; r += grid_step()) {
    const T* pr = p + r * e;
    const idx* sel = picks + r * k;
    A sum = 0, dot = 0;
    for (idx j = 0; j < k; ++j) sum += to_acc(pr[sel[j]]);
    for (idx j = 0; j < k; ++j) dot += to_acc(pr[sel[j]]) / sum * to_acc(dg[r * e + sel[j]]);
    for (idx c = 0; c < e; ++c) dp[r * e + c] = from_acc<T>(A(0));
    for (idx j = 0; j < k; ++j) {
      const A d = to_acc(dg[r * e + sel[j]]);
      dp[r * e + sel[j]] = from_acc<T>(renormalize ? (d - dot) / sum : d);
    }
  }
}

/// Whether expert c is among picks[0..k) of one token.
__device__ inline bool picked(const idx* sel, idx k, idx c) {
  for (idx j = 0; j < k; ++j)
    if (sel[j] == c) return true;
  return false;
}

/// Per (sequence i, expert c): count[i e + c] = tokens whose picks hold c, mass[i e + c] = sum_t p.
template <class T>
__global__ void routed_counts_kernel(idx b, idx s, idx e, idx k, const T* p, const idx* picks, acc_t<T>* count,
                                     acc_t<T>* mass) {
  using A = acc_t<T>;
  for (idx o = grid_start(); o < b * e; o += grid_step()) {
    const idx i = o / e, c = o % e;
    A n = 0, m = 0;
    for (idx t = 0; t < s; ++t) {
      if (picked(picks + (i * s + t) * k, k, c)) n += A(1);
      if (p) m += to_acc(p[(i * s + t) * e + c]);
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

/// One thread per (sequence i, expert c) walks the sequence's tokens in order (I: the index type).
template <class I>
__global__ void moe_slots_kernel(I b, I s, I e, I k, I capacity, const I* picks, I* src, I* dst) {
  for (idx o = grid_start(); o < b * e; o += grid_step()) {
    const idx i = o / e, c = o % e;
    for (idx slot = 0; slot < capacity; ++slot) src[o * capacity + slot] = -1;
    idx used = 0;
    for (idx t = 0; t < s; ++t) {
      const idx row = i * s + t;
      idx& d = dst[row * e + c];
      d = -1;
      if (!picked(picks + row * k, k, c)) continue;
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
