#pragma once
// cuda_device: the Device of autoddl/backend/device.hpp on one GPU. Same primitives, same
// semantics as cpu_device (autoddl/backend/cpu/device.hpp); spans refer to GPU memory (view()
// gives them) and every primitive is queued on the device's current stream, in call order.
//   - side queue (SideQueue with nccl_mesh_comm, backend/communicator.hpp): a second stream.
//     use_side_queue(comm) records an event on the main stream, makes the side stream wait for
//     it, and points the current stream, the cuBLAS handle and comm's communicators at the side
//     stream; use_main_queue(comm) points them back; join_side_queue records an event on the side
//     stream and makes the main stream wait for it. Buffers are allocated and freed on the current
//     stream (buffer.cuh), so a side-queue temporary is freed after the side work that used it.
//     upload, download, all_finite and synchronize belong to the main queue (the contract).
//   - element types: float, double, __half, __nv_bfloat16; the half types compute in float and
//     round once on store; index tensors (std::int64_t) are plain buffers.
//   - GEMMs: cuBLAS cublasGemmStridedBatchedEx, float accumulation (tensor cores for the half
//     types), double for double.
//   - upload / download return when the host span may be reused / holds the data; everything
//     else is asynchronous: call synchronize() before timing.
//   - memory: stream-ordered buffers (autoddl/backend/cuda/buffer.cuh) from the GPU's default
//     memory pool, whose release threshold the constructor raises to UINT64_MAX: freed blocks
//     stay cached for the next step (for every user of that pool in the process). bytes_in_use()
//     counts the bytes of this device's live buffers exactly.
//
// This header is host C++ (g++ compiles it): the member templates are declared here and
// defined, with the kernels, in autoddl/backend/cuda/device_impl.cuh, which one nvcc translation
// unit includes and instantiates with AUTODDL_CUDA_INSTANTIATE_DEVICE(T). The build's
// `autoddl_cuda` library does so for float, double, __half and __nv_bfloat16: link it.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>

#include "autoddl/backend/cuda/buffer.cuh"
#include "autoddl/backend/cuda/error.cuh"
#include "autoddl/backend/cuda/types.cuh"
#include "autoddl/backend/device.hpp"
#include "autoddl/backend/shard.hpp"

namespace autoddl::cuda {

namespace detail {
/// A cuBLAS handle bound to a stream, destroyed with its owner.
class owned_blas {
 public:
  explicit owned_blas(cudaStream_t stream) {
    check(cublasCreate(&handle_), "cublasCreate");
    if (const cublasStatus_t rc = cublasSetStream(handle_, stream); rc != CUBLAS_STATUS_SUCCESS) {
      (void)cublasDestroy(handle_);  // this constructor did not complete: no destructor will run
      check(rc, "cublasSetStream");
    }
  }
  owned_blas(const owned_blas&) = delete;
  owned_blas& operator=(const owned_blas&) = delete;
  ~owned_blas() { (void)cublasDestroy(handle_); }  // nothing to report to at destruction
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

/// A CUDA event without timing (a fork or join point between the streams), owned.
class owned_event {
 public:
  owned_event() { check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreateWithFlags"); }
  owned_event(const owned_event&) = delete;
  owned_event& operator=(const owned_event&) = delete;
  ~owned_event() { (void)cudaEventDestroy(event_); }  // nothing to report to at destruction
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

/// Makes `ordinal` the current device, raises its default pool's release threshold so that
/// freed blocks stay cached, and returns the state its buffers share (with a new stream).
inline std::shared_ptr<allocation_state> make_allocation_state(int ordinal) {
  const std::string gpu = "GPU " + std::to_string(ordinal);
  check(cudaSetDevice(ordinal), "cudaSetDevice(" + std::to_string(ordinal) + ")");
  int pools = 0;
  check(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, ordinal),
        "cudaDeviceGetAttribute(cudaDevAttrMemoryPoolsSupported) of " + gpu);
  if (!pools)
    throw cuda_error(gpu + " does not support stream-ordered memory pools (cudaMallocAsync), which cuda_device "
                           "allocates from; use a GPU and driver that have them (CUDA 11.2 or later)");
  cudaMemPool_t pool = nullptr;
  check(cudaDeviceGetDefaultMemPool(&pool, ordinal), "cudaDeviceGetDefaultMemPool of " + gpu);
  std::uint64_t keep_all = UINT64_MAX;
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all),
        "cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold) of " + gpu);
  return std::make_shared<allocation_state>(pool);
}
}  // namespace detail

class cuda_device {
 public:
  template <class T>
  using buffer = cuda_buffer<T>;

