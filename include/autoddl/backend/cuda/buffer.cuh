#pragma once
// cuda_buffer<T>: an RAII allocation of n elements in GPU memory (cudaMalloc; never managed
// memory). Move-only. The device (cuda_device::alloc) zero-fills it on its stream.
// cudaFree waits for the device's outstanding work, so a buffer may die while kernels that
// used it were queued. Host-only: compiles with g++ as well as nvcc.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>

#include "autoddl/backend/cuda/error.cuh"

namespace autoddl::cuda {

template <class T>
class cuda_buffer {
 public:
  cuda_buffer() = default;
  explicit cuda_buffer(std::size_t n) : size_(n) {
    if (n == 0) return;
    void* p = nullptr;
    check(cudaMalloc(&p, n * sizeof(T)), "cudaMalloc of " + std::to_string(n * sizeof(T)) + " bytes");
    data_ = static_cast<T*>(p);
  }
  cuda_buffer(const cuda_buffer&) = delete;
  cuda_buffer& operator=(const cuda_buffer&) = delete;
  cuda_buffer(cuda_buffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  cuda_buffer& operator=(cuda_buffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  ~cuda_buffer() { release(); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  void release() noexcept {
    if (data_) (void)cudaFree(data_);  // no throw from a destructor; a later call reports errors
    data_ = nullptr;
    size_ = 0;
  }
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace autoddl::cuda
