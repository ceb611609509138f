#pragma once
// The element types of the CUDA device and how each maps onto CUDA and cuBLAS: float, double,
// __half and __nv_bfloat16. Arithmetic on the half types runs in float (acc_t), rounding once
// on store; double runs in double. Row statistics (statistic_t, autoddl/backend/device.hpp) of
// the half types are float: computed in acc_t and stored without rounding to the element type.
// Host-only: compiles with g++ as well as nvcc.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <library_types.h>

#include <concepts>
#include <type_traits>

#include "autoddl/backend/device.hpp"

namespace autoddl {
/// Row statistics of the half types are float (a sum of exp over 65,504 is finite in float).
template <>
struct statistic_type<__half> {
  using type = float;
};
template <>
struct statistic_type<__nv_bfloat16> {
  using type = float;
};
}  // namespace autoddl

namespace autoddl::cuda {

template <class T>
concept CudaElement = std::same_as<T, float> || std::same_as<T, double> || std::same_as<T, __half> ||
                      std::same_as<T, __nv_bfloat16>;

/// The type arithmetic on T runs in: double for double, float for the others.
template <class T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

static_assert(std::is_same_v<statistic_t<float>, acc_t<float>> && std::is_same_v<statistic_t<double>, acc_t<double>> &&
                  std::is_same_v<statistic_t<__half>, acc_t<__half>> &&
                  std::is_same_v<statistic_t<__nv_bfloat16>, acc_t<__nv_bfloat16>>,
              "the CUDA kernels store row statistics in the type they compute them in: statistic_t<T> == acc_t<T>");

template <CudaElement T>
constexpr cudaDataType_t data_type_v = std::is_same_v<T, float>    ? CUDA_R_32F
                                       : std::is_same_v<T, double> ? CUDA_R_64F
                                       : std::is_same_v<T, __half> ? CUDA_R_16F
                                                                   : CUDA_R_16BF;

/// cuBLAS compute type: float accumulation for float and the half types (tensor cores for the
/// half types; plain FP32, not TF32, for float), double for double.
template <CudaElement T>
constexpr cublasComputeType_t compute_type_v = std::is_same_v<T, double> ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;

}  // namespace autoddl::cuda