  /// Makes `ordinal` the current device, sets up its memory pool, creates the stream and the
  /// cuBLAS handle. Exception-safe: what was created before a failing call is released.
  explicit cuda_device(int ordinal = 0)
      : ordinal_(ordinal), state_(detail::make_allocation_state(ordinal)), blas_(state_->stream.get()) {}
  cuda_device(const cuda_device&) = delete;
  cuda_device& operator=(const cuda_device&) = delete;
  /// Destroys the cuBLAS handle (cublasDestroy waits for the GPU); the stream lives on while a
  /// buffer of this device does.
  ~cuda_device() = default;

  int ordinal() const { return ordinal_; }
  /// The stream primitives are queued on now: main_stream(), or side_stream() while the side
  /// queue is current.
  cudaStream_t stream() const { return state_->current; }
  cudaStream_t main_stream() const { return state_->stream.get(); }
  cudaStream_t side_stream() const { return state_->side.get(); }
  cublasHandle_t blas() const { return blas_.get(); }
  /// Waits for every primitive queued on the main stream so far (side-queue work is waited for
  /// by join_side_queue); reports an error a kernel raised while running, then a buffer's failed
  /// release (cudaFreeAsync) since the last call.
  void synchronize() const {
    check(cudaStreamSynchronize(main_stream()), "cudaStreamSynchronize");
    check(state_->free_error.exchange(cudaSuccess), "cudaFreeAsync (a buffer's release, reported here)");
  }

  // ---- memory -------------------------------------------------------------------------------
  /// n zeros in GPU memory (all-zero bits are 0 for every element type).
  template <class T>
  buffer<T> alloc(std::size_t n) {
    buffer<T> b(n, state_);
    if (n) check(cudaMemsetAsync(b.data(), 0, n * sizeof(T), stream()), "cudaMemsetAsync (alloc)");
    return b;
  }
  template <class T>
  std::span<T> view(buffer<T>& b) { return {b.data(), b.size()}; }
  template <class T>
  std::span<const T> view(const buffer<T>& b) const { return {b.data(), b.size()}; }
  /// host -> device: host.size() elements into the front of dst; returns when `host` may change.
  template <class T>
  void upload(std::span<const T> host, std::span<T> dst) {
    fits(host.size(), dst.size(), "upload");
    if (host.empty()) return;
    check(cudaMemcpyAsync(dst.data(), host.data(), host.size_bytes(), cudaMemcpyHostToDevice, stream()),
          "cudaMemcpyAsync (upload)");
    synchronize();
  }
  /// device -> host: src.size() elements into the front of host; returns when they are there.
  template <class T>
  void download(std::span<const T> src, std::span<T> host) {
    fits(src.size(), host.size(), "download");
    if (src.empty()) return;
    check(cudaMemcpyAsync(host.data(), src.data(), src.size_bytes(), cudaMemcpyDeviceToHost, stream()),
          "cudaMemcpyAsync (download)");
    synchronize();
  }
  template <class T>
  void copy(std::span<const T> src, std::span<T> dst) {
    fits(src.size(), dst.size(), "copy");
    if (src.empty()) return;
    check(cudaMemcpyAsync(dst.data(), src.data(), src.size_bytes(), cudaMemcpyDeviceToDevice, stream()),
          "cudaMemcpyAsync (device copy)");
  }
  template <class T>
  void fill(std::span<T> y, T v);
  /// y[r ldy + c] = x[r ldx + c] for r < rows, c < cols: one cudaMemcpy2DAsync.
  template <class T>
  void copy_rows(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::int64_t ldx, std::span<T> y,
                 std::int64_t ldy) {
    if (rows <= 0 || cols <= 0) return;
    if (ldx < cols || ldy < cols || std::size_t((rows - 1) * ldx + cols) > x.size() ||
        std::size_t((rows - 1) * ldy + cols) > y.size())
      throw cuda_error("cuda_device::copy_rows: " + std::to_string(rows) + " rows of " + std::to_string(cols) +
                       " elements do not fit the spans (" + std::to_string(x.size()) + " and " +
                       std::to_string(y.size()) + " elements)");
    check(cudaMemcpy2DAsync(y.data(), std::size_t(ldy) * sizeof(T), x.data(), std::size_t(ldx) * sizeof(T),
                            std::size_t(cols) * sizeof(T), std::size_t(rows), cudaMemcpyDeviceToDevice, stream()),
          "cudaMemcpy2DAsync (copy_rows)");
  }
  /// Whether x holds no NaN or Inf; waits for the answer.
  template <class T>
  bool all_finite(std::span<const T> x) const;
  /// y[i] = x[i] in To, through float: rounded to nearest even into a 16-bit type, exact out of
  /// one (mixed precision's master weights and gradient sums; runtime/detail/precision.hpp).
  template <class From, class To>
  void convert(std::span<const From> x, std::span<To> y);
  /// Bytes of this device's live buffers now (the sizes they were allocated with). Not counted:
  /// freed blocks the pool keeps cached, cuBLAS's and NCCL's own workspaces, other allocators.
  std::int64_t bytes_in_use() const { return state_->live_bytes.load(std::memory_order_relaxed); }

