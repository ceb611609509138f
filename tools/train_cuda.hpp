#pragma once
// autoddl-train --device cuda (a build with CUDA and NCCL): what the GPU run needs besides the
// generic executor. Every rank checks that it sees a GPU before NCCL starts, and a bf16 run's
// --check-serial trains its CPU twin: the CPU device's bf16 for the GPU's __nv_bfloat16, with
// the same rounding points (backend/cpu/half_types.hpp).
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <string>

#include "autoddl/backend/cpu/half_types.hpp"
#include "autoddl/error.hpp"
#include "serial_check.hpp"

namespace autoddl::tools::train {

template <>
struct cpu_twin<__nv_bfloat16> {
  using type = bf16;
};

/// --device cuda: every rank sees a GPU, or every rank refuses in one sentence (rank 0 prints it)
/// before any of them starts NCCL.
inline void check_gpus_on_every_rank() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    count = 0;
    (void)cudaGetLastError();  // answered here
  }
  int least = count;
  MPI_Allreduce(MPI_IN_PLACE, &least, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (least > 0) return;
  const std::string why = e != cudaSuccess ? std::string(cudaGetErrorString(e)) : std::to_string(count) + " GPUs here";
  throw error("--device cuda needs a GPU visible to every rank, and a rank sees none (" + why +
              "); run where each rank has a GPU, or use --device cpu");
}

}  // namespace autoddl::tools::train
