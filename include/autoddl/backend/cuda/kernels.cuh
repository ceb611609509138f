#pragma once
// The CUDA kernels behind cuda_device, templated on the element type T and computing in
// acc_t<T>. Each kernel mirrors the cpu_device loop of the same name (autoddl/backend/cpu/
// device.hpp); they are kept simple on purpose: grid-stride loops over outputs, one block per
// row for row-wise reductions (block_threads threads, a shared-memory tree reduction), and
// gathers instead of atomics wherever the CPU order allows it (col2im, max-pool backward).
// nvcc only.
#ifndef __CUDACC__
#error "autoddl/backend/cuda/kernels.cuh holds CUDA kernels: compile it with nvcc"
#endif
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "autoddl/backend/cuda/types.cuh"
#include "autoddl/backend/device.hpp"

namespace autoddl::cuda::detail {

using idx = std::int64_t;
/// Threads of every block the back end launches (device_impl.cuh's launch macros are the only
/// launch sites). block_reduce's tree needs exactly this many: the kernels that call it carry
/// __launch_bounds__(block_threads), so a launch with more threads fails instead of reading
/// past its shared array.
inline constexpr int block_threads = 256;
static_assert(block_threads > 0 && (block_threads & (block_threads - 1)) == 0 && block_threads <= 1024,
              "block_threads must be a power of two no larger than 1024 (CUDA's limit of threads per block): "
              "block_reduce halves it down to 1");

// ---- conversions and math in the accumulation type ----------------------------------------------
template <class T>
__host__ __device__ inline acc_t<T> to_acc(T v) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
  else return v;
}
template <class T>
__host__ __device__ inline T from_acc(acc_t<T> v) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(v);
  else return v;
}
template <class A>
__device__ inline A dexp(A v) {
  if constexpr (std::is_same_v<A, double>) return ::exp(v);
  else return ::expf(v);
}
template <class A>
__device__ inline A dlog(A v) {
  if constexpr (std::is_same_v<A, double>) return ::log(v);
  else return ::logf(v);
}
template <class A>
__device__ inline A dtanh(A v) {
  if constexpr (std::is_same_v<A, double>) return ::tanh(v);
  else return ::tanhf(v);
}
template <class A>
__device__ inline A dsqrt(A v) {
  if constexpr (std::is_same_v<A, double>) return ::sqrt(v);
  else return ::sqrtf(v);
}
template <class A>
__device__ inline A neg_inf() {
  if constexpr (std::is_same_v<A, double>) return -__longlong_as_double(0x7ff0000000000000LL);
  else return -__int_as_float(0x7f800000);
}

