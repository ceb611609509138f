// The generic executor instantiated on the GPU back end: every member of
// trainer<T, cuda_device, nccl_mesh_comm> for float and bf16 compiles (CI builds this whenever
// CUDA and NCCL are found; it runs nothing). autoddl-train --device cuda uses the float one.
#include "autoddl/backend/cuda/device.cuh"
#include "autoddl/backend/nccl/mesh_comm.cuh"
#include "autoddl/runtime/trainer.hpp"

namespace autoddl {
static_assert(Device<cuda::cuda_device>);
static_assert(MeshCommunicator<nccl::nccl_mesh_comm>);
static_assert(AxisCommunicatorFor<nccl::nccl_comm, __nv_bfloat16>);
// The GPU pair offers a side queue (a second stream), so the trainer overlaps gradient boxing
// with backward there (backend/communicator.hpp, SideQueue).
static_assert(SideQueue<cuda::cuda_device, nccl::nccl_mesh_comm>);
template class trainer<float, cuda::cuda_device, nccl::nccl_mesh_comm>;
template class trainer<__nv_bfloat16, cuda::cuda_device, nccl::nccl_mesh_comm>;
}  // namespace autoddl
