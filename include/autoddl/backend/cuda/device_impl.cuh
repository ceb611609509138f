#pragma once
// Definitions of cuda_device's primitives (declared in autoddl/backend/cuda/device.cuh): argument
// checks, launch geometry, cuBLAS. Include this in ONE nvcc translation unit and instantiate the
// element types you use with AUTODDL_CUDA_INSTANTIATE_DEVICE(T); the build's autoddl_cuda library
// (src/cuda/) does so for float, double, __half and __nv_bfloat16. nvcc only.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>

#include "autoddl/backend/cuda/device.cuh"
#include "autoddl/backend/cuda/attention_kernels.cuh"
#include "autoddl/backend/cuda/kernels.cuh"
#include "autoddl/backend/cuda/moe_kernels.cuh"

namespace autoddl::cuda {

namespace detail {
/// Blocks for a grid-stride loop over n items (capped: each thread then loops).
inline unsigned blocks_for(idx n) { return unsigned(std::min<idx>((n + block_threads - 1) / block_threads, idx(1) << 20)); }
/// Blocks for one-block-per-row kernels (capped: each block then loops over rows).
inline unsigned row_blocks(idx rows) { return unsigned(std::min<idx>(rows, idx(1) << 20)); }
inline void check_launch(const char* kernel) { check(cudaGetLastError(), std::string("launch of ") + kernel); }
inline window window_of(const window_geom& g) {
  return window{g.n, g.c, g.h, g.w, g.out_h(), g.out_w(), g.kernel, g.stride, g.padding};
}
/// A cuBLAS int argument, refusing values that do not fit.
inline int blas_int(std::int64_t v, const char* what) {
  if (v < 0 || v > std::numeric_limits<int>::max())
    throw cuda_error(std::string("cuda_device::gemm: ") + what + " = " + std::to_string(v) +
                     " does not fit cuBLAS's int; split the GEMM");
  return int(v);
}
}  // namespace detail

// The only launch sites of the back end's kernels, each with block_threads threads per block
// (block_reduce and the kernels' __launch_bounds__ count on it): ELEMENTWISE for grid-stride
// loops over n items, ROWS for one block per row (rows > 0), ONE_BLOCK for a single block that
// reduces everything (launched even when there is nothing to reduce: it writes the zero).
// Each checks the launch (cudaGetLastError) and names the kernel on failure.
#define AUTODDL_CUDA_ELEMENTWISE(kernel, n, ...)                                                                \
  do {                                                                                                          \
    const ::autoddl::cuda::detail::idx n_ = (n);                                                                \
    if (n_ > 0) {                                                                                               \
      kernel<<<::autoddl::cuda::detail::blocks_for(n_), ::autoddl::cuda::detail::block_threads, 0, stream()>>>( \
          __VA_ARGS__);                                                                                         \
      ::autoddl::cuda::detail::check_launch(#kernel);                                                           \
    }                                                                                                           \
  } while (0)

#define AUTODDL_CUDA_ROWS(kernel, rows, ...)                                                                    \
  do {                                                                                                          \
    const ::autoddl::cuda::detail::idx r_ = (rows);                                                             \
    if (r_ > 0) {                                                                                               \
      kernel<<<::autoddl::cuda::detail::row_blocks(r_), ::autoddl::cuda::detail::block_threads, 0, stream()>>>( \
          __VA_ARGS__);                                                                                         \
      ::autoddl::cuda::detail::check_launch(#kernel);                                                           \
    }                                                                                                           \
  } while (0)

#define AUTODDL_CUDA_ONE_BLOCK(kernel, ...)                                          \
  do {                                                                               \
    kernel<<<1, ::autoddl::cuda::detail::block_threads, 0, stream()>>>(__VA_ARGS__); \
    ::autoddl::cuda::detail::check_launch(#kernel);                                  \
  } while (0)

template <class T>
void cuda_device::fill(std::span<T> y, T v) {
  AUTODDL_CUDA_ELEMENTWISE(detail::fill_kernel<T>, detail::idx(y.size()), y.data(), detail::idx(y.size()), v);
}

template <class From, class To>
void cuda_device::convert(std::span<const From> x, std::span<To> y) {
  fits(x.size(), y.size(), "convert");
  AUTODDL_CUDA_ELEMENTWISE((detail::convert_kernel<From, To>), detail::idx(x.size()), x.data(), y.data(),
                           detail::idx(x.size()));
}

template <class T>
bool cuda_device::all_finite(std::span<const T> x) const {
  cuda_buffer<int> flag(1, state_);
  check(cudaMemsetAsync(flag.data(), 0, sizeof(int), stream()), "cudaMemsetAsync (all_finite)");
  AUTODDL_CUDA_ELEMENTWISE(detail::nonfinite_kernel<T>, detail::idx(x.size()), x.data(), detail::idx(x.size()),
                           flag.data());
  int host = 0;
  check(cudaMemcpyAsync(&host, flag.data(), sizeof(int), cudaMemcpyDeviceToHost, stream()),
        "cudaMemcpyAsync (all_finite)");
  synchronize();
  return host == 0;
}

// Row-major C[m,n] = op(A) op(B) is column-major C^T[n,m] = op(B)^T op(A)^T: a row-major
// matrix with leading dimension ld is the column-major matrix of its transpose with the same ld.
// So cuBLAS gets (B, A) swapped, m and n swapped, and each operand's own transpose flag.
template <class T>
void cuda_device::gemm(const gemm_desc& g, T alpha, std::span<const T> a, std::span<const T> b, T beta, std::span<T> c) {
  if (g.m <= 0 || g.n <= 0 || g.batch <= 0) return;
  using A = acc_t<T>;
  const A al = detail::to_acc(alpha), be = detail::to_acc(beta);
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  // cuBLAS needs ld >= 1 even when k == 0 (then C = beta C, as the CPU loop does).
  const int lda = std::max(1, detail::blas_int(g.lda, "lda")), ldb = std::max(1, detail::blas_int(g.ldb, "ldb"));
  check(cublasGemmStridedBatchedEx(blas(), op_b, op_a, detail::blas_int(g.n, "n"), detail::blas_int(g.m, "m"),
                                   detail::blas_int(g.k, "k"), &al, b.data(), data_type_v<T>, ldb, g.stride_b, a.data(),
                                   data_type_v<T>, lda, g.stride_a, &be, c.data(), data_type_v<T>,
                                   detail::blas_int(g.ldc, "ldc"), g.stride_c, detail::blas_int(g.batch, "batch"),
                                   compute_type_v<T>, CUBLAS_GEMM_DEFAULT),
        "cublasGemmStridedBatchedEx");
}

template <class T>
void cuda_device::add(std::span<const T> a, std::span<const T> b, std::span<T> y) {
  AUTODDL_CUDA_ELEMENTWISE(detail::add_kernel<T>, detail::idx(y.size()), a.data(), b.data(), y.data(), detail::idx(y.size()));
}
template <class T>
void cuda_device::axpy(T alpha, std::span<const T> x, std::span<T> y) {
  AUTODDL_CUDA_ELEMENTWISE(detail::axpy_kernel<T>, detail::idx(y.size()), detail::to_acc(alpha), x.data(), y.data(),
                           detail::idx(y.size()));
}
template <class T>
void cuda_device::scale(T alpha, std::span<T> y) {
  AUTODDL_CUDA_ELEMENTWISE(detail::scale_kernel<T>, detail::idx(y.size()), detail::to_acc(alpha), y.data(),
                           detail::idx(y.size()));
}
template <class T>
void cuda_device::permute_0213(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d, std::span<const T> x,
                               std::span<T> y) {
  AUTODDL_CUDA_ELEMENTWISE(detail::permute_0213_kernel<T>, a * b * c * d, a, b, c, d, x.data(), y.data());
}
template <class T>
void cuda_device::bias_add(std::int64_t outer, std::int64_t channels, std::int64_t inner, std::span<const T> b,
                           std::span<T> y) {
  AUTODDL_CUDA_ELEMENTWISE(detail::bias_add_kernel<T>, outer * channels * inner, outer, channels, inner, b.data(), y.data());
}
template <class T>
void cuda_device::bias_grad(std::int64_t outer, std::int64_t channels, std::int64_t inner, std::span<const T> dy,
                            std::span<T> db) {
  AUTODDL_CUDA_ROWS(detail::bias_grad_kernel<T>, channels, outer, channels, inner, dy.data(), db.data());
}

template <class T>
void cuda_device::relu_fwd(std::span<const T> x, std::span<T> y) {
  AUTODDL_CUDA_ELEMENTWISE(detail::relu_fwd_kernel<T>, detail::idx(y.size()), x.data(), y.data(), detail::idx(y.size()));
}
template <class T>
void cuda_device::relu_bwd(std::span<const T> x, std::span<const T> dy, std::span<T> dx) {
  AUTODDL_CUDA_ELEMENTWISE(detail::relu_bwd_kernel<T>, detail::idx(dx.size()), x.data(), dy.data(), dx.data(),
                           detail::idx(dx.size()));
}
template <class T>
void cuda_device::gelu_fwd(std::span<const T> x, std::span<T> y) {
  AUTODDL_CUDA_ELEMENTWISE(detail::gelu_fwd_kernel<T>, detail::idx(y.size()), x.data(), y.data(), detail::idx(y.size()));
}
template <class T>
void cuda_device::gelu_bwd(std::span<const T> x, std::span<const T> dy, std::span<T> dx) {
  AUTODDL_CUDA_ELEMENTWISE(detail::gelu_bwd_kernel<T>, detail::idx(dx.size()), x.data(), dy.data(), dx.data(),
                           detail::idx(dx.size()));
}

template <class T>
void cuda_device::silu_fwd(std::span<const T> x, std::span<T> y) {
  AUTODDL_CUDA_ELEMENTWISE(detail::silu_fwd_kernel<T>, detail::idx(y.size()), x.data(), y.data(), detail::idx(y.size()));
}
template <class T>
void cuda_device::silu_bwd(std::span<const T> x, std::span<const T> dy, std::span<T> dx) {
  AUTODDL_CUDA_ELEMENTWISE(detail::silu_bwd_kernel<T>, detail::idx(dx.size()), x.data(), dy.data(), dx.data(),
                           detail::idx(dx.size()));
}
template <class T>
void cuda_device::mul(std::span<const T> a, std::span<const T> b, std::span<T> y) {
  AUTODDL_CUDA_ELEMENTWISE(detail::mul_kernel<T>, detail::idx(y.size()), a.data(), b.data(), y.data(), detail::idx(y.size()));
}
template <class T>
void cuda_device::rotary(std::int64_t b, std::int64_t s, std::int64_t heads, std::int64_t d, std::int64_t pos0, double theta,
                         bool inverse, std::span<const T> x, std::span<T> y) {
  AUTODDL_CUDA_ELEMENTWISE(detail::rotary_kernel<T>, b * s * heads * (d / 2), b, s, heads, d, pos0, theta, inverse, x.data(),
                           y.data());
}
template <class T>
void cuda_device::rmsnorm_fwd(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<const T> gamma, double eps,
                              std::span<T> y, std::span<statistic_t<T>> rstd) {
  AUTODDL_CUDA_ROWS(detail::rmsnorm_fwd_kernel<T>, rows, rows, cols, x.data(), gamma.data(), y.data(), rstd.data(),
                    acc_t<T>(eps));
}
template <class T>
void cuda_device::rmsnorm_bwd(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<const T> gamma,
                              std::span<const statistic_t<T>> rstd, std::span<const T> dy, std::span<T> dx,
                              std::span<T> dgamma) {
  AUTODDL_CUDA_ROWS(detail::rmsnorm_bwd_dx_kernel<T>, rows, rows, cols, x.data(), gamma.data(), rstd.data(), dy.data(),
                    dx.data());
  AUTODDL_CUDA_ELEMENTWISE(detail::rmsnorm_bwd_gamma_kernel<T>, cols, rows, cols, x.data(), rstd.data(), dy.data(),
                           dgamma.data());
}

template <class T>
void cuda_device::layernorm_fwd(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<const T> gamma,
                                std::span<const T> beta, std::span<T> y, std::span<statistic_t<T>> mean,
                                std::span<statistic_t<T>> rstd) {
  AUTODDL_CUDA_ROWS(detail::layernorm_fwd_kernel<T>, rows, rows, cols, x.data(), gamma.data(), beta.data(), y.data(),
                    mean.data(), rstd.data(), acc_t<T>(layernorm_eps));
}
template <class T>
void cuda_device::layernorm_bwd(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<const T> gamma,
                                std::span<const statistic_t<T>> mean, std::span<const statistic_t<T>> rstd,
                                std::span<const T> dy, std::span<T> dx, std::span<T> dgamma, std::span<T> dbeta) {
  AUTODDL_CUDA_ROWS(detail::layernorm_bwd_dx_kernel<T>, rows, rows, cols, x.data(), gamma.data(), mean.data(), rstd.data(),
                    dy.data(), dx.data());
  AUTODDL_CUDA_ELEMENTWISE(detail::layernorm_bwd_params_kernel<T>, cols, rows, cols, x.data(), mean.data(), rstd.data(),
                           dy.data(), dgamma.data(), dbeta.data());
}
template <class T>
void cuda_device::softmax_fwd(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<T> y) {
  AUTODDL_CUDA_ROWS(detail::softmax_fwd_kernel<T>, rows, rows, cols, x.data(), y.data());
}
template <class T>
void cuda_device::softmax_bwd(std::int64_t rows, std::int64_t cols, std::span<const T> y, std::span<const T> dy,
                              std::span<T> dx) {
  AUTODDL_CUDA_ROWS(detail::softmax_bwd_kernel<T>, rows, rows, cols, y.data(), dy.data(), dx.data());
}
template <class T>
void cuda_device::scale_causal_mask(std::int64_t groups, std::int64_t sq, std::int64_t sk, T scale, std::int64_t q_offset,
                                    bool causal, std::span<T> s) {
  AUTODDL_CUDA_ELEMENTWISE(detail::scale_causal_mask_kernel<T>, groups * sq * sk, groups, sq, sk, detail::to_acc(scale),
                           q_offset, causal, s.data());
}

template <class T>
void cuda_device::gather_rows(std::span<const std::int64_t> ids, std::int64_t lo, std::span<const T> table,
                              std::span<T> y) {
  if (ids.empty()) return;
  const detail::idx cols = detail::idx(y.size() / ids.size()), held = cols ? detail::idx(table.size()) / cols : 0;
  AUTODDL_CUDA_ELEMENTWISE(detail::gather_rows_kernel<T>, detail::idx(ids.size()) * cols, ids.data(),
                           detail::idx(ids.size()), lo, held, cols, table.data(), y.data());
}
template <class T>
void cuda_device::scatter_add_rows(std::span<const std::int64_t> ids, std::int64_t lo, std::span<const T> dy,
                                   std::span<T> dtable) {
  if (ids.empty()) return;
  const detail::idx tokens = detail::idx(ids.size()), cols = detail::idx(dy.size() / ids.size());
  const detail::idx held = cols ? detail::idx(dtable.size()) / cols : 0;
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    AUTODDL_CUDA_ELEMENTWISE((detail::scatter_add_rows_kernel<T, T>), tokens * cols, ids.data(), tokens, lo, held, cols,
                             dy.data(), dtable.data());
  } else {  // the half types accumulate in a float copy of the table
    const detail::idx n = detail::idx(dtable.size());
    buffer<float> wide = alloc<float>(dtable.size());
    AUTODDL_CUDA_ELEMENTWISE(detail::widen_kernel<T>, n, dtable.data(), wide.data(), n);
    AUTODDL_CUDA_ELEMENTWISE((detail::scatter_add_rows_kernel<T, float>), tokens * cols, ids.data(), tokens, lo, held, cols,
                             dy.data(), wide.data());
    AUTODDL_CUDA_ELEMENTWISE(detail::narrow_kernel<T>, n, wide.data(), dtable.data(), n);
  }
}

// ---- mixture of experts ----------------------------------------------------------------------
template <class T>
void cuda_device::topk_experts(std::int64_t rows, std::int64_t e, std::int64_t k, std::span<const T> p,
                               std::span<std::int64_t> picks) {
  AUTODDL_CUDA_ELEMENTWISE(detail::topk_experts_kernel<T>, rows, rows, e, k, p.data(), picks.data());
}
template <class T>
void cuda_device::topk_gates(std::int64_t rows, std::int64_t e, std::int64_t k, bool renormalize, std::span<const T> p,
                             std::span<const std::int64_t> picks, std::span<T> g) {
  AUTODDL_CUDA_ELEMENTWISE(detail::topk_gates_kernel<T>, rows, rows, e, k, renormalize, p.data(), picks.data(),
                           g.data());
}
template <class T>
void cuda_device::topk_gates_bwd(std::int64_t rows, std::int64_t e, std::int64_t k, bool renormalize,
                                 std::span<const T> p, std::span<const std::int64_t> picks, std::span<const T> dg,
                                 std::span<T> dp) {
  AUTODDL_CUDA_ELEMENTWISE(detail::topk_gates_bwd_kernel<T>, rows, rows, e, k, renormalize, p.data(), picks.data(),
                           dg.data(), dp.data());
}
template <class T>
void cuda_device::balance_loss(std::int64_t b, std::int64_t s, std::int64_t e, std::int64_t k, std::span<const T> p,
                               std::span<const std::int64_t> picks, T scale, std::span<T> out) {
  using A = acc_t<T>;
  buffer<A> count = alloc<A>(std::size_t(b * e)), mass = alloc<A>(std::size_t(b * e));
  AUTODDL_CUDA_ELEMENTWISE(detail::routed_counts_kernel<T>, b * e, b, s, e, k, p.data(), picks.data(), count.data(),
                           mass.data());
  const A f = detail::to_acc(scale) * A(e) / (A(k) * A(s) * A(s));
  AUTODDL_CUDA_ONE_BLOCK(detail::balance_sum_kernel<T>, b * e, count.data(), mass.data(), f, out.data());
}
/// The counts alone: routed_counts_kernel skips the mass where p is null.
template <class T>
void cuda_device::balance_loss_bwd(std::int64_t b, std::int64_t s, std::int64_t e, std::int64_t k,
                                   std::span<const std::int64_t> picks, std::span<const T> dloss, T scale,
                                   std::span<T> dp) {
  using A = acc_t<T>;
  buffer<A> count = alloc<A>(std::size_t(b * e)), mass = alloc<A>(std::size_t(b * e));
  AUTODDL_CUDA_ELEMENTWISE(detail::routed_counts_kernel<T>, b * e, b, s, e, k, static_cast<const T*>(nullptr),
                           picks.data(), count.data(), mass.data());
  const A f = detail::to_acc(scale) * A(e) / (A(k) * A(s) * A(s));
  AUTODDL_CUDA_ELEMENTWISE(detail::balance_bwd_kernel<T>, b * s * e, b, s, e, count.data(), dloss.data(), f, dp.data());
}
template <class I>
void cuda_device::moe_slots(I b, I s, I e, I k, I capacity, std::span<const I> picks, std::span<I> src,
                            std::span<I> dst) {
  AUTODDL_CUDA_ELEMENTWISE(detail::moe_slots_kernel<I>, b * e, b, s, e, k, capacity, picks.data(), src.data(),
                           dst.data());
}
template <class T>
void cuda_device::combine_rows(std::int64_t rows, std::int64_t e, std::span<const std::int64_t> dst,
                               std::span<const T> g, std::span<const T> x, std::span<T> y) {
  const detail::idx cols = rows ? detail::idx(y.size()) / rows : 0;
  AUTODDL_CUDA_ELEMENTWISE(detail::combine_rows_kernel<T>, rows * cols, rows, e, cols, dst.data(), g.data(), x.data(),
                           y.data());
}
template <class T>
void cuda_device::combine_rows_bwd(std::int64_t rows, std::int64_t e, std::span<const std::int64_t> dst,
                                   std::span<const T> g, std::span<const T> x, std::span<const T> dy, std::span<T> dx,
                                   std::span<T> dg) {
  const detail::idx cols = rows ? detail::idx(dy.size()) / rows : 0;
  fill(dx, detail::from_acc<T>(0));
  AUTODDL_CUDA_ELEMENTWISE(detail::combine_rows_dx_kernel<T>, rows * e * cols, rows, e, cols, dst.data(), g.data(),
                           dy.data(), dx.data());
  AUTODDL_CUDA_ELEMENTWISE(detail::combine_rows_dg_kernel<T>, rows * e, rows, e, cols, dst.data(), x.data(), dy.data(),
                           dg.data());
}

template <class T>
void cuda_device::im2col(const window_geom& g, std::span<const T> x, std::span<T> col) {
  AUTODDL_CUDA_ELEMENTWISE(detail::im2col_kernel<T>, g.col_rows() * g.col_cols(), detail::window_of(g), x.data(), col.data());
}
template <class T>
void cuda_device::col2im(const window_geom& g, std::span<const T> col, std::span<T> dx) {
  AUTODDL_CUDA_ELEMENTWISE(detail::col2im_kernel<T>, g.n * g.c * g.h * g.w, detail::window_of(g), col.data(), dx.data());
}
template <class T>
void cuda_device::max_pool_fwd(const window_geom& g, std::span<const T> x, std::span<T> y) {
  AUTODDL_CUDA_ELEMENTWISE(detail::max_pool_fwd_kernel<T>, g.n * g.c * g.out_h() * g.out_w(), detail::window_of(g), x.data(),
                           y.data());
}
template <class T>
void cuda_device::max_pool_bwd(const window_geom& g, std::span<const T> x, std::span<const T> dy, std::span<T> dx) {
  AUTODDL_CUDA_ELEMENTWISE(detail::max_pool_bwd_kernel<T>, g.n * g.c * g.h * g.w, detail::window_of(g), x.data(), dy.data(),
                           dx.data());
}

template <class T>
void cuda_device::dropout(const dropout_key& key, const shard_info& s, std::span<const T> x, std::span<T> y) {
  detail::shard_geom geom{};
  geom.rank = s.local.rank();
  detail::idx st = 1;
  for (int d = geom.rank - 1; d >= 0; --d) {
    geom.local[d] = s.local[d];
    geom.gstride[d] = st;
    st *= s.global[d];
  }
  for (int d = 0; d < geom.rank; ++d) geom.base += s.offset[std::size_t(d)] * geom.gstride[d];
  const auto keep_scale = acc_t<T>(1.0 / (1.0 - key.p));
  const detail::idx n = s.local.elements();
  AUTODDL_CUDA_ELEMENTWISE(detail::dropout_kernel<T>, n, key.seed, key.op_id, key.p, keep_scale, geom, x.data(), y.data(), n);
}

template <class T>
void cuda_device::row_max(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<statistic_t<T>> m) {
  AUTODDL_CUDA_ROWS(detail::row_max_kernel<T>, rows, rows, cols, x.data(), m.data());
}
template <class T>
void cuda_device::xent_stats(std::int64_t rows, std::int64_t cols, std::span<const T> x,
                             std::span<const std::int64_t> labels, std::int64_t lo, std::span<const statistic_t<T>> m,
                             std::span<statistic_t<T>> stats) {
  AUTODDL_CUDA_ROWS(detail::xent_stats_kernel<T>, rows, rows, cols, x.data(), labels.data(), lo, m.data(), stats.data());
}
template <class S>
void cuda_device::xent_loss(std::int64_t rows, std::span<const S> m, std::span<const S> stats, std::type_identity_t<S> scale,
                            std::span<S> out) {
  AUTODDL_CUDA_ONE_BLOCK(detail::xent_loss_kernel<S>, rows, m.data(), stats.data(), scale, out.data());
}
template <class T>
void cuda_device::xent_bwd(std::int64_t rows, std::int64_t cols, std::span<const T> x,
                           std::span<const std::int64_t> labels, std::int64_t lo, std::span<const statistic_t<T>> m,
                           std::span<const statistic_t<T>> stats, std::span<const T> dloss, statistic_t<T> scale,
                           std::span<T> dx) {
  AUTODDL_CUDA_ELEMENTWISE(detail::xent_bwd_kernel<T>, rows * cols, rows, cols, x.data(), labels.data(), lo, m.data(),
                           stats.data(), dloss.data(), acc_t<T>(scale), dx.data());
}

template <class T>
void cuda_device::sgd_momentum(const optimizer_step& o, std::span<const T> g, std::span<T> vel, std::span<T> p) {
  using A = acc_t<T>;
  AUTODDL_CUDA_ELEMENTWISE(detail::sgd_momentum_kernel<T>, detail::idx(p.size()), A(o.lr), A(o.momentum), A(o.weight_decay),
                           g.data(), vel.data(), p.data(), detail::idx(p.size()));
}
template <class T>
void cuda_device::adam(const optimizer_step& o, std::span<const T> g, std::span<T> m, std::span<T> v, std::span<T> p) {
  const detail::adam_params h{o.lr, o.beta1, 1 - o.beta1, o.beta2, 1 - o.beta2, o.eps, o.weight_decay,
                              1.0 - std::pow(o.beta1, double(o.step)), 1.0 - std::pow(o.beta2, double(o.step))};
  AUTODDL_CUDA_ELEMENTWISE(detail::adam_kernel<T>, detail::idx(p.size()), h, g.data(), m.data(), v.data(), p.data(),
                           detail::idx(p.size()));
}

namespace detail {
inline attention_geom attention_geom_of(const attention_desc& d) {
  attention_geom g{d.b, d.sq, d.sk, d.heads, d.dh, d.kv_heads, d.group, d.head0, d.kv0, d.q_offset, d.causal, d.drops,
                   d.scale, d.dropout.seed, d.dropout.op_id, d.dropout.p, {}, {}};
  for (int x = 0; x < 4; ++x) {
    g.probs_global[x] = d.probs.global[x];
    g.probs_offset[x] = d.probs.offset[std::size_t(x)];
  }
  if (d.b * d.heads > 65535 || d.b * d.kv_heads > 65535)
    throw cuda_error("cuda_device::attention: " + std::to_string(d.b * d.heads) + " (sequence, head) pairs exceed a "
                     "grid's 65,535 rows; split the batch into micro-batches");
  return g;
}
/// y = x in T (x in acc_t<T>), n elements; nothing where they are one type.
template <class T>
void narrow_into(const acc_t<T>* x, T* y, idx n, cudaStream_t s) {
  if (n > 0) narrow_kernel<T><<<blocks_for(n), block_threads, 0, s>>>(x, y, n);
  check_launch("narrow_kernel");
}
}  // namespace detail

template <class T>
void cuda_device::attention_fwd(const attention_desc& d, std::span<const T> q, std::span<const T> k, std::span<const T> v,
                                std::span<T> o, std::span<statistic_t<T>> lse) {
  if (d.b * d.heads * d.sq == 0) return;
  const detail::attention_geom g = detail::attention_geom_of(d);
  const auto shared = int(attention_query_tile * (d.dh + attention_key_tile) * detail::idx(sizeof(acc_t<T>)));
  check(cudaFuncSetAttribute(detail::attention_fwd_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, shared),
        "cudaFuncSetAttribute (attention_fwd: " + std::to_string(shared) + " bytes of shared memory for head size " +
            std::to_string(d.dh) + ")");
  const dim3 grid(unsigned((d.sq + attention_query_tile - 1) / attention_query_tile), unsigned(d.b * d.heads));
  detail::attention_fwd_kernel<T><<<grid, unsigned(attention_query_tile), std::size_t(shared), stream()>>>(
      g, q.data(), k.data(), v.data(), o.data(), lse.data());
  detail::check_launch("attention_fwd_kernel");
}

/// dq, dk and dv accumulate in acc_t<T>: in place for float and double, in temporaries narrowed
/// at the end for the half types.
template <class T>
void cuda_device::attention_bwd(const attention_desc& d, std::span<const T> q, std::span<const T> k, std::span<const T> v,
                                std::span<const T> o, std::span<const statistic_t<T>> lse, std::span<const T> dout,
                                std::span<T> dq, std::span<T> dk, std::span<T> dv) {
  using A = acc_t<T>;
  constexpr bool same = std::is_same_v<T, A>;
  const detail::attention_geom g = detail::attention_geom_of(d);
  cuda_buffer<A> rowdot(std::size_t(d.b * d.heads * d.sq), state_);
  cuda_buffer<A> wide[3] = {cuda_buffer<A>(same ? 0 : dq.size(), state_), cuda_buffer<A>(same ? 0 : dk.size(), state_),
                            cuda_buffer<A>(same ? 0 : dv.size(), state_)};
  A* acc[3];
  const std::span<T> out[3] = {dq, dk, dv};
  for (int x = 0; x < 3; ++x) {
    if constexpr (same) acc[x] = out[x].data();
    else acc[x] = wide[x].data();
    if (!out[x].empty()) check(cudaMemsetAsync(acc[x], 0, out[x].size() * sizeof(A), stream()), "cudaMemsetAsync (attention_bwd)");
  }
  if (d.b * d.heads * d.sq == 0 || d.sk == 0) return;
  AUTODDL_CUDA_ELEMENTWISE(detail::attention_rowdot_kernel<T>, d.b * d.heads * d.sq, g, o.data(), dout.data(), rowdot.data());
  const dim3 grid(unsigned((d.sk + attention_key_tile - 1) / attention_key_tile), unsigned(d.b * d.kv_heads));
  detail::attention_bwd_kernel<T><<<grid, unsigned(attention_key_tile), 0, stream()>>>(
      g, q.data(), k.data(), v.data(), lse.data(), rowdot.data(), dout.data(), acc[0], acc[1], acc[2]);
  detail::check_launch("attention_bwd_kernel");
  if constexpr (!same)
    for (int x = 0; x < 3; ++x) detail::narrow_into<T>(acc[x], out[x].data(), detail::idx(out[x].size()), stream());
}

#undef AUTODDL_CUDA_ELEMENTWISE
#undef AUTODDL_CUDA_ROWS
#undef AUTODDL_CUDA_ONE_BLOCK

}  // namespace autoddl::cuda

/// Explicit instantiation of every cuda_device primitive for element type T (at namespace scope,
/// in one nvcc translation unit that includes this header).
#define AUTODDL_CUDA_INSTANTIATE_DEVICE(T)                                                                              \
  namespace autoddl::cuda {                                                                                             \
  template void cuda_device::fill<T>(std::span<T>, T);                                                                  \
  template bool cuda_device::all_finite<T>(std::span<const T>) const;                                                   \
  template void cuda_device::gemm<T>(const gemm_desc&, T, std::span<const T>, std::span<const T>, T, std::span<T>);     \
  template void cuda_device::add<T>(std::span<const T>, std::span<const T>, std::span<T>);                              \
  template void cuda_device::axpy<T>(T, std::span<const T>, std::span<T>);                                              \
  template void cuda_device::scale<T>(T, std::span<T>);                                                                 \
  template void cuda_device::permute_0213<T>(std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::span<const T>, \
                                             std::span<T>);                                                             \
  template void cuda_device::bias_add<T>(std::int64_t, std::int64_t, std::int64_t, std::span<const T>, std::span<T>);   \
  template void cuda_device::bias_grad<T>(std::int64_t, std::int64_t, std::int64_t, std::span<const T>, std::span<T>);  \
  template void cuda_device::relu_fwd<T>(std::span<const T>, std::span<T>);                                             \
  template void cuda_device::relu_bwd<T>(std::span<const T>, std::span<const T>, std::span<T>);                         \
  template void cuda_device::gelu_fwd<T>(std::span<const T>, std::span<T>);                                             \
  template void cuda_device::gelu_bwd<T>(std::span<const T>, std::span<const T>, std::span<T>);                         \
  template void cuda_device::silu_fwd<T>(std::span<const T>, std::span<T>);                                             \
  template void cuda_device::silu_bwd<T>(std::span<const T>, std::span<const T>, std::span<T>);                         \
  template void cuda_device::mul<T>(std::span<const T>, std::span<const T>, std::span<T>);                              \
  template void cuda_device::rotary<T>(std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, double, bool, \
                                       std::span<const T>, std::span<T>);                                               \
  template void cuda_device::rmsnorm_fwd<T>(std::int64_t, std::int64_t, std::span<const T>, std::span<const T>, double,  \
                                            std::span<T>, std::span<statistic_t<T>>);                                   \
  template void cuda_device::rmsnorm_bwd<T>(std::int64_t, std::int64_t, std::span<const T>, std::span<const T>,         \
                                            std::span<const statistic_t<T>>, std::span<const T>, std::span<T>,          \
                                            std::span<T>);                                                              \
  template void cuda_device::layernorm_fwd<T>(std::int64_t, std::int64_t, std::span<const T>, std::span<const T>,       \
                                              std::span<const T>, std::span<T>, std::span<statistic_t<T>>,              \
                                              std::span<statistic_t<T>>);                                               \
  template void cuda_device::layernorm_bwd<T>(std::int64_t, std::int64_t, std::span<const T>, std::span<const T>,       \
                                              std::span<const statistic_t<T>>, std::span<const statistic_t<T>>,         \
                                              std::span<const T>, std::span<T>, std::span<T>, std::span<T>);            \
  template void cuda_device::softmax_fwd<T>(std::int64_t, std::int64_t, std::span<const T>, std::span<T>);              \
  template void cuda_device::softmax_bwd<T>(std::int64_t, std::int64_t, std::span<const T>, std::span<const T>,         \
                                            std::span<T>);                                                              \
  template void cuda_device::scale_causal_mask<T>(std::int64_t, std::int64_t, std::int64_t, T, std::int64_t, bool,      \
                                                  std::span<T>);                                                        \
  template void cuda_device::attention_fwd<T>(const attention_desc&, std::span<const T>, std::span<const T>,             \
                                              std::span<const T>, std::span<T>, std::span<statistic_t<T>>);             \
  template void cuda_device::attention_bwd<T>(const attention_desc&, std::span<const T>, std::span<const T>,             \
                                              std::span<const T>, std::span<const T>, std::span<const statistic_t<T>>,  \
                                              std::span<const T>, std::span<T>, std::span<T>, std::span<T>);            \
  template void cuda_device::gather_rows<T>(std::span<const std::int64_t>, std::int64_t, std::span<const T>,            \
                                            std::span<T>);                                                              \
  template void cuda_device::scatter_add_rows<T>(std::span<const std::int64_t>, std::int64_t, std::span<const T>,       \
                                                 std::span<T>);                                                         \
  template void cuda_device::topk_experts<T>(std::int64_t, std::int64_t, std::int64_t, std::span<const T>,              \
                                             std::span<std::int64_t>);                                                  \
  template void cuda_device::topk_gates<T>(std::int64_t, std::int64_t, std::int64_t, bool, std::span<const T>,           \
                                           std::span<const std::int64_t>, std::span<T>);                                \
  template void cuda_device::topk_gates_bwd<T>(std::int64_t, std::int64_t, std::int64_t, bool, std::span<const T>,       \
                                               std::span<const std::int64_t>, std::span<const T>, std::span<T>);        \
  template void cuda_device::balance_loss<T>(std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::span<const T>, \
                                             std::span<const std::int64_t>, T, std::span<T>);                           \
  template void cuda_device::balance_loss_bwd<T>(std::int64_t, std::int64_t, std::int64_t, std::int64_t,                \
                                                 std::span<const std::int64_t>, std::span<const T>, T, std::span<T>);   \
  template void cuda_device::combine_rows<T>(std::int64_t, std::int64_t, std::span<const std::int64_t>,                 \
                                             std::span<const T>, std::span<const T>, std::span<T>);                     \
  template void cuda_device::combine_rows_bwd<T>(std::int64_t, std::int64_t, std::span<const std::int64_t>,             \
                                                 std::span<const T>, std::span<const T>, std::span<const T>,            \
                                                 std::span<T>, std::span<T>);                                           \
  template void cuda_device::im2col<T>(const window_geom&, std::span<const T>, std::span<T>);                           \
  template void cuda_device::col2im<T>(const window_geom&, std::span<const T>, std::span<T>);                           \
  template void cuda_device::max_pool_fwd<T>(const window_geom&, std::span<const T>, std::span<T>);                     \
  template void cuda_device::max_pool_bwd<T>(const window_geom&, std::span<const T>, std::span<const T>, std::span<T>); \
  template void cuda_device::dropout<T>(const dropout_key&, const shard_info&, std::span<const T>, std::span<T>);       \
  template void cuda_device::row_max<T>(std::int64_t, std::int64_t, std::span<const T>, std::span<statistic_t<T>>);     \
  template void cuda_device::xent_stats<T>(std::int64_t, std::int64_t, std::span<const T>, std::span<const std::int64_t>, \
                                           std::int64_t, std::span<const statistic_t<T>>, std::span<statistic_t<T>>);   \
  template void cuda_device::xent_bwd<T>(std::int64_t, std::int64_t, std::span<const T>, std::span<const std::int64_t>, \
                                         std::int64_t, std::span<const statistic_t<T>>,                                 \
                                         std::span<const statistic_t<T>>, std::span<const T>, statistic_t<T>,           \
                                         std::span<T>);                                                                 \
  template void cuda_device::sgd_momentum<T>(const optimizer_step&, std::span<const T>, std::span<T>, std::span<T>);    \
  template void cuda_device::adam<T>(const optimizer_step&, std::span<const T>, std::span<T>, std::span<T>, std::span<T>); \
  }

/// Explicit instantiation of cuda_device's primitives over index buffers alone and of the loss over
/// float and double row statistics (at namespace scope, in exactly one nvcc translation unit that
/// includes this header).
#define AUTODDL_CUDA_INSTANTIATE_INDEX_PRIMITIVES()                                                                    \
  namespace autoddl::cuda {                                                                                            \
  template void cuda_device::xent_loss<float>(std::int64_t, std::span<const float>, std::span<const float>, float,      \
                                              std::span<float>);                                                       \
  template void cuda_device::xent_loss<double>(std::int64_t, std::span<const double>, std::span<const double>, double, \
                                               std::span<double>);                                                     \
  template void cuda_device::moe_slots<std::int64_t>(std::int64_t, std::int64_t, std::int64_t, std::int64_t,           \
                                                     std::int64_t, std::span<const std::int64_t>,                      \
                                                     std::span<std::int64_t>, std::span<std::int64_t>);               \
  }
