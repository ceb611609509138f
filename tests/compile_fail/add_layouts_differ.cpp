// Compile-fail case: a residual add of two layouts.
// expect: layouts_differ<.*"add".*"\[S\(0\)\]@4".*"\[B\]@4".*to<\\"\[S\(0\)\]\\">\(b\)
#include "autoddl/ops/typed.hpp"
using namespace autoddl;
int main() {
  dtensor<float, "[S(0)]@4", static_shape<8, 8>> a;
  dtensor<float, "[B]@4", static_shape<8, 8>> b;
#ifndef AUTODDL_TWIN
  auto c = add(a, b);
#else
  auto c = add(a, to<"[S(0)]">(b));
#endif
}
