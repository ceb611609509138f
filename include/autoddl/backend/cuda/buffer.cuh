#pragma once
// cuda_buffer<T>: n elements of GPU memory (never managed memory), allocated and freed in stream
// order: cudaMallocFromPoolAsync / cudaFreeAsync on the current stream of the cuda_device that
// made it (its main stream, or its side stream while the side queue is current: SideQueue,
// backend/communicator.hpp), from that GPU's default memory pool. The device raises the pool's release threshold, so a
// freed block stays cached for the next allocation (the next training step) instead of going
// back to the driver, and no free synchronises the device in the middle of a step (cudaFree
// would). Move-only; cuda_device::alloc makes and zero-fills one.
//   - A buffer may die while kernels that use it are queued: its free is queued after them, on
//     the device's current stream. One destroyed while the side queue is current is freed on the
//     side stream, after the side work queued so far (the gradient boxings' temporaries). Work on
//     another stream than the current one that uses it must be joined into the current stream
//     before it dies (cuda_device::join_side_queue, overlapped_reducer::join do): the executor
//     keeps what the side queue uses alive until the join.
//   - The device and its buffers share one allocation_state (the stream, the pool, the count of
//     live bytes), so a buffer may outlive its device: the stream goes when the last of them does.
//   - Destruction never throws: a failed cudaFreeAsync is kept in the state and reported by the
//     device's next synchronize().
// Host-only: compiles with g++ as well as nvcc.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "autoddl/backend/cuda/error.cuh"

namespace autoddl::cuda {

namespace detail {
/// A non-blocking CUDA stream owned by its holder. cudaStreamDestroy does not wait: work still
/// queued on the stream completes, then its resources are released.
class owned_stream {
 public:
  owned_stream() { check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"); }
  owned_stream(const owned_stream&) = delete;
  owned_stream& operator=(const owned_stream&) = delete;
  ~owned_stream() { (void)cudaStreamDestroy(stream_); }  // nothing to report to at destruction
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

/// What a cuda_device shares with its buffers: where they are allocated, and their live bytes.
struct allocation_state {
  explicit allocation_state(cudaMemPool_t p) : pool(p), current(stream.get()) {}
  cudaMemPool_t pool;                                 ///< the GPU's default pool (not owned)
  owned_stream stream;                                ///< the device's main stream
  owned_stream side;                                  ///< its side stream (the side queue)
  cudaStream_t current;                               ///< stream or side: where work, allocations and frees go now
  std::atomic<std::int64_t> live_bytes{0};            ///< bytes of the buffers alive now
  std::atomic<cudaError_t> free_error{cudaSuccess};  ///< first failed cudaFreeAsync, not yet reported
};
}  // namespace detail

template <class T>
class cuda_buffer {
 public:
  cuda_buffer() = default;
  /// n elements (uninitialised) from `state`'s pool, ordered on its stream; cuda_device::alloc
  /// calls this and zero-fills. Throws cuda_error when the pool cannot grow by n * sizeof(T).
  cuda_buffer(std::size_t n, std::shared_ptr<detail::allocation_state> state) {
    if (n == 0) return;
    if (n > std::size_t(std::numeric_limits<std::int64_t>::max()) / sizeof(T))
      throw cuda_error("cuda_buffer of " + std::to_string(n) + " elements of " + std::to_string(sizeof(T)) +
                       " bytes: the size overflows a 64-bit byte count");
    const std::size_t bytes = n * sizeof(T);
    void* p = nullptr;
    check(cudaMallocFromPoolAsync(&p, bytes, state->pool, state->current),
          "cudaMallocFromPoolAsync of " + std::to_string(bytes) + " bytes");
    state->live_bytes.fetch_add(std::int64_t(bytes), std::memory_order_relaxed);
    data_ = static_cast<T*>(p);
    size_ = n;
    state_ = std::move(state);
  }
  cuda_buffer(const cuda_buffer&) = delete;
  cuda_buffer& operator=(const cuda_buffer&) = delete;
  cuda_buffer(cuda_buffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), state_(std::move(o.state_)) {}
  cuda_buffer& operator=(cuda_buffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      state_ = std::move(o.state_);
    }
    return *this;
  }
  ~cuda_buffer() { release(); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  /// The stream the buffer's free would be queued on now: its device's current stream (null for
  /// an empty buffer).
  cudaStream_t stream() const { return state_ ? state_->current : nullptr; }

 private:
  void release() noexcept {
    if (data_) {
      const cudaError_t rc = cudaFreeAsync(data_, state_->current);
      if (rc != cudaSuccess) {
        cudaError_t none = cudaSuccess;  // keep the first failure for synchronize() to report
        state_->free_error.compare_exchange_strong(none, rc);
        (void)cudaGetLastError();  // held in the state: not the next kernel launch's error
      }
      state_->live_bytes.fetch_sub(std::int64_t(size_ * sizeof(T)), std::memory_order_relaxed);
    }
    data_ = nullptr;
    size_ = 0;
    state_.reset();
  }
  T* data_ = nullptr;
  std::size_t size_ = 0;
  std::shared_ptr<detail::allocation_state> state_;
};

}  // namespace autoddl::cuda
