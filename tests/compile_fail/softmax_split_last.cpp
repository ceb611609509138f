// Compile-fail case: softmax normalises the last dim, which must not be split.
// expect: no_signature_for_layouts<.*"softmax".*"X\[B,S\(1\)\]@2x4"
#include "autoddl/ops/typed.hpp"
using namespace autoddl;
int main() {
  dtensor<float, "[B,S(1)]@2x4", static_shape<8, 16>> x;
#ifndef AUTODDL_TWIN
  auto y = softmax(x);
#else
  auto y = softmax(to<"[B,S(0)]">(x));
#endif
}