  // ---- BLAS-like (contracts: autoddl/backend/device.hpp) --------------------------------------
  template <class T>
  void gemm(const gemm_desc& g, T alpha, std::span<const T> a, std::span<const T> b, T beta, std::span<T> c);
  template <class T>
  void add(std::span<const T> a, std::span<const T> b, std::span<T> y);
  template <class T>
  void axpy(T alpha, std::span<const T> x, std::span<T> y);
  template <class T>
  void scale(T alpha, std::span<T> y);
  template <class T>
  void permute_0213(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d, std::span<const T> x, std::span<T> y);
  template <class T>
  void bias_add(std::int64_t outer, std::int64_t channels, std::int64_t inner, std::span<const T> b, std::span<T> y);
  template <class T>
  void bias_grad(std::int64_t outer, std::int64_t channels, std::int64_t inner, std::span<const T> dy, std::span<T> db);

  // ---- activations --------------------------------------------------------------------------
  template <class T>
  void relu_fwd(std::span<const T> x, std::span<T> y);
  template <class T>
  void relu_bwd(std::span<const T> x, std::span<const T> dy, std::span<T> dx);
  template <class T>
  void gelu_fwd(std::span<const T> x, std::span<T> y);
  template <class T>
  void gelu_bwd(std::span<const T> x, std::span<const T> dy, std::span<T> dx);
  template <class T>
  void silu_fwd(std::span<const T> x, std::span<T> y);
  template <class T>
  void silu_bwd(std::span<const T> x, std::span<const T> dy, std::span<T> dx);
  template <class T>
  void mul(std::span<const T> a, std::span<const T> b, std::span<T> y);
  template <class T>
  void rotary(std::int64_t b, std::int64_t s, std::int64_t heads, std::int64_t d, std::int64_t pos0, double theta,
              bool inverse, std::span<const T> x, std::span<T> y);

