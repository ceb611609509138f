#pragma once
// The CUDA device back end (host side; link the autoddl_cuda library, or include
// autoddl/backend/cuda/device_impl.cuh in one nvcc translation unit and instantiate).
#include "autoddl/backend/cuda/buffer.cuh"
#include "autoddl/backend/cuda/device.cuh"
#include "autoddl/backend/cuda/error.cuh"
#include "autoddl/backend/cuda/types.cuh"
