// Compile-fail case: a bias whose layout does not follow the output's.
// expect: no_signature_for_layouts<.*"linear bias".*"Y\[S\(0\),S\(1\)\]@2x4".*"b\[B,B\]@2x4".*to<\\"\[B,S\(0\)\]\\">\(b\)
#include "autoddl/ops/typed.hpp"
using namespace autoddl;
int main() {
  dtensor<float, "[S(0),B]@2x4", static_shape<128, 64>> x;
  dtensor<float, "[B,S(1)]@2x4", static_shape<64, 256>> w;
#ifndef AUTODDL_TWIN
  dtensor<float, "[B,B]@2x4", static_shape<256>> b; auto y = linear(x, w, b);
#else
  dtensor<float, "[B,S(0)]@2x4", static_shape<256>> b; auto y = linear(x, w, b);
#endif
}
