// Compile-fail case: X split on k needs W split on k; the compiler proposes the W layout.
// expect: no_signature_for_layouts<.*"matmul".*"X\[S\(1\),B\]@2x4".*"W\[B,S\(1\)\]@2x4".*to<\\"\[S\(0\),S\(1\)\]\\">\(w\)
#include "autoddl/ops/typed.hpp"
using namespace autoddl;
int main() {
  dtensor<float, "[S(1),B]@2x4", static_shape<128, 64>> x;
#ifndef AUTODDL_TWIN
  dtensor<float, "[B,S(1)]@2x4", static_shape<64, 256>> w; auto y = matmul(x, w);
#else
  dtensor<float, "[S(0),S(1)]@2x4", static_shape<64, 256>> w; auto y = matmul(x, w);
#endif
}