  // ---- row-wise -----------------------------------------------------------------------------
  static constexpr double layernorm_eps = 1e-5;
  /// mean and rstd are computed in acc_t<T> and stored as statistic_t<T> (the same type).
  template <class T>
  void layernorm_fwd(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<const T> gamma,
                     std::span<const T> beta, std::span<T> y, std::span<statistic_t<T>> mean,
                     std::span<statistic_t<T>> rstd);
  template <class T>
  void layernorm_bwd(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<const T> gamma,
                     std::span<const statistic_t<T>> mean, std::span<const statistic_t<T>> rstd,
                     std::span<const T> dy, std::span<T> dx, std::span<T> dgamma, std::span<T> dbeta);
  /// rstd is computed in acc_t<T> and stored as statistic_t<T>.
  template <class T>
  void rmsnorm_fwd(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<const T> gamma, double eps,
                   std::span<T> y, std::span<statistic_t<T>> rstd);
  template <class T>
  void rmsnorm_bwd(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<const T> gamma,
                   std::span<const statistic_t<T>> rstd, std::span<const T> dy, std::span<T> dx, std::span<T> dgamma);
  template <class T>
  void softmax_fwd(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<T> y);
  template <class T>
  void softmax_bwd(std::int64_t rows, std::int64_t cols, std::span<const T> y, std::span<const T> dy, std::span<T> dx);
  template <class T>
  void scale_causal_mask(std::int64_t groups, std::int64_t sq, std::int64_t sk, T scale, std::int64_t q_offset,
                         bool causal, std::span<T> s);
  // fused attention (backend/cuda/attention_kernels.cuh)
  template <class T>
  void attention_fwd(const attention_desc& a, std::span<const T> q, std::span<const T> k, std::span<const T> v,
                     std::span<T> o, std::span<statistic_t<T>> lse);
  template <class T>
  void attention_bwd(const attention_desc& a, std::span<const T> q, std::span<const T> k, std::span<const T> v,
                     std::span<const T> o, std::span<const statistic_t<T>> lse, std::span<const T> dout,
                     std::span<T> dq, std::span<T> dk, std::span<T> dv);

  // ---- embedding ----------------------------------------------------------------------------
  template <class T>
  void gather_rows(std::span<const std::int64_t> ids, std::int64_t lo, std::span<const T> table, std::span<T> y);
  /// Accumulates with atomicAdd in acc_t<T> (float for the half types, through a float copy of
  /// dtable), so repeated ids sum in float; the order of the sum is not fixed.
  template <class T>
  void scatter_add_rows(std::span<const std::int64_t> ids, std::int64_t lo, std::span<const T> dy, std::span<T> dtable);

  // ---- mixture of experts (backend/cuda/moe_kernels.cuh) -------------------------------------
  template <class T>
  void topk_experts(std::int64_t rows, std::int64_t e, std::int64_t k, std::span<const T> p,
                    std::span<std::int64_t> picks);
  template <class T>
  void topk_gates(std::int64_t rows, std::int64_t e, std::int64_t k, bool renormalize, std::span<const T> p,
                  std::span<const std::int64_t> picks, std::span<T> g);
  template <class T>
  void topk_gates_bwd(std::int64_t rows, std::int64_t e, std::int64_t k, bool renormalize, std::span<const T> p,
                      std::span<const std::int64_t> picks, std::span<const T> dg, std::span<T> dp);
  template <class T>
  void balance_loss(std::int64_t b, std::int64_t s, std::int64_t e, std::int64_t k, std::span<const T> p,
                    std::span<const std::int64_t> picks, T scale, std::span<T> out);
  template <class T>
  void balance_loss_bwd(std::int64_t b, std::int64_t s, std::int64_t e, std::int64_t k,
                        std::span<const std::int64_t> picks, std::span<const T> dloss, T scale, std::span<T> dp);
  /// I is std::int64_t (instantiated once, by AUTODDL_CUDA_INSTANTIATE_INDEX_PRIMITIVES).
  template <class I>
  void moe_slots(I b, I s, I e, I k, I capacity, std::span<const I> picks, std::span<I> src, std::span<I> dst);
  template <class T>
  void combine_rows(std::int64_t rows, std::int64_t e, std::span<const std::int64_t> dst, std::span<const T> g,
                    std::span<const T> x, std::span<T> y);
  template <class T>
  void combine_rows_bwd(std::int64_t rows, std::int64_t e, std::span<const std::int64_t> dst, std::span<const T> g,
                        std::span<const T> x, std::span<const T> dy, std::span<T> dx, std::span<T> dg);

  // ---- windows (NCHW) -----------------------------------------------------------------------
  template <class T>
  void im2col(const window_geom& g, std::span<const T> x, std::span<T> col);
  template <class T>
  void col2im(const window_geom& g, std::span<const T> col, std::span<T> dx);
  template <class T>
  void max_pool_fwd(const window_geom& g, std::span<const T> x, std::span<T> y);
  template <class T>
  void max_pool_bwd(const window_geom& g, std::span<const T> x, std::span<const T> dy, std::span<T> dx);

