#pragma once
// Failure policy of the CUDA back end: every CUDA runtime and cuBLAS call is checked, and a
// failure throws autoddl::cuda::cuda_error whose message names the call and CUDA's reason:
//   "cudaMallocFromPoolAsync of 1073741824 bytes failed: out of memory (cudaErrorMemoryAllocation)"
// Kernel launches are checked with cudaGetLastError right after the launch; an error raised by a
// kernel while it runs surfaces at the next synchronising call, which names itself. Nothing is
// dropped: destructors cannot throw, so a buffer's failed release is reported by the device's
// next synchronize(). In an MPI job a cuda_error ends the job, not just this rank: uncaught it
// aborts the process, and a program that turns it into a non-zero exit makes mpirun terminate
// the other ranks (Open MPI: "one or more processes exited with non-zero status ... the job has
// been aborted"); communicators this rank holds are aborted, not drained, as the exception
// unwinds (autoddl/backend/nccl/comm.cuh), so peers are not left waiting in a collective.
// Host-only: compiles with g++ as well as nvcc.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

#include "autoddl/error.hpp"

namespace autoddl::cuda {

/// A CUDA runtime, cuBLAS or NCCL call failed.
class cuda_error : public error {
 public:
  using error::error;
};

/// Throws cuda_error naming `call` when `rc` is not cudaSuccess.
inline void check(cudaError_t rc, const std::string& call) {
  if (rc == cudaSuccess) return;
  (void)cudaGetLastError();  // the runtime also keeps rc as its last error: not the next launch's
  throw cuda_error(call + " failed: " + cudaGetErrorString(rc) + " (" + cudaGetErrorName(rc) + ")");
}

/// Throws cuda_error naming `call` when `rc` is not CUBLAS_STATUS_SUCCESS.
inline void check(cublasStatus_t rc, const std::string& call) {
  if (rc == CUBLAS_STATUS_SUCCESS) return;
  throw cuda_error(call + " failed: " + cublasGetStatusString(rc) + " (" + cublasGetStatusName(rc) + ")");
}

/// Whether this process sees a usable CUDA device; `why` receives the reason when not.
/// Tests return 77 (Meson: skipped) when this is false.
inline bool device_available(std::string* why = nullptr) {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    if (why) *why = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(rc);
    (void)cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return false;
  }
  if (n == 0) {
    if (why) *why = "cudaGetDeviceCount reports 0 devices";
    return false;
  }
  return true;
}

}  // namespace autoddl::cuda
