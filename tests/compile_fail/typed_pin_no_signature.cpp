// Compile-fail case: a typed layer pinned to a layout no signature of it takes (ReLU of partial
// sums); the message names the layer, the pin and the nearest valid pin. The twin pins that.
// expect: pinned_layouts_match_no_signature<.*"relu1".*"X\[S\(0\),P\]".*pin<\\"\[S\(0\),B\]\\">
#include "autoddl/models/typed.hpp"
using namespace autoddl;
#ifndef AUTODDL_TWIN
using relu_pin = pin<"[S(0),P]">;
#else
using relu_pin = pin<"[S(0),B]">;
#endif
using stage = typed_model<float, static_mesh<2, 4>, static_shape<16, 64, 32, 32>,
    layers::conv2d<64, 3>, layers::relu<relu_pin>, layers::max_pool<2>>;
int main() { return stage::valid ? 0 : 1; }
