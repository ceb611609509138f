// Catch2 main of the CUDA tests: exits 77 (Meson: skipped) when no CUDA device is usable.
#include <catch2/catch_session.hpp>

#include <cstdio>
#include <string>

#include "autoddl/backend/cuda/error.cuh"

int main(int argc, char** argv) {
  std::string why;
  if (!autoddl::cuda::device_available(&why)) {
    std::printf("skipped: no usable CUDA device (%s)\n", why.c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
