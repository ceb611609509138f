// Compile-fail case: a layout change by assignment (it would all-gather silently).
// expect: implicit_layout_conversion<.*"\[S\(0\)\]@4".*"\[B\]@4".*never implicit
#include "autoddl/ops/typed.hpp"
using namespace autoddl;
int main() {
  dtensor<float, "[S(0)]@4", static_shape<8, 8>> a;
#ifndef AUTODDL_TWIN
  dtensor<float, "[B]@4", static_shape<8, 8>> b = a;
#else
  dtensor<float, "[B]@4", static_shape<8, 8>> b = to<"[B]">(a);
#endif
}
