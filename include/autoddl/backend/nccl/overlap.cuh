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
// @pre the gradient buffers are not written again before join(), and the communicator outlives
// the reducer. Failures end the job as nccl_comm's do (its fail: ncclCommAbort, then MPI_Abort).
// Host-only.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <exception>
#include <span>

#include "autoddl/backend/nccl/comm.cuh"

namespace autoddl::nccl {

class overlapped_reducer {
 public:
  overlapped_reducer(nccl_comm& comm, cudaStream_t compute) : comm_(comm), compute_(compute) {
    comm_.check_or_abort(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    comm_.check_or_abort(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    comm_.check_or_abort(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  }
  overlapped_reducer(const overlapped_reducer&) = delete;
  overlapped_reducer& operator=(const overlapped_reducer&) = delete;
  /// Waits for the queued reductions, watching the communicator for a peer's failure
  /// (nccl_comm::wait), except while an exception unwinds: then the communicator is about to be
  /// aborted and the reductions may never end. cudaStreamDestroy does not wait.
  ~overlapped_reducer() {
    if (std::uncaught_exceptions() == 0) comm_.wait(side_);
    (void)cudaEventDestroy(done_);  // nothing to report to at destruction
    (void)cudaEventDestroy(ready_);
    (void)cudaStreamDestroy(side_);
  }

  /// Queues an all-reduce of `grad` on the side stream, after the compute stream's work so far.
  /// Returns the bytes it sends (the all-reduce's).
  template <cuda::CudaElement T>
  std::int64_t all_reduce(std::span<T> grad) {
    comm_.check_or_abort(cudaEventRecord(ready_, compute_), "cudaEventRecord (gradient ready)");
    comm_.check_or_abort(cudaStreamWaitEvent(side_, ready_, 0), "cudaStreamWaitEvent (side stream)");
    const cudaStream_t prev = comm_.stream();
    comm_.set_stream(side_);
    const std::int64_t b = comm_.all_reduce(grad);
    comm_.set_stream(prev);
    return b;
  }
  /// The compute stream waits for every reduction queued so far.
  void join() {
    comm_.check_or_abort(cudaEventRecord(done_, side_), "cudaEventRecord (reductions done)");
    comm_.check_or_abort(cudaStreamWaitEvent(compute_, done_, 0), "cudaStreamWaitEvent (compute stream)");
  }
  cudaStream_t side_stream() const { return side_; }

 private:
  nccl_comm& comm_;
  cudaStream_t compute_;
  cudaStream_t side_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
};

}  // namespace autoddl::nccl
