// Compile-fail case: grouped-query attention whose q, k, v linears are pinned to a batch split
// of X with W split by columns on the same axis, which no linear signature takes (a device would
// hold a batch slice and a column slice). The message names the op, both pinned layouts (a
// pinned parameter too) and the nearest valid pin. The twin pins column parallel: X whole.
// expect: pinned_layouts_match_no_signature<.*"attn\.q".*"X\[S\(0\)\] W\[S\(1\)\]".*pin<
#include "autoddl/models/typed.hpp"
using namespace autoddl;
#ifndef AUTODDL_TWIN
using qkv_pin = pin<"[S(0)]", "[S(1)]">;
#else
using qkv_pin = pin<"[B]", "[S(1)]">;
#endif
using attention = typed_model<float, static_mesh<2>, static_shape<4, 16, 64>,
    layers::gqa_attention<4, 2, true, qkv_pin>, layers::cross_entropy<>>;
int main() { return attention::valid ? 0 : 1; }
