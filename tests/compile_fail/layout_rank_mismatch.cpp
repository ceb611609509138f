// Compile-fail case: one SBP per mesh axis.
// expect: layout_arg\("\[S\(0\)\]@2x4"\).*SBP entries for a mesh of.*give one SBP per mesh axis
#include "autoddl/ops/typed.hpp"
using namespace autoddl;
int main() {

#ifndef AUTODDL_TWIN
  dtensor<float, "[S(0)]@2x4", static_shape<8, 8>> x;
#else
  dtensor<float, "[S(0),B]@2x4", static_shape<8, 8>> x;
#endif
}
