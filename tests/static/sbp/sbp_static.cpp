// SBP vocabulary, checked entirely by the compiler.
#include "autoddl/cost/boxing_path.hpp"
#include "autoddl/sbp.hpp"

namespace {
using namespace autoddl;

// static == dynamic: compile-time values are the runtime values they name
static_assert(sbp(split<1>{}) == S(1));
static_assert(sbp(broadcast{}) == B && sbp(partial<sum>{}) == P);
static_assert(StaticSbp<split<0>> && StaticSbp<broadcast> && !StaticSbp<sbp>);
static_assert(SbpValue<sbp> && SbpValue<const split<3>&>);
static_assert(nd<split<0>, broadcast>::value == parse_nd_sbp("[S(0),B]"));
static_assert(static_mesh<2, 4>::value == parse_mesh("2x4"));
static_assert(static_shape<12, dyn>::value == tensor_shape{12, dyn});

// the notation round-trips in constant expressions
static_assert(to_string(parse_layout("[S(0),B]@2x4")) == "[S(0),B]@2x4");
static_assert(to_string(parse_nd_sbp("[P,S(3),B]")) == "[P,S(3),B]");
static_assert(parse_mesh("2x2x2").devices() == 8);

// shards
static_assert(local_shape({12, 64}, parse_layout("[S(0),S(1)]@2x4")) == tensor_shape{6, 16});
static_assert(divisibility_problem({12, 64}, parse_layout("[S(0),B]@8x1")).size() > 0);

// boxing table (sbp/boxing.hpp)
static_assert(classify(S(0), B) == collective::all_gather);
static_assert(classify(P, S(0)) == collective::reduce_scatter);
static_assert(bytes_factor(collective::all_reduce, 8).of(800) == 1400);
static_assert(bytes_factor(collective::all_to_all, 4).of(1600) == 300);

// nd boxing priced in a constant expression: [P,P] -> [B,B] on 2x4, 16 KiB
constexpr auto hier = cheapest_boxing({{P, P}, {B, B}, {2, 4}, {64, 64}, 4});
static_assert(hier.size() == 3 && hier.bytes_per_device() == 28672);
static_assert(hier[0].op == collective::reduce_scatter && hier[1].op == collective::all_reduce);
}  // namespace

int main() {}
