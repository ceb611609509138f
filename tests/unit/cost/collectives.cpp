#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "autoddl/cost/collective_cost.hpp"
#include "autoddl/cost/hardware.hpp"

using namespace autoddl;
using Catch::Approx;

namespace collectives_cases {

namespace {
// alpha = 10 us, beta = 1 GB/s: a byte costs 1 ns.
const link ln{1e-5, 1e9, "test"};
const link fast{1e-6, 100e9, "fast"};
const link slow{1e-5, 1e9, "slow"};
constexpr double a = 1e-5;
constexpr double ns = 1e-9;
}  // namespace

TEST_CASE("ring collectives cost steps * alpha + bytes / beta on axes of 2 to 64 devices", "[cost][collective]") {
  for (std::int64_t n : {2, 3, 5, 6, 7, 8, 12, 31, 64}) {
    INFO("n = " << n);
    const std::int64_t T = n * n * 1024;  // divisible by n^2
    CHECK(collective_time(collective::all_gather, n, T, ln) == Approx((n - 1) * a + double((n - 1) * n * 1024) * ns));
    CHECK(collective_time(collective::reduce_scatter, n, T, ln) ==
          Approx((n - 1) * a + double((n - 1) * n * 1024) * ns));
    CHECK(collective_time(collective::all_reduce, n, T, ln) ==
          Approx(2 * (n - 1) * a + double(2 * (n - 1) * n * 1024) * ns));
    CHECK(collective_time(collective::all_to_all, n, T, ln) == Approx((n - 1) * a + double((n - 1) * 1024) * ns));
    CHECK(collective_time(collective::local_slice, n, T, ln) == 0);
    CHECK(collective_time(collective::local_partial, n, T, ln) == 0);
    CHECK(collective_time(collective::none, n, T, ln) == 0);
  }
}

TEST_CASE("worked examples of collective times", "[cost][collective]") {
  // all-reduce of 1 MiB on 4 devices: 6 alpha + 1.5 MiB / beta
  CHECK(collective_time(collective::all_reduce, 4, 1 << 20, ln) == Approx(6e-5 + 1572864e-9));
  // all-gather of 3 MB on 3 devices: 2 alpha + 2 MB / beta
  CHECK(collective_time(collective::all_gather, 3, 3000000, ln) == Approx(2e-5 + 2e-3));
  // all-to-all of 4.9 MB on 7 devices: 6 alpha + 6/49 * 4.9 MB = 0.6 MB
  CHECK(collective_time(collective::all_to_all, 7, 4900000, ln) == Approx(6e-5 + 6e-4));
  // one device communicates nothing
  CHECK(collective_time(collective::all_reduce, 1, 1 << 20, ln) == 0);
}

TEST_CASE("1-D boxing is one collective priced on the axis link", "[cost][boxing]") {
  device_mesh m = uniform_mesh({6}, ln);
  // [S(0)] -> [B] on 6, shape [12,64] fp32: T = 3072 bytes, 5 steps, 5/6 * 3072 = 2560 bytes
  auto p = boxing_cost({{S(0)}, {B}, {6}, {12, 64}, 4}, m);
  REQUIRE(p.size() == 1);
  CHECK(p[0].op == collective::all_gather);
  CHECK(p.cost == Approx(5 * a + 2560 * ns));
  // [P] -> [S(0)] on 6: reduce-scatter, same bytes
  auto q = boxing_cost({{P}, {S(0)}, {6}, {12, 64}, 4}, m);
  REQUIRE(q.size() == 1);
  CHECK(q[0].op == collective::reduce_scatter);
  CHECK(q.cost == Approx(5 * a + 2560 * ns));
  // [B] -> [S(0)] is free
  CHECK(boxing_cost({{B}, {S(0)}, {6}, {12, 64}, 4}, m).cost == 0);
  // [S(0)] -> [S(1)] on 6: all-to-all, 5/36 * 3072 bytes (rounded down as the executor counts)
  auto r = boxing_cost({{S(0)}, {S(1)}, {6}, {36, 36}, 4}, m);
  REQUIRE(r.size() == 1);
  CHECK(r[0].op == collective::all_to_all);
  CHECK(r.bytes_per_device() == 5 * 36 * 36 * 4 / 36);
  CHECK(r.cost == Approx(5 * a + 720 * ns));
}

TEST_CASE("[P,P] -> [B,B] on 2x4 is the hierarchical all-reduce, fast axis first", "[cost][boxing]") {
  device_mesh m{{2, 4}, {slow, fast}};
  const std::int64_t T = 1024 * 1024 * 4;  // [1024,1024] fp32
  auto p = boxing_cost({{P, P}, {B, B}, {2, 4}, {1024, 1024}, 4}, m);
  REQUIRE(p.size() == 3);
  CHECK((p[0].axis == 1 && p[0].op == collective::reduce_scatter));
  CHECK((p[1].axis == 0 && p[1].op == collective::all_reduce && p[1].group_bytes == T / 4));
  CHECK((p[2].axis == 1 && p[2].op == collective::all_gather));
  const double rs = 3 * 1e-6 + 0.75 * T / 100e9;
  const double ar = 2 * 1e-5 + 1.0 * (T / 4) / 1e9;
  CHECK(p.cost == Approx(rs + ar + rs));
  CHECK(path_time(p, m) == Approx(p.cost));
  // flat all-reduce on the slow link for comparison: strictly more expensive
  CHECK(p.cost < collective_time(collective::all_reduce, 8, T, slow));
}

TEST_CASE("a path searched for bf16 and run on fp32 gradient sums moves and costs the fp32 bytes", "[cost][boxing]") {
  device_mesh m{{2, 4}, {slow, fast}};
  const boxing_path half = boxing_cost({{P, P}, {B, B}, {2, 4}, {1024, 1024}, 2}, m);
  const boxing_path wide = with_element_bytes(half, 4, m);
  const std::int64_t T = 1024 * 1024 * 4;  // the fp32 tensor
  REQUIRE(wide.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK((wide[i].axis == half[i].axis && wide[i].op == half[i].op && wide[i].elem_bytes == 4));
    CHECK(wide[i].group_bytes == 2 * half[i].group_bytes);
  }
  // reduce-scatter and all-gather on the 4 fast devices (3/4 T each), all-reduce of T/4 on the 2 slow
  CHECK(wide.bytes_per_device() == 3 * T / 4 + T / 4 + 3 * T / 4);
  CHECK(wide.bytes_per_device() == 2 * half.bytes_per_device());
  const double rs = 3 * 1e-6 + 0.75 * T / 100e9, ar = 2 * 1e-5 + 1.0 * (T / 4) / 1e9;
  CHECK(wide.cost == Approx(rs + ar + rs));
}

TEST_CASE("when axis 0 is the fast one the hierarchy turns round", "[cost][boxing]") {
  device_mesh m{{2, 4}, {fast, slow}};
  const std::int64_t T = 256 * 256 * 4;
  auto p = boxing_cost({{P, P}, {B, B}, {2, 4}, {256, 256}, 4}, m);
  REQUIRE(p.size() == 3);
  CHECK((p[0].axis == 0 && p[0].op == collective::reduce_scatter));
  CHECK((p[1].axis == 1 && p[1].op == collective::all_reduce && p[1].group_bytes == T / 2));
  CHECK((p[2].axis == 0 && p[2].op == collective::all_gather));
  const double rs = 1 * 1e-6 + 0.5 * T / 100e9;
  const double ar = 6 * 1e-5 + 1.5 * (T / 2) / 1e9;
  CHECK(p.cost == Approx(rs + ar + rs));
}

TEST_CASE("2-D boxing on non-power-of-two meshes up to 64 devices", "[cost][boxing]") {
  {  // [S(0),B] -> [B,B] on 3x5: all-gather on axis 0 over the whole tensor
    device_mesh m{{3, 5}, {slow, fast}};
    const std::int64_t T = 60 * 8 * 4;
    auto p = boxing_cost({{S(0), B}, {B, B}, {3, 5}, {60, 8}, 4}, m);
    REQUIRE(p.size() == 1);
    CHECK(p.cost == Approx(2 * 1e-5 + (2.0 / 3) * T / 1e9));
  }
  {  // [B,S(1)] -> [B,B] on 4x16: all-gather on axis 1
    device_mesh m{{4, 16}, {slow, fast}};
    const std::int64_t T = 64 * 64 * 2;
    auto p = boxing_cost({{B, S(1)}, {B, B}, {4, 16}, {64, 64}, 2}, m);
    REQUIRE(p.size() == 1);
    CHECK(p[0].group == 16);
    CHECK(p.cost == Approx(15 * 1e-6 + (15.0 / 16) * T / 100e9));
  }
  {  // [S(0),P] -> [S(0),B] on 3x5: all-reduce on axis 1 of a third of the tensor
    device_mesh m{{3, 5}, {slow, fast}};
    const std::int64_t T = 30 * 10 * 4 / 3;
    auto p = boxing_cost({{S(0), P}, {S(0), B}, {3, 5}, {30, 10}, 4}, m);
    REQUIRE(p.size() == 1);
    CHECK(p[0].op == collective::all_reduce);
    CHECK(p.cost == Approx(8 * 1e-6 + (8.0 / 5) * T / 100e9));
  }
}

TEST_CASE("pricing a boxing on another mesh's links is refused", "[cost][boxing]") {
  device_mesh m = uniform_mesh({2, 4}, ln);
  CHECK_THROWS_AS(boxing_cost({{P, P}, {B, B}, {4, 2}, {64, 64}, 4}, m), layout_error);
}

TEST_CASE("gamma prices the bytes each device reduces in reduce-scatter and all-reduce", "[cost][collective]") {
  autoddl::link g = ln;
  g.gamma = 2e-9;  // 2 ns per byte reduced
  const std::int64_t T = 5 * 5 * 1024;
  // n = 5: 4/5 * T reduced by reduce-scatter and by all-reduce, nothing by the others
  CHECK(reduced_bytes(collective::reduce_scatter, 5, T) == 4 * 5 * 1024);
  CHECK(reduced_bytes(collective::all_gather, 5, T) == 0);
  CHECK(collective_time(collective::reduce_scatter, 5, T, g) == Approx(4 * a + 4 * 5 * 1024 * (ns + 2e-9)));
  CHECK(collective_time(collective::all_reduce, 5, T, g) == Approx(8 * a + 8 * 5 * 1024 * ns + 4 * 5 * 1024 * 2e-9));
  CHECK(collective_time(collective::all_gather, 5, T, g) == collective_time(collective::all_gather, 5, T, ln));
  g.gamma = -1;
  CHECK_THROWS_AS(checked(g), error);
}

TEST_CASE("a link's second regime prices the bytes of a buffer beyond large_bytes at beta_large", "[cost][collective]") {
  // 1 ns/B sent and 1 ns/B reduced up to 1 MB of buffer, 4 ns/B and 3 ns/B beyond it
  autoddl::link two{1e-5, 1e9, "two", 1e-9, 1e6, 0.25e9, 3e-9};
  CHECK(two.two_regimes());
  CHECK_FALSE(ln.two_regimes());
  // reduce-scatter of 4 MB on 4 devices: 3 MB sent and reduced, a quarter in the first regime
  CHECK(collective_time(collective::reduce_scatter, 4, 4000000, two) ==
        Approx(3e-5 + 0.25 * (3e-3 + 3e-3) + 0.75 * (12e-3 + 9e-3)));
  // all-to-all of 8 MB on 4 devices: 1.5 MB sent, 1/8 of it at 1 ns/B, 7/8 at 4 ns/B
  CHECK(collective_time(collective::all_to_all, 4, 8000000, two) == Approx(3e-5 + 1.5e6 * (1e-9 / 8 + 4e-9 * 7 / 8)));
  // at and below large_bytes: the one-regime link with the same alpha, beta, gamma, exactly
  autoddl::link one{1e-5, 1e9, "two", 1e-9};
  for (collective c : {collective::all_gather, collective::reduce_scatter, collective::all_reduce, collective::all_to_all})
    for (std::int64_t T : {16, 4096, 65536, 1000000}) CHECK(collective_time(c, 4, T, two) == collective_time(c, 4, T, one));
  // continuous and increasing in T across large_bytes, for any beta_large
  for (double bl : {0.25e9, 4e9}) {
    two.beta_large = bl;
    double prev = 0;
    for (std::int64_t T = 999936; T <= 1000064; T += 16) {
      const double t = collective_time(collective::all_reduce, 4, T, two);
      CHECK(t > prev);
      prev = t;
    }
    CHECK(collective_time(collective::all_reduce, 4, 1000016, two) ==
          Approx(collective_time(collective::all_reduce, 4, 1000000, two)).epsilon(1e-4));
  }
  CHECK_NOTHROW(checked(two));
  two.beta_large = 0;
  CHECK_THROWS_WITH(checked(two), Catch::Matchers::ContainsSubstring("beta_large"));
  two.beta_large = 1e9;
  two.gamma_large = -1;
  CHECK_THROWS_WITH(checked(two), Catch::Matchers::ContainsSubstring("gamma_large"));
  two.large_bytes = -1;
  CHECK_THROWS_WITH(checked(two), Catch::Matchers::ContainsSubstring("large_bytes"));
  // a one-regime link does not look at beta_large
  CHECK_NOTHROW(checked(one));
}

}  // namespace collectives_cases
