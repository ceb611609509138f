// Compile-fail case: operands on different meshes.
// expect: mesh_mismatch<.*"matmul".*"\[S\(0\),B\]@2x4".*"\[B,B\]@4x2"
#include "autoddl/ops/typed.hpp"
using namespace autoddl;
int main() {
  dtensor<float, "[S(0),B]@2x4", static_shape<16, 8>> x;
#ifndef AUTODDL_TWIN
  dtensor<float, "[B,B]@4x2", static_shape<8, 8>> w; auto y = matmul(x, w);
#else
  dtensor<float, "[B,B]@2x4", static_shape<8, 8>> w; auto y = matmul(x, w);
#endif
}
