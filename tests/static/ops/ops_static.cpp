// Operator signature rules, checked entirely by the compiler: the same constexpr functions the
// runtime enumeration calls.
#include "autoddl/ops.hpp"

namespace {
using namespace autoddl;

// matmul, one axis: the six rules of the OneFlow table, and what is refused
static_assert(matmul_axis(S(0), B, 2) == S(0));
static_assert(matmul_axis(B, S(1), 2) == S(1));
static_assert(matmul_axis(S(1), S(0), 2) == P);
static_assert(matmul_axis(P, B, 2) == P && matmul_axis(B, P, 2) == P && matmul_axis(B, B, 2) == B);
static_assert(!matmul_axis(P, P, 2) && !matmul_axis(S(0), S(0), 2) && !matmul_axis(S(1), B, 2));
static_assert(matmul_axis(S(1), B, 3) == S(1));                 // a sequence dim is a row dim
static_assert(matmul_axis(B, S(0), 2, /*transpose_w=*/true) == S(1));  // tied head: W [vocab, hidden]

// n-D: per-axis rules side by side, also in the notation
static_assert(matmul_output(parse_nd_sbp("[S(0),B]"), parse_nd_sbp("[B,S(1)]"), 2) == parse_nd_sbp("[S(0),S(1)]"));
static_assert(!matmul_output(parse_nd_sbp("[S(0),P]"), parse_nd_sbp("[B,P]"), 2));
static_assert(linear_output(nd_sbp{S(0), B}, nd_sbp{B, S(1)}, nd_sbp{B, S(0)}, 2) == nd_sbp{S(0), S(1)});
static_assert(!linear_output(nd_sbp{S(0), B}, nd_sbp{B, S(1)}, nd_sbp{B, B}, 2));  // bias must follow Y
static_assert(batched_matmul_output(nd_sbp{S(0)}, nd_sbp{S(0)}, 3) == nd_sbp{S(0)});

// nonlinear ops never take P
static_assert(!pointwise_axis(P) && !rowwise_axis(P, 3) && !max_pool_axis(P, false));
static_assert(!attention_axis(P, P, P) && !cross_entropy_axis(P, B, 3) && !embedding_axis(P, B, 2));
static_assert(!rowwise_axis(S(2), 3) && rowwise_axis(S(1), 3) == S(1));

// conv: channel splits exact, spatial only for pointwise windows
static_assert(conv2d_axis(S(1), S(1), false) == P && conv2d_axis(B, S(0), false) == S(1));
static_assert(!conv2d_axis(S(2), B, false) && conv2d_axis(S(2), B, pointwise_window(1, 1, 0)) == S(2));

// vocab-parallel embedding and loss, reshape
static_assert(embedding_axis(B, S(0), 2) == P && embedding_axis(B, S(1), 2) == S(2));
static_assert(cross_entropy_axis(S(2), B, 3) == P && !cross_entropy_axis(S(2), S(2), 3));
static_assert(reshape_axis(S(1), tensor_shape{8, 512, 7, 7}, tensor_shape{8, 25088}) == S(1));
static_assert(!reshape_axis(S(2), tensor_shape{8, 512, 7, 7}, tensor_shape{8, 25088}));

// backward layouts
static_assert(dual(parse_nd_sbp("[S(0),B,P]")) == parse_nd_sbp("[S(0),P,B]"));
static_assert(dual(dual(parse_nd_sbp("[B,S(2)]"))) == parse_nd_sbp("[B,S(2)]"));
static_assert(attention_exact(nd_sbp{S(2), B}, nd_sbp{S(2), B}, mesh_shape{4, 2}, 8, 8) &&
              !attention_exact(nd_sbp{S(2), S(2)}, nd_sbp{S(2), S(2)}, mesh_shape{4, 2}, 4, 4));
// grouped-query: 8 query heads, 2 key/value heads on 2x4. k split on the outer of q's axes
// finds its groups; on the inner it does not; k may not split more ways than it has heads.
static_assert(attention_exact(nd_sbp{S(2), S(2)}, nd_sbp{S(2), B}, mesh_shape{2, 4}, 8, 2));
static_assert(!attention_exact(nd_sbp{S(2), S(2)}, nd_sbp{B, S(2)}, mesh_shape{2, 4}, 8, 2));
static_assert(!attention_exact(nd_sbp{S(2), S(2)}, nd_sbp{S(2), S(2)}, mesh_shape{2, 4}, 8, 2));
static_assert(attention_exact(nd_sbp{B, S(2)}, nd_sbp{B, B}, mesh_shape{2, 4}, 8, 2));
// the new ops' per-axis rules: mul takes one partial factor; rmsnorm splits its last dim only
// in whole groups; rotary passes everything through (P too: a rotation is linear)
static_assert(mul_axis(P, B) == P && mul_axis(B, P) == P && !mul_axis(P, P) && !mul_axis(S(0), S(1)));
static_assert(rmsnorm_axis(S(1), B, 3, 1) == S(1) && !rmsnorm_axis(S(2), B, 3, 1) && rmsnorm_axis(S(2), B, 3, 4) == S(2));
static_assert(!rmsnorm_axis(P, B, 3, 1) && !rmsnorm_axis(S(0), S(0), 3, 1));
static_assert(rotary_axis(P) == P && rotary_axis(S(2)) == S(2));
static_assert(attention_axis(S(2), B, B, true) == S(2) && !attention_axis(S(2), B, B, false));
}  // namespace

int main() { return 0; }
