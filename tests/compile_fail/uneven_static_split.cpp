// Compile-fail case: a static shape that a split does not divide.
// expect: uneven_split<.*"\[6,8\]".*"\[S\(0\),B\]@4x2".*not divisible
#include "autoddl/ops/typed.hpp"
using namespace autoddl;
int main() {

#ifndef AUTODDL_TWIN
  dtensor<float, "[S(0),B]@4x2", static_shape<6, 8>> x;
#else
  dtensor<float, "[S(0),B]@4x2", static_shape<8, 8>> x;
#endif
}
