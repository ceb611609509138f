// cuda_device's primitives for __half and __nv_bfloat16 (float accumulation; see
// autoddl/backend/cuda/device_impl.cuh).
#include "autoddl/backend/cuda/device_impl.cuh"

AUTODDL_CUDA_INSTANTIATE_DEVICE(__half)
AUTODDL_CUDA_INSTANTIATE_DEVICE(__nv_bfloat16)

// The conversions of mixed-precision training: each 16-bit type to and from its float master.
namespace autoddl::cuda {
template void cuda_device::convert<__half, float>(std::span<const __half>, std::span<float>);
template void cuda_device::convert<float, __half>(std::span<const float>, std::span<__half>);
template void cuda_device::convert<__nv_bfloat16, float>(std::span<const __nv_bfloat16>, std::span<float>);
template void cuda_device::convert<float, __nv_bfloat16>(std::span<const float>, std::span<__nv_bfloat16>);
}  // namespace autoddl::cuda
