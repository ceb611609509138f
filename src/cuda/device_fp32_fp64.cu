// cuda_device's primitives for float and double, and those over index buffers alone (see
// autoddl/backend/cuda/device_impl.cuh).
#include "autoddl/backend/cuda/device_impl.cuh"

AUTODDL_CUDA_INSTANTIATE_DEVICE(float)
AUTODDL_CUDA_INSTANTIATE_DEVICE(double)
AUTODDL_CUDA_INSTANTIATE_INDEX_PRIMITIVES()
