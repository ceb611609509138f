// The generic executor instantiated on the GPU back end: every member of
// trainer<T, cuda_device, nccl_mesh_comm> for float and bf16 compiles (CI builds this whenever
// CUDA and NCCL are found; it runs nothing). autoddl-train --device cuda uses both (bf16: --dtype bf16).
// A typed model's compiled instances on cuda_device too (runtime/typed_program.hpp): every
// candidate of a typed MLP on 2x2, for float and bf16.
#include "autoddl/backend/cuda/device.cuh"
#include "autoddl/backend/nccl/mesh_comm.cuh"
#include "autoddl/runtime/trainer.hpp"
#include "autoddl/runtime/typed_program.hpp"

namespace autoddl {
static_assert(Device<cuda::cuda_device>);
static_assert(MeshCommunicator<nccl::nccl_mesh_comm>);
static_assert(AxisCommunicatorFor<nccl::nccl_comm, __nv_bfloat16>);
// The GPU pair offers a side queue (a second stream), so the trainer overlaps gradient boxing
// with backward there (backend/communicator.hpp, SideQueue).
static_assert(SideQueue<cuda::cuda_device, nccl::nccl_mesh_comm>);
template class trainer<float, cuda::cuda_device, nccl::nccl_mesh_comm>;
template class trainer<__nv_bfloat16, cuda::cuda_device, nccl::nccl_mesh_comm>;

using cuda_typed_mlp = typed_model<float, static_mesh<2, 2>, static_shape<8, 16>, layers::linear<32>, layers::relu<>,
                                   layers::linear<8>, layers::cross_entropy<>>;
template op_program<float, cuda::cuda_device> typed_program<cuda_typed_mlp, float, cuda::cuda_device>(const std::vector<int>&);
template op_program<__nv_bfloat16, cuda::cuda_device> typed_program<cuda_typed_mlp, __nv_bfloat16, cuda::cuda_device>(
    const std::vector<int>&);
}  // namespace autoddl