__device__ inline idx grid_start() { return idx(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline idx grid_step() { return idx(gridDim.x) * blockDim.x; }

struct sum_op {
  template <class A>
  __device__ A operator()(A a, A b) const { return a + b; }
};
struct max_op {
  template <class A>
  __device__ A operator()(A a, A b) const { return a > b ? a : b; }
};

/// Reduces one value per thread of a block_threads block; every thread gets the result.
/// @pre called by all threads of the block (it synchronises), and the block has exactly
/// block_threads threads: only kernels marked __launch_bounds__(block_threads) and launched by
/// device_impl.cuh's macros call it.
template <class A, class Op>
__device__ A block_reduce(A v, Op op) {
  __shared__ A sh[block_threads];
  const int t = int(threadIdx.x);
  sh[t] = v;
  __syncthreads();
  for (int s = block_threads / 2; s > 0; s >>= 1) {
    if (t < s) sh[t] = op(sh[t], sh[t + s]);
    __syncthreads();
  }
  const A r = sh[0];
  __syncthreads();  // every thread has read sh[0] before the next reduction reuses it
  return r;
}

// ---- element-wise ------------------------------------------------------------------------------
template <class T>
__global__ void fill_kernel(T* y, idx n, T v) {
  for (idx i = grid_start(); i < n; i += grid_step()) y[i] = v;
}
/// Sets *flag to 1 if some x[i] is NaN or Inf (x * 0 is 0 for every finite x).
template <class T>
__global__ void nonfinite_kernel(const T* x, idx n, int* flag) {
  for (idx i = grid_start(); i < n; i += grid_step())
    if (!(to_acc(x[i]) * acc_t<T>(0) == acc_t<T>(0))) *flag = 1;
}
template <class T>
__global__ void add_kernel(const T* a, const T* b, T* y, idx n) {
  for (idx i = grid_start(); i < n; i += grid_step()) y[i] = from_acc<T>(to_acc(a[i]) + to_acc(b[i]));
}
template <class T>
__global__ void axpy_kernel(acc_t<T> alpha, const T* x, T* y, idx n) {
  for (idx i = grid_start(); i < n; i += grid_step()) y[i] = from_acc<T>(to_acc(y[i]) + alpha * to_acc(x[i]));
}
template <class T>
__global__ void scale_kernel(acc_t<T> alpha, T* y, idx n) {
  for (idx i = grid_start(); i < n; i += grid_step()) y[i] = from_acc<T>(to_acc(y[i]) * alpha);
}
/// y [a,c,b,d] from x [a,b,c,d], one thread per output element.
template <class T>
__global__ void permute_0213_kernel(idx a, idx b, idx c, idx d, const T* x, T* y) {
  const idx n = a * b * c * d;
  for (idx o = grid_start(); o < n; o += grid_step()) {
    const idx e = o % d;
    idx t = o / d;
    const idx j = t % b;
    t /= b;
    const idx k = t % c;
    const idx i = t / c;
    y[o] = x[((i * b + j) * c + k) * d + e];
  }
}
template <class T>
__global__ void bias_add_kernel(idx outer, idx channels, idx inner, const T* b, T* y) {
  const idx n = outer * channels * inner;
  for (idx o = grid_start(); o < n; o += grid_step()) y[o] = from_acc<T>(to_acc(y[o]) + to_acc(b[(o / inner) % channels]));
}
/// One block per channel: db[c] = sum over outer and inner of dy[o,c,i].
template <class T>
__global__ void __launch_bounds__(block_threads)
    bias_grad_kernel(idx outer, idx channels, idx inner, const T* dy, T* db) {
  using A = acc_t<T>;
  for (idx c = blockIdx.x; c < channels; c += gridDim.x) {
    A acc = 0;
    for (idx e = threadIdx.x; e < outer * inner; e += blockDim.x) acc += to_acc(dy[((e / inner) * channels + c) * inner + e % inner]);
    acc = block_reduce(acc, sum_op{});
    if (threadIdx.x == 0) db[c] = from_acc<T>(acc);
  }
}

// ---- activations (GPT-2's tanh GeLU, as cpu_device) ------------------------------------------------
inline constexpr double gelu_c = 0.7978845608028654;  // sqrt(2/pi)
template <class T>
__global__ void relu_fwd_kernel(const T* x, T* y, idx n) {
  for (idx i = grid_start(); i < n; i += grid_step()) y[i] = to_acc(x[i]) > acc_t<T>(0) ? x[i] : from_acc<T>(0);
}
template <class T>
__global__ void relu_bwd_kernel(const T* x, const T* dy, T* dx, idx n) {
  for (idx i = grid_start(); i < n; i += grid_step()) dx[i] = to_acc(x[i]) > acc_t<T>(0) ? dy[i] : from_acc<T>(0);
}
template <class T>
__global__ void gelu_fwd_kernel(const T* x, T* y, idx n) {
  using A = acc_t<T>;
  for (idx i = grid_start(); i < n; i += grid_step()) {
    const A v = to_acc(x[i]);
    y[i] = from_acc<T>(A(0.5) * v * (A(1) + dtanh(A(gelu_c) * (v + A(0.044715) * v * v * v))));
  }
}
template <class T>
__global__ void gelu_bwd_kernel(const T* x, const T* dy, T* dx, idx n) {
  using A = acc_t<T>;
  for (idx i = grid_start(); i < n; i += grid_step()) {
    const A v = to_acc(x[i]);
    const A t = dtanh(A(gelu_c) * (v + A(0.044715) * v * v * v));
    const A du = A(gelu_c) * (A(1) + A(3 * 0.044715) * v * v);
    dx[i] = from_acc<T>(to_acc(dy[i]) * (A(0.5) * (A(1) + t) + A(0.5) * v * (A(1) - t * t) * du));
  }
}

template <class T>
__global__ void silu_fwd_kernel(const T* x, T* y, idx n) {
  using A = acc_t<T>;
  for (idx i = grid_start(); i < n; i += grid_step()) {
    const A v = to_acc(x[i]);
    y[i] = from_acc<T>(v / (A(1) + dexp(-v)));
  }
}
template <class T>
__global__ void silu_bwd_kernel(const T* x, const T* dy, T* dx, idx n) {
  using A = acc_t<T>;
  for (idx i = grid_start(); i < n; i += grid_step()) {
    const A v = to_acc(x[i]), s = A(1) / (A(1) + dexp(-v));
    dx[i] = from_acc<T>(to_acc(dy[i]) * s * (A(1) + v * (A(1) - s)));
  }
}
template <class T>
__global__ void mul_kernel(const T* a, const T* b, T* y, idx n) {
  for (idx i = grid_start(); i < n; i += grid_step()) y[i] = from_acc<T>(to_acc(a[i]) * to_acc(b[i]));
}
/// One thread per rotated pair of x [b, s, heads, d] (cpu_device::rotary): the angle in double.
template <class T>
__global__ void rotary_kernel(idx b, idx s, idx heads, idx d, idx pos0, double theta, bool inverse, const T* x, T* y) {
  using A = acc_t<T>;
  const idx half = d / 2, n = b * s * heads * half;
  for (idx t = grid_start(); t < n; t += grid_step()) {
    const idx i = t % half, row = t / half, j = (row / heads) % s;
    const double angle = double(pos0 + j) * ::pow(theta, -2.0 * double(i) / double(d));
    const A c = A(::cos(angle)), sn = A(inverse ? -::sin(angle) : ::sin(angle));
    const idx o = row * d;
    const A lo = to_acc(x[o + i]), hi = to_acc(x[o + i + half]);
    y[o + i] = from_acc<T>(lo * c - hi * sn);
    y[o + i + half] = from_acc<T>(hi * c + lo * sn);
  }
}

// ---- row-wise: one block per row ------------------------------------------------------------------
// Row statistics (layernorm's mean and rstd, cross-entropy's max and stats) are statistic_t<T>,
// which is acc_t<T> (types.cuh checks): computed and stored without rounding to T.
template <class T>
__global__ void __launch_bounds__(block_threads)
    layernorm_fwd_kernel(idx rows, idx cols, const T* x, const T* gamma, const T* beta, T* y, statistic_t<T>* mean,
                         statistic_t<T>* rstd, acc_t<T> eps) {
  using A = acc_t<T>;
  for (idx r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    A s = 0;
    for (idx c = threadIdx.x; c < cols; c += blockDim.x) s += to_acc(xr[c]);
    const A mu = block_reduce(s, sum_op{}) / A(cols);
    A v = 0;
    for (idx c = threadIdx.x; c < cols; c += blockDim.x) v += (to_acc(xr[c]) - mu) * (to_acc(xr[c]) - mu);
    const A rs = A(1) / dsqrt(block_reduce(v, sum_op{}) / A(cols) + eps);
    for (idx c = threadIdx.x; c < cols; c += blockDim.x)
      y[r * cols + c] = from_acc<T>((to_acc(xr[c]) - mu) * rs * to_acc(gamma[c]) + to_acc(beta[c]));
    if (threadIdx.x == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
  }
}
template <class T>
__global__ void __launch_bounds__(block_threads)
    layernorm_bwd_dx_kernel(idx rows, idx cols, const T* x, const T* gamma, const statistic_t<T>* mean,
                            const statistic_t<T>* rstd, const T* dy, T* dx) {
  using A = acc_t<T>;
  for (idx r = blockIdx.x; r < rows; r += gridDim.x) {
    const A mu = mean[r], rs = rstd[r];
    A s1 = 0, s2 = 0;
    for (idx c = threadIdx.x; c < cols; c += blockDim.x) {
      const A xh = (to_acc(x[r * cols + c]) - mu) * rs, g = to_acc(dy[r * cols + c]) * to_acc(gamma[c]);
      s1 += g;
      s2 += g * xh;
    }
    s1 = block_reduce(s1, sum_op{}) / A(cols);
    s2 = block_reduce(s2, sum_op{}) / A(cols);
    for (idx c = threadIdx.x; c < cols; c += blockDim.x) {
      const A xh = (to_acc(x[r * cols + c]) - mu) * rs;
      dx[r * cols + c] = from_acc<T>(rs * (to_acc(dy[r * cols + c]) * to_acc(gamma[c]) - s1 - xh * s2));
    }
  }
}
/// One thread per column, summing over rows: dgamma = sum dy xhat, dbeta = sum dy.
template <class T>
__global__ void layernorm_bwd_params_kernel(idx rows, idx cols, const T* x, const statistic_t<T>* mean,
                                            const statistic_t<T>* rstd, const T* dy, T* dgamma, T* dbeta) {
  using A = acc_t<T>;
  for (idx c = grid_start(); c < cols; c += grid_step()) {
    A dg = 0, db = 0;
    for (idx r = 0; r < rows; ++r) {
      const A d = to_acc(dy[r * cols + c]);
      dg += d * (to_acc(x[r * cols + c]) - A(mean[r])) * A(rstd[r]);
      db += d;
    }
    dgamma[c] = from_acc<T>(dg);
    dbeta[c] = from_acc<T>(db);
  }
}
template <class T>
__global__ void __launch_bounds__(block_threads)
    rmsnorm_fwd_kernel(idx rows, idx cols, const T* x, const T* gamma, T* y, statistic_t<T>* rstd, acc_t<T> eps) {
  using A = acc_t<T>;
  for (idx r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    A s = 0;
    for (idx c = threadIdx.x; c < cols; c += blockDim.x) s += to_acc(xr[c]) * to_acc(xr[c]);
    const A rs = A(1) / dsqrt(block_reduce(s, sum_op{}) / A(cols) + eps);
    for (idx c = threadIdx.x; c < cols; c += blockDim.x) y[r * cols + c] = from_acc<T>(to_acc(xr[c]) * rs * to_acc(gamma[c]));
    if (threadIdx.x == 0) rstd[r] = rs;
  }
}
template <class T>
__global__ void __launch_bounds__(block_threads)
    rmsnorm_bwd_dx_kernel(idx rows, idx cols, const T* x, const T* gamma, const statistic_t<T>* rstd, const T* dy, T* dx) {
  using A = acc_t<T>;
  for (idx r = blockIdx.x; r < rows; r += gridDim.x) {
    const A rs = rstd[r];
    A gx = 0;
    for (idx c = threadIdx.x; c < cols; c += blockDim.x)
      gx += to_acc(dy[r * cols + c]) * to_acc(gamma[c]) * to_acc(x[r * cols + c]);
    gx = block_reduce(gx, sum_op{}) / A(cols);
    for (idx c = threadIdx.x; c < cols; c += blockDim.x) {
      const A xv = to_acc(x[r * cols + c]);
      dx[r * cols + c] = from_acc<T>(rs * (to_acc(dy[r * cols + c]) * to_acc(gamma[c]) - xv * rs * rs * gx));
    }
  }
}
/// One thread per column, summing over rows: dgamma = sum dy x rstd.
template <class T>
__global__ void rmsnorm_bwd_gamma_kernel(idx rows, idx cols, const T* x, const statistic_t<T>* rstd, const T* dy, T* dgamma) {
  using A = acc_t<T>;
  for (idx c = grid_start(); c < cols; c += grid_step()) {
    A dg = 0;
    for (idx r = 0; r < rows; ++r) dg += to_acc(dy[r * cols + c]) * to_acc(x[r * cols + c]) * A(rstd[r]);
    dgamma[c] = from_acc<T>(dg);
  }
}
template <class T>
__global__ void __launch_bounds__(block_threads) softmax_fwd_kernel(idx rows, idx cols, const T* x, T* y) {
  using A = acc_t<T>;
  for (idx r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    A m = neg_inf<A>();
    for (idx c = threadIdx.x; c < cols; c += blockDim.x) m = max_op{}(m, to_acc(xr[c]));
    m = block_reduce(m, max_op{});
    A s = 0;
    for (idx c = threadIdx.x; c < cols; c += blockDim.x) s += dexp(to_acc(xr[c]) - m);
    s = block_reduce(s, sum_op{});
    for (idx c = threadIdx.x; c < cols; c += blockDim.x) y[r * cols + c] = from_acc<T>(dexp(to_acc(xr[c]) - m) / s);
  }
}
template <class T>
__global__ void __launch_bounds__(block_threads)
    softmax_bwd_kernel(idx rows, idx cols, const T* y, const T* dy, T* dx) {
  using A = acc_t<T>;
  for (idx r = blockIdx.x; r < rows; r += gridDim.x) {
    A dot = 0;
    for (idx c = threadIdx.x; c < cols; c += blockDim.x) dot += to_acc(y[r * cols + c]) * to_acc(dy[r * cols + c]);
    dot = block_reduce(dot, sum_op{});
    for (idx c = threadIdx.x; c < cols; c += blockDim.x)
      dx[r * cols + c] = from_acc<T>(to_acc(y[r * cols + c]) * (to_acc(dy[r * cols + c]) - dot));
  }
}
/// scores [groups, sq, sk] in place: query q (global q_offset + q) sees keys k <= q_offset + q.
template <class T>
__global__ void scale_causal_mask_kernel(idx groups, idx sq, idx sk, acc_t<T> scale, idx q_offset, bool causal, T* s) {
  using A = acc_t<T>;
  const idx n = groups * sq * sk;
  for (idx o = grid_start(); o < n; o += grid_step()) {
    const idx k = o % sk, q = (o / sk) % sq;
    s[o] = causal && k > q_offset + q ? from_acc<T>(neg_inf<A>()) : from_acc<T>(to_acc(s[o]) * scale);
  }
}

// ---- embedding ------------------------------------------------------------------------------------
template <class T>
__global__ void gather_rows_kernel(const idx* ids, idx tokens, idx lo, idx held, idx cols, const T* table, T* y) {
  const idx n = tokens * cols;
  for (idx o = grid_start(); o < n; o += grid_step()) {
    const idx row = ids[o / cols] - lo;
    y[o] = row >= 0 && row < held ? table[row * cols + o % cols] : from_acc<T>(0);
  }
}
/// acc[row, c] += dy[t, c] with atomicAdd in A (float or double).
template <class T, class A>
__global__ void scatter_add_rows_kernel(const idx* ids, idx tokens, idx lo, idx held, idx cols, const T* dy, A* acc) {
  const idx n = tokens * cols;
  for (idx o = grid_start(); o < n; o += grid_step()) {
    const idx row = ids[o / cols] - lo;
    if (row >= 0 && row < held) atomicAdd(acc + row * cols + o % cols, A(to_acc(dy[o])));
  }
}
template <class T>
__global__ void widen_kernel(const T* x, float* y, idx n) {
  for (idx i = grid_start(); i < n; i += grid_step()) y[i] = float(to_acc(x[i]));
}
template <class T>
__global__ void narrow_kernel(const float* x, T* y, idx n) {
  for (idx i = grid_start(); i < n; i += grid_step()) y[i] = from_acc<T>(x[i]);
}

// ---- windows (NCHW) ---------------------------------------------------------------------------------
/// The plain-integer copy of window_geom a kernel takes by value.
struct window {
  idx n, c, h, w, oh, ow;
  int k, s, p;
};
template <class T>
__global__ void im2col_kernel(window g, const T* x, T* col) {
  const idx ncols = g.n * g.oh * g.ow, total = g.c * g.k * g.k * ncols;
  for (idx o = grid_start(); o < total; o += grid_step()) {
    const idx row = o / ncols, cc = o % ncols;
    const idx c = row / (g.k * g.k), ki = (row / g.k) % g.k, kj = row % g.k;
    const idx n = cc / (g.oh * g.ow), i = (cc / g.ow) % g.oh, j = cc % g.ow;
    const idx h = i * g.s - g.p + ki, w = j * g.s - g.p + kj;
    col[o] = h >= 0 && h < g.h && w >= 0 && w < g.w ? x[((n * g.c + c) * g.h + h) * g.w + w] : from_acc<T>(0);
  }
}
/// One thread per dx element, gathering every column entry that im2col copied from it.
template <class T>
__global__ void col2im_kernel(window g, const T* col, T* dx) {
  using A = acc_t<T>;
  const idx ncols = g.n * g.oh * g.ow, total = g.n * g.c * g.h * g.w;
  for (idx o = grid_start(); o < total; o += grid_step()) {
    const idx w = o % g.w, h = (o / g.w) % g.h, c = (o / (g.w * g.h)) % g.c, n = o / (g.w * g.h * g.c);
    A acc = 0;
    for (int ki = 0; ki < g.k; ++ki) {
      const idx ti = h + g.p - ki;
      if (ti < 0 || ti % g.s != 0 || ti / g.s >= g.oh) continue;
      for (int kj = 0; kj < g.k; ++kj) {
        const idx tj = w + g.p - kj;
        if (tj < 0 || tj % g.s != 0 || tj / g.s >= g.ow) continue;
        acc += to_acc(col[((c * g.k + ki) * g.k + kj) * ncols + (n * g.oh + ti / g.s) * g.ow + tj / g.s]);
      }
    }
    dx[o] = from_acc<T>(acc);
  }
}
/// The input index of the first maximum of window (nc, i, j), -1 when it covers only padding.
template <class T>
__device__ idx pool_arg(const window& g, const T* x, idx nc, idx i, idx j) {
  idx arg = -1;
  for (int ki = 0; ki < g.k; ++ki)
    for (int kj = 0; kj < g.k; ++kj) {
      const idx h = i * g.s - g.p + ki, w = j * g.s - g.p + kj;
      if (h < 0 || h >= g.h || w < 0 || w >= g.w) continue;
      const idx at = (nc * g.h + h) * g.w + w;
      if (arg < 0 || to_acc(x[at]) > to_acc(x[arg])) arg = at;
    }
  return arg;
}
template <class T>
__global__ void max_pool_fwd_kernel(window g, const T* x, T* y) {
  const idx total = g.n * g.c * g.oh * g.ow;
  for (idx o = grid_start(); o < total; o += grid_step()) {
    const idx arg = pool_arg(g, x, o / (g.oh * g.ow), (o / g.ow) % g.oh, o % g.ow);
    if (arg >= 0) y[o] = x[arg];
  }
}
/// One thread per dx element: sums dy over the windows whose first maximum it is.
template <class T>
__global__ void max_pool_bwd_kernel(window g, const T* x, const T* dy, T* dx) {
  using A = acc_t<T>;
  const idx total = g.n * g.c * g.h * g.w;
  for (idx o = grid_start(); o < total; o += grid_step()) {
    const idx w = o % g.w, h = (o / g.w) % g.h, nc = o / (g.w * g.h);
    A acc = 0;
    for (int ki = 0; ki < g.k; ++ki) {
      const idx ti = h + g.p - ki;
      if (ti < 0 || ti % g.s != 0 || ti / g.s >= g.oh) continue;
      for (int kj = 0; kj < g.k; ++kj) {
        const idx tj = w + g.p - kj;
        if (tj < 0 || tj % g.s != 0 || tj / g.s >= g.ow) continue;
        if (pool_arg(g, x, nc, ti / g.s, tj / g.s) == o) acc += to_acc(dy[(nc * g.oh + ti / g.s) * g.ow + tj / g.s]);
      }
    }
    dx[o] = from_acc<T>(acc);
  }
}

// ---- dropout --------------------------------------------------------------------------------------
/// A shard's local dims and the global row-major stride of each dim, plus the global index of
/// local element 0: the global index of any local element, as detail::for_each_global_index.
struct shard_geom {
  int rank;
  idx local[max_tensor_rank];
  idx gstride[max_tensor_rank];
  idx base;
};
template <class T>
__global__ void dropout_kernel(std::uint64_t seed, std::uint64_t op_id, double p, acc_t<T> keep_scale, shard_geom s,
                               const T* x, T* y, idx n) {
  for (idx i = grid_start(); i < n; i += grid_step()) {
    idx g = s.base, rem = i;
    for (int d = s.rank - 1; d >= 0; --d) {
      g += (rem % s.local[d]) * s.gstride[d];
      rem /= s.local[d];
    }
    y[i] = dropout_keep(seed, op_id, std::uint64_t(g), p) ? from_acc<T>(to_acc(x[i]) * keep_scale) : from_acc<T>(0);
  }
}

// ---- softmax cross-entropy ------------------------------------------------------------------------
template <class T>
__global__ void __launch_bounds__(block_threads) row_max_kernel(idx rows, idx cols, const T* x, statistic_t<T>* m) {
  using A = acc_t<T>;
  for (idx r = blockIdx.x; r < rows; r += gridDim.x) {
    A v = neg_inf<A>();
    for (idx c = threadIdx.x; c < cols; c += blockDim.x) v = max_op{}(v, to_acc(x[r * cols + c]));
    v = block_reduce(v, max_op{});
    if (threadIdx.x == 0) m[r] = v;
  }
}
template <class T>
__global__ void __launch_bounds__(block_threads) xent_stats_kernel(idx rows, idx cols, const T* x, const idx* labels,
                                                                   idx lo, const statistic_t<T>* m,
                                                                   statistic_t<T>* stats) {
  using A = acc_t<T>;
  for (idx r = blockIdx.x; r < rows; r += gridDim.x) {
    const A mr = m[r];
    A s = 0;
    for (idx c = threadIdx.x; c < cols; c += blockDim.x) s += dexp(to_acc(x[r * cols + c]) - mr);
    s = block_reduce(s, sum_op{});
    if (threadIdx.x == 0) {
      const idx t = labels[r] - lo;
      stats[r] = s;
      stats[rows + r] = t >= 0 && t < cols ? to_acc(x[r * cols + t]) : A(0);
    }
  }
}
/// One block: out[0] = scale * sum_r (log stats[r] + m[r] - stats[rows + r]), in the statistics' type S.
template <class S>
__global__ void __launch_bounds__(block_threads) xent_loss_kernel(idx rows, const S* m, const S* stats, S scale, S* out) {
  S acc = 0;
  for (idx r = threadIdx.x; r < rows; r += blockDim.x) acc += dlog(stats[r]) + m[r] - stats[rows + r];
  acc = block_reduce(acc, sum_op{});
  if (threadIdx.x == 0) out[0] = scale * acc;
}
template <class T>
__global__ void xent_bwd_kernel(idx rows, idx cols, const T* x, const idx* labels, idx lo, const statistic_t<T>* m,
                                const statistic_t<T>* stats, const T* dloss, acc_t<T> scale, T* dx) {
  using A = acc_t<T>;
  const A f = scale * to_acc(dloss[0]);
  const idx n = rows * cols;
  for (idx o = grid_start(); o < n; o += grid_step()) {
    const idx r = o / cols, c = o % cols;
    A v = f * dexp(to_acc(x[o]) - A(m[r])) * (A(1) / A(stats[r]));
    if (c == labels[r] - lo) v -= f;
    dx[o] = from_acc<T>(v);
  }
}

// ---- optimizers -------------------------------------------------------------------------------------
template <class T>
__global__ void sgd_momentum_kernel(acc_t<T> lr, acc_t<T> momentum, acc_t<T> wd, const T* g, T* vel, T* p, idx n) {
  using A = acc_t<T>;
  for (idx i = grid_start(); i < n; i += grid_step()) {
    const A v = momentum * to_acc(vel[i]) + to_acc(g[i]) + wd * to_acc(p[i]);
    vel[i] = from_acc<T>(v);
    p[i] = from_acc<T>(to_acc(p[i]) - lr * v);
  }
}
/// y[i] = x[i] in To, through float (the master weights rounded into 16-bit parameters, a 16-bit
/// gradient widened into its float sum).
template <class From, class To>
__global__ void convert_kernel(const From* x, To* y, idx n) {
  for (idx i = grid_start(); i < n; i += grid_step()) y[i] = from_acc<To>(acc_t<To>(to_acc(x[i])));
}
struct adam_params {
  double lr, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay, c1, c2;
};
template <class T>
__global__ void adam_kernel(adam_params h, const T* g, T* m, T* v, T* p, idx n) {
  using A = acc_t<T>;
  const A lr = A(h.lr), b1 = A(h.beta1), nb1 = A(h.one_minus_beta1), b2 = A(h.beta2), nb2 = A(h.one_minus_beta2);
  const A eps = A(h.eps), wd = A(h.weight_decay), c1 = A(h.c1), c2 = A(h.c2);
  for (idx i = grid_start(); i < n; i += grid_step()) {
    const A pi = to_acc(p[i]), gi = to_acc(g[i]) + wd * pi;
    const A mi = b1 * to_acc(m[i]) + nb1 * gi, vi = b2 * to_acc(v[i]) + nb2 * gi * gi;
    m[i] = from_acc<T>(mi);
    v[i] = from_acc<T>(vi);
    p[i] = from_acc<T>(pi - lr * (mi / c1) / (dsqrt(vi / c2) + eps));
  }
}

}  // namespace autoddl::cuda::detail
