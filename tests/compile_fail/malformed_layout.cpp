// Compile-fail case: a typo in the notation is caught while compiling.
// expect: expected S\(d\), B or P
#include "autoddl/ops/typed.hpp"
using namespace autoddl;
int main() {

#ifndef AUTODDL_TWIN
  dtensor<float, "[S(0),Q]@2x4", static_shape<8, 8>> x;
#else
  dtensor<float, "[S(0),P]@2x4", static_shape<8, 8>> x;
#endif
}
