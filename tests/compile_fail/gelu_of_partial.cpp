// Compile-fail case: GeLU of a partial sum; the twin reduce-scatters first.
// expect: nonlinear_op_given_partial_sum<.*"gelu".*"\[P\]@4"
#include "autoddl/ops/typed.hpp"
using namespace autoddl;
int main() {
  dtensor<float, "[P]@4", static_shape<8, 8>> x;
#ifndef AUTODDL_TWIN
  auto z = gelu(x);
#else
  auto z = gelu(to<"[S(0)]">(x));
#endif
}
