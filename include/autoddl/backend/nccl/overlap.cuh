#pragma once
// overlapped_reducer: gradient all-reduces on a second stream, overlapping backward compute.
// Backward produces gradients layer by layer on the compute stream; as soon as a layer's
// gradient is queued, all_reduce(grad) makes a side stream wait (cudaStreamWaitEvent) for
// everything queued on the compute stream so far, and queues the NCCL all-reduce there, so the
// next layers' kernels run while it communicates. join() makes the compute stream wait for all
// queued reductions (call it before the optimizer step reads the gradients).
//   overlapped_reducer r(mesh.axis(0), dev.stream());
//   for (layer in reverse) { backward(layer); r.all_reduce(grad(layer)); }
//   r.join();  optimizer step on dev.stream()
// @pre the gradient buffers are not written again before join(). Host-only.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "autoddl/backend/nccl/comm.cuh"

namespace autoddl::nccl {

class overlapped_reducer {
 public:
  overlapped_reducer(nccl_comm& comm, cudaStream_t compute) : comm_(comm), compute_(compute) {
    check(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", MPI_COMM_WORLD);
    check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreateWithFlags", MPI_COMM_WORLD);
    check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreateWithFlags", MPI_COMM_WORLD);
  }
  overlapped_reducer(const overlapped_reducer&) = delete;
  overlapped_reducer& operator=(const overlapped_reducer&) = delete;
  ~overlapped_reducer() {
    (void)cudaStreamSynchronize(side_);
    (void)cudaEventDestroy(done_);
    (void)cudaEventDestroy(ready_);
    (void)cudaStreamDestroy(side_);
  }

  /// Queues an all-reduce of `grad` on the side stream, after the compute stream's work so far.
  /// Returns the bytes it sends (the all-reduce's).
  template <cuda::CudaElement T>
  std::int64_t all_reduce(std::span<T> grad) {
    check(cudaEventRecord(ready_, compute_), "cudaEventRecord (gradient ready)", MPI_COMM_WORLD);
    check(cudaStreamWaitEvent(side_, ready_, 0), "cudaStreamWaitEvent (side stream)", MPI_COMM_WORLD);
    const cudaStream_t prev = comm_.stream();
    comm_.set_stream(side_);
    const std::int64_t b = comm_.all_reduce(grad);
    comm_.set_stream(prev);
    return b;
  }
  /// The compute stream waits for every reduction queued so far.
  void join() {
    check(cudaEventRecord(done_, side_), "cudaEventRecord (reductions done)", MPI_COMM_WORLD);
    check(cudaStreamWaitEvent(compute_, done_, 0), "cudaStreamWaitEvent (compute stream)", MPI_COMM_WORLD);
  }
  cudaStream_t side_stream() const { return side_; }

 private:
  nccl_comm& comm_;
  cudaStream_t compute_;
  cudaStream_t side_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
};

}  // namespace autoddl::nccl
