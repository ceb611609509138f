// Typed layers, checked by the compiler: result layouts follow the signature rules, with
// static, dynamic and mixed shapes (CuTe's habit of repeating each case for each binding time).
#include <type_traits>

#include "autoddl/cost/boxing_path.hpp"
#include "autoddl/ops/typed.hpp"

namespace {
using namespace autoddl;

template <class T, class U>
inline constexpr bool same = std::is_same_v<T, U>;

// Megatron's MLP pair on the innermost axis: column-parallel then row-parallel.
using x_t = dtensor<float, "[S(0),B]@2x4", static_shape<128, 64>>;
using w1_t = dtensor<float, "[B,S(1)]@2x4", static_shape<64, 256>>;
using w2_t = dtensor<float, "[B,S(0)]@2x4", static_shape<256, 64>>;
using h_t = decltype(matmul(x_t{}, w1_t{}));
static_assert(same<h_t, dtensor<float, "[S(0),S(1)]@2x4", static_shape<128, 256>>>);
using a_t = decltype(gelu(h_t{}));
static_assert(same<a_t, h_t>);
using y_t = decltype(matmul(a_t{}, w2_t{}));
static_assert(y_t::sbp == nd_sbp{S(0), P});  // row-parallel: partial sums on axis 1

// mixed: a dynamic batch keeps its dim dynamic through the layer
using xd_t = dtensor<float, "[S(0),B]@2x4", static_shape<dyn, 64>>;
static_assert(same<decltype(matmul(xd_t({16, 64}), w1_t{})), dtensor<float, "[S(0),S(1)]@2x4", static_shape<dyn, 256>>>);
// dynamic mesh: the layout names none
using xm_t = dtensor<float, "[S(0),B]", static_shape<dyn, dyn>>;
using wm_t = dtensor<float, "[B,S(1)]", static_shape<dyn, dyn>>;
static_assert(decltype(matmul(xm_t({8, 8}, {2, 2}), wm_t({8, 8}, {2, 2})))::sbp == nd_sbp{S(0), S(1)});

// batched (rank-3) X keeps its leading dims
using xb_t = dtensor<float, "[S(0)]@4", static_shape<8, 16, 32>>;
using wb_t = dtensor<float, "[B]@4", static_shape<32, 8>>;
static_assert(same<decltype(matmul(xb_t{}, wb_t{})), dtensor<float, "[S(0)]@4", static_shape<8, 16, 8>>>);

// the rules themselves
static_assert(matmul_output({S(1)}, {S(0)}, 2) == nd_sbp{P});
static_assert(!matmul_output({S(1)}, {B}, 2));
static_assert(typed_rules::matmul_weight_fix({S(1), B}, {B, S(1)}, 2) == nd_sbp{S(0), S(1)});
static_assert(typed_rules::bias_layout({S(0), S(1)}, 2) == nd_sbp{B, S(0)});

// a typed conversion is priced in a constant expression: the row-parallel output all-reduced
constexpr auto y_to_b = boxing_of<"[S(0),B]">(y_t{});
constexpr auto path = cheapest_boxing({y_to_b.from.sbp, y_to_b.to.sbp, y_to_b.from.mesh, y_to_b.shape, 4});
static_assert(path.size() == 1 && path[0].op == collective::all_reduce);
static_assert(path.bytes_per_device() == 2 * 3 * (64 * 64 * 4) / 4);  // 2(n-1)/n * T, T = half of 128x64 fp32
}  // namespace

int main() {}
