// Compile-fail case: a nonlinear op fed a P tensor; the twin all-reduces first.
// expect: nonlinear_op_given_partial_sum<.*"relu".*"\[P,B\]@2x4".*to<\\"\[B,B\]\\">\(x\)
#include "autoddl/ops/typed.hpp"
using namespace autoddl;
int main() {
  dtensor<float, "[S(1),B]@2x4", static_shape<128, 64>> x;
  dtensor<float, "[S(0),B]@2x4", static_shape<64, 32>> w;
  auto y = matmul(x, w);  // [P,B]: partial sums over axis 0
#ifndef AUTODDL_TWIN
  auto z = relu(y);
#else
  auto z = relu(to<"[B,B]">(y));
#endif
}