  // ---- dropout (the mask of autoddl::dropout_keep, identical to cpu_device's) -----------------
  template <class T>
  void dropout(const dropout_key& key, const shard_info& s, std::span<const T> x, std::span<T> y);

  // ---- softmax cross-entropy (max and stats in statistic_t<T>, computed in acc_t<T>) ------------
  template <class T>
  void row_max(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<statistic_t<T>> m);
  template <class T>
  void xent_stats(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<const std::int64_t> labels,
                  std::int64_t lo, std::span<const statistic_t<T>> m, std::span<statistic_t<T>> stats);
  /// The loss from the row statistics alone, in their type S (float or double).
  template <class S>
  void xent_loss(std::int64_t rows, std::span<const S> m, std::span<const S> stats, std::type_identity_t<S> scale,
                 std::span<S> out);
  template <class T>
  void xent_bwd(std::int64_t rows, std::int64_t cols, std::span<const T> x, std::span<const std::int64_t> labels,
                std::int64_t lo, std::span<const statistic_t<T>> m, std::span<const statistic_t<T>> stats,
                std::span<const T> dloss, statistic_t<T> scale, std::span<T> dx);

  // ---- the side queue (SideQueue, backend/communicator.hpp) -----------------------------------
  /// Everything queued afterwards (primitives, allocations, frees, comm's collectives) goes on the
  /// side stream, after everything queued on the main stream so far.
  template <class M>
    requires requires(M& m, cudaStream_t s) { m.set_stream(s); }
  void use_side_queue(M& comm) {
    check(cudaEventRecord(fork_.get(), main_stream()), "cudaEventRecord (side queue fork)");
    check(cudaStreamWaitEvent(side_stream(), fork_.get(), 0), "cudaStreamWaitEvent (side queue fork)");
    make_current(side_stream(), comm);
  }
  /// Back to the main stream; the side stream's work goes on beside it.
  template <class M>
    requires requires(M& m, cudaStream_t s) { m.set_stream(s); }
  void use_main_queue(M& comm) {
    make_current(main_stream(), comm);
  }
  /// The main stream waits (on the GPU; the host does not) for everything queued on the side
  /// stream so far.
  template <class M>
    requires requires(M& m, cudaStream_t s) { m.set_stream(s); }
  void join_side_queue(M&) {
    check(cudaEventRecord(join_.get(), side_stream()), "cudaEventRecord (side queue join)");
    check(cudaStreamWaitEvent(main_stream(), join_.get(), 0), "cudaStreamWaitEvent (side queue join)");
  }

  // ---- optimizers ---------------------------------------------------------------------------
  template <class T>
  void sgd_momentum(const optimizer_step& o, std::span<const T> g, std::span<T> vel, std::span<T> p);
  template <class T>
  void adam(const optimizer_step& o, std::span<const T> g, std::span<T> m, std::span<T> v, std::span<T> p);

 private:
  // s becomes the current stream of the device, its cuBLAS handle and comm's communicators.
  template <class M>
  void make_current(cudaStream_t s, M& comm) {
    check(cublasSetStream(blas(), s), "cublasSetStream");
    state_->current = s;
    comm.set_stream(s);
  }
  static void fits(std::size_t from, std::size_t to, const char* what) {
    if (from > to)
      throw cuda_error(std::string("cuda_device::") + what + " of " + std::to_string(from) + " elements into " +
                       std::to_string(to) + ": the destination is too small; give it at least " + std::to_string(from));
  }

  int ordinal_ = 0;
  std::shared_ptr<detail::allocation_state> state_;  // before blas_: the handle is bound to its stream
  detail::owned_blas blas_;
  detail::owned_event fork_, join_;  // the side queue's fork and join points
};

static_assert(Device<cuda_device>, "cuda_device must model autoddl::Device");
static_assert(DeviceFor<cuda_device, __half> && DeviceFor<cuda_device, __nv_bfloat16>,
              "cuda_device runs every primitive for the half types too");

}  // namespace autoddl::cuda
