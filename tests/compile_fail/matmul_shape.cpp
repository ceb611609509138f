// Compile-fail case: inner dims of a static matmul disagree.
// expect: shape_mismatch<.*"matmul".*"\[128,64\]".*"\[32,16\]"
#include "autoddl/ops/typed.hpp"
using namespace autoddl;
int main() {
  dtensor<float, "[S(0)]@2", static_shape<128, 64>> x;
#ifndef AUTODDL_TWIN
  dtensor<float, "[B]@2", static_shape<32, 16>> w; auto y = matmul(x, w);
#else
  dtensor<float, "[B]@2", static_shape<64, 16>> w; auto y = matmul(x, w);
#endif
}
