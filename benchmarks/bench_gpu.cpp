// bench_gpu: what the CUDA device reaches on this GPU, beside measured ceilings.
//   gemm    cuda_device::gemm, bf16 in / float accumulate, 8192^3: TFLOP/s (2 m n k / time)
//   copy    cudaMemcpyAsync device -> device of 1 GiB: GB/s (read + write bytes / time), the
//           practical memory-bandwidth ceiling of the element-wise kernels
//   add     cuda_device::add over 2 x 256 Mi floats -> 256 Mi: GB/s (3 x 1 GiB / time)
//   scale   cuda_device::scale in place over 256 Mi floats: GB/s (2 x 1 GiB / time)
//   gelu    cuda_device::gelu_fwd over 256 Mi bf16: GB/s (2 x 512 MiB / time)
// Each is the best of 10 timed runs after 2 warm-ups (CUDA events on the device's stream).
// Prints one line per measurement: "name value unit (fraction of ceiling)". Exits 77 without a GPU.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>

#include "autoddl/backend/cuda.cuh"

using autoddl::gemm_desc;
using autoddl::cuda::check;
using autoddl::cuda::cuda_device;

namespace {
double best_ms(cuda_device& dev, const std::function<void()>& f) {
  cudaEvent_t a = nullptr, b = nullptr;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  for (int i = 0; i < 2; ++i) f();
  float best = 1e30f;
  for (int i = 0; i < 10; ++i) {
    check(cudaEventRecord(a, dev.stream()), "cudaEventRecord");
    f();
    check(cudaEventRecord(b, dev.stream()), "cudaEventRecord");
    check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    best = std::min(best, ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return double(best);
}
}  // namespace

int main() {
  std::string why;
  if (!autoddl::cuda::device_available(&why)) {
    std::printf("skipped: no usable CUDA device (%s)\n", why.c_str());
    return 77;
  }
  try {
    cuda_device dev;
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, dev.ordinal()), "cudaGetDeviceProperties");
    std::printf("device %s, %.0f GiB\n", prop.name, double(prop.totalGlobalMem) / (1 << 30));

    const std::int64_t s = 8192;
    auto a = dev.alloc<__nv_bfloat16>(std::size_t(s * s)), b = dev.alloc<__nv_bfloat16>(std::size_t(s * s)),
         c = dev.alloc<__nv_bfloat16>(std::size_t(s * s));
    dev.fill(dev.view(a), __float2bfloat16_rn(0.01f));
    dev.fill(dev.view(b), __float2bfloat16_rn(0.02f));
    const gemm_desc g{false, false, s, s, s, s, s, s};
    const double gemm_ms = best_ms(dev, [&] {
      dev.gemm(g, __float2bfloat16_rn(1.0f), dev.view(std::as_const(a)), dev.view(std::as_const(b)),
               __float2bfloat16_rn(0.0f), dev.view(c));
    });
    std::printf("gemm_bf16_8192 %.1f TFLOP/s\n", 2.0 * double(s) * s * s / (gemm_ms * 1e-3) / 1e12);

    const std::size_t n = std::size_t(256) << 20;  // 256 Mi elements
    auto x = dev.alloc<float>(n), y = dev.alloc<float>(n), z = dev.alloc<float>(n);
    const double gib = double(n * sizeof(float));
    const double copy_ms = best_ms(dev, [&] {
      check(cudaMemcpyAsync(y.data(), x.data(), n * sizeof(float), cudaMemcpyDeviceToDevice, dev.stream()), "cudaMemcpyAsync");
    });
    const double ceiling = 2 * gib / (copy_ms * 1e-3) / 1e9;
    std::printf("copy_d2d %.0f GB/s (ceiling)\n", ceiling);
    const double add_ms = best_ms(dev, [&] { dev.add(dev.view(std::as_const(x)), dev.view(std::as_const(y)), dev.view(z)); });
    const double add_gbs = 3 * gib / (add_ms * 1e-3) / 1e9;
    std::printf("add_f32 %.0f GB/s (%.0f%% of copy)\n", add_gbs, 100 * add_gbs / ceiling);
    const double scale_ms = best_ms(dev, [&] { dev.scale(1.0f, dev.view(z)); });
    const double scale_gbs = 2 * gib / (scale_ms * 1e-3) / 1e9;
    std::printf("scale_f32 %.0f GB/s (%.0f%% of copy)\n", scale_gbs, 100 * scale_gbs / ceiling);
    auto hx = dev.alloc<__nv_bfloat16>(n), hy = dev.alloc<__nv_bfloat16>(n);
    const double gelu_ms = best_ms(dev, [&] { dev.gelu_fwd(dev.view(std::as_const(hx)), dev.view(hy)); });
    const double gelu_gbs = 2 * double(n * 2) / (gelu_ms * 1e-3) / 1e9;
    std::printf("gelu_bf16 %.0f GB/s (%.0f%% of copy)\n", gelu_gbs, 100 * gelu_gbs / ceiling);
    dev.synchronize();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu: %s\n", e.what());
    return 1;
  }
  return 0;
}
