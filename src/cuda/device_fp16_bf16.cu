// cuda_device's primitives for __half and __nv_bfloat16 (float accumulation; see
// autoddl/backend/cuda/device_impl.cuh).
#include "autoddl/backend/cuda/device_impl.cuh"

AUTODDL_CUDA_INSTANTIATE_DEVICE(__half)
AUTODDL_CUDA_INSTANTIATE_DEVICE(__nv_bfloat16)
