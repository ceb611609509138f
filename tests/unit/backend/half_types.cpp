// bf16 and fp16 against a reference rounding written here in double arithmetic (frexp,
// ldexp, nearbyint in the default to-nearest-even mode): every 16-bit pattern decoded, random
// floats of every exponent, ties, subnormals, overflow to infinity, NaN; then cpu_device
// primitives in the 16-bit types against their float twins rounded once.
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>

#include "autoddl/backend/cpu.hpp"

using namespace autoddl;

namespace {
/// A binary floating-point format: p significant bits, exponents emin..emax of normal numbers.
struct format {
  int p, emin, emax;
};
template <class T>
constexpr format format_of() {
  if constexpr (std::is_same_v<T, bf16>) return {8, -126, 127};
  else return {11, -14, 15};
}

/// v rounded to the format, to nearest with ties to even; past the largest finite to +-inf.
double reference_round(double v, format f) {
  if (std::isnan(v) || std::isinf(v) || v == 0) return v;
  int e = 0;
  std::frexp(v, &e);  // |v| = m 2^e, m in [0.5, 1): v's exponent is e - 1
  const int exponent = std::max(e - 1, f.emin);
  const double ulp = std::ldexp(1.0, exponent - (f.p - 1));
  const double q = std::nearbyint(v / ulp) * ulp;  // v / ulp is exact: a power-of-two scaling
  if (std::abs(q) >= std::ldexp(1.0, f.emax + 1)) return std::copysign(std::numeric_limits<double>::infinity(), v);
  return q;
}
/// The value of 16-bit pattern h of the format (1 sign bit, 15 - (p - 1) exponent bits).
double reference_decode(std::uint16_t h, format f) {
  const int mant_bits = f.p - 1, bias = f.emax;
  const int e = (h >> mant_bits) & ((1 << (15 - mant_bits)) - 1), m = h & ((1 << mant_bits) - 1);
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == (1 << (15 - mant_bits)) - 1) return m ? std::numeric_limits<double>::quiet_NaN() : s * INFINITY;
  if (e == 0) return s * std::ldexp(double(m), f.emin - mant_bits);
  return s * std::ldexp(double(m + (1 << mant_bits)), e - bias - mant_bits);
}
bool same(double a, double b) { return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b)); }
}  // namespace

TEMPLATE_TEST_CASE("Every 16-bit pattern decodes to its value and encodes back to itself", "[half][conversion]", bf16,
                   fp16) {
  REQUIRE(std::fegetround() == FE_TONEAREST);
  const format f = format_of<TestType>();
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const double want = reference_decode(std::uint16_t(h), f), got = float(TestType::from_bits(std::uint16_t(h)));
    INFO("pattern 0x" << std::hex << h);
    REQUIRE(same(got, want));
    if (!std::isnan(want)) REQUIRE(TestType(float(TestType::from_bits(std::uint16_t(h)))).bits == h);
  }
}

TEMPLATE_TEST_CASE("Rounding from float is to nearest, ties to even, on floats of every exponent", "[half][conversion]",
                   bf16, fp16) {
  const format f = format_of<TestType>();
  std::mt19937 g(20261207);  // seed printed by INFO on failure
  for (int i = 0; i < 400000; ++i) {
    const std::uint32_t bits = g();
    float x;
    std::memcpy(&x, &bits, 4);
    INFO("seed 20261207, float bits 0x" << std::hex << bits);
    REQUIRE(same(float(TestType(x)), reference_round(double(x), f)));
  }
  // every tie: the midpoint between each pair of neighbouring finite values of the format, and
  // a float either side of it
  for (std::uint32_t h = 0; h < 0x7fff; ++h) {
    const double lo = reference_decode(std::uint16_t(h), f), hi = reference_decode(std::uint16_t(h + 1), f);
    if (std::isnan(lo) || std::isnan(hi)) continue;
    const double hi_value = std::isinf(hi) ? std::ldexp(1.0, f.emax + 1) : hi;  // the midpoint to infinity's
    const auto mid = float((lo + hi_value) / 2);  // exact: the formats have at most 11 bits
    INFO("between patterns 0x" << std::hex << h << " and 0x" << h + 1);
    REQUIRE(same(float(TestType(mid)), reference_round(double(mid), f)));
    REQUIRE(TestType(mid).bits == ((h & 1) ? h + 1 : h));  // ties to the even pattern
    REQUIRE(same(float(TestType(-mid)), -reference_round(double(mid), f)));
    REQUIRE(TestType(std::nextafter(mid, 0.0f)).bits == h);
    REQUIRE(TestType(std::nextafter(mid, INFINITY)).bits == h + 1);
  }
}

TEST_CASE("Worked cases of the two roundings", "[half][conversion]") {
  CHECK(float(bf16(1.00390625f)) == 1.0f);           // 1 + 2^-8: a tie, to the even 1
  CHECK(float(bf16(1.01171875f)) == 1.015625f);      // 1 + 3 2^-8: a tie, up to the even 1 + 2^-6
  CHECK(float(bf16(0x1.fep127f)) == 0x1.fep127f);    // the largest finite
  CHECK(std::isinf(float(bf16(3.4e38f))));           // past its midpoint to 2^128
  CHECK(float(bf16(0x1p-133f)) == 0x1p-133f);        // the smallest subnormal
  CHECK(float(bf16(0x1p-134f)) == 0.0f);             // half of it: a tie, to the even 0
  CHECK(float(bf16(0x1.8p-134f)) == 0x1p-133f);
  CHECK(float(fp16(65504.0f)) == 65504.0f);           // the largest finite
  CHECK(float(fp16(65519.99f)) == 65504.0f);
  CHECK(std::isinf(float(fp16(65520.0f))));           // the midpoint to 2^16 goes up: 65504 is odd
  CHECK(float(fp16(0x1p-24f)) == 0x1p-24f);           // the smallest subnormal
  CHECK(float(fp16(0x1p-25f)) == 0.0f);               // half of it: a tie, to the even 0
  CHECK(float(fp16(0x1.8p-25f)) == 0x1p-24f);
  CHECK(float(fp16(0x1.8p-24f)) == 0x1p-23f);         // 1.5 units: a tie, to the even 2
  CHECK(std::signbit(float(fp16(-0x1p-26f))));        // underflow keeps the sign
  CHECK(std::isnan(float(bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(float(fp16(std::numeric_limits<float>::signaling_NaN()))));
  CHECK(std::isnan(float(bf16(std::bit_cast<float>(0x7f800001u)))));  // a NaN whose payload is in the low bits
  CHECK(std::isinf(float(fp16(INFINITY))));
  CHECK(float(bf16(-INFINITY)) == -INFINITY);
  // from double, rounded once: 1 + 2^-8 + 2^-40 is above the tie, though float(x) is the tie
  CHECK(float(bf16(1.0 + 0x1p-8 + 0x1p-40)) == 1.0078125f);
  CHECK(float(fp16(1.0 + 0x1p-11 + 0x1p-40)) == float(1.0 + 0x1p-10));
  CHECK(float(bf16(std::int64_t(257))) == 256.0f);  // a tie between 256 and 258, to the even 256
}

namespace {
template <class T>
std::vector<T> rounded(const std::vector<float>& x) {
  return {x.begin(), x.end()};
}
/// Whether a == b or they are neighbouring values of T (a float result near a tie may round either way).
template <class T>
bool within_one_step(T a, T b) {
  const int d = int(a.bits) - int(b.bits);
  return (a.bits & 0x8000) == (b.bits & 0x8000) && d >= -1 && d <= 1;
}
}  // namespace

TEMPLATE_TEST_CASE("cpu_device GEMMs, row statistics and updates in 16 bits are the float computation rounded once",
                   "[half][cpu]", bf16, fp16) {
  cpu_device dev;
  std::mt19937 g(7);
  std::uniform_real_distribution<float> u(-1, 1);
  const auto random = [&](std::size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = float(TestType(u(g)));  // values the 16-bit type holds
    return v;
  };
  SECTION("a GEMM of 64 products sums in float") {
    const gemm_desc d{false, true, 5, 7, 64, 64, 64, 7};
    std::vector<float> a = random(5 * 64), b = random(7 * 64), c(5 * 7);
    std::vector<TestType> ah = rounded<TestType>(a), bh = rounded<TestType>(b), ch(c.size());
    dev.gemm<TestType>(d, TestType(1), ah, bh, TestType(0), ch);
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 7; ++j) {
        double want = 0;
        for (int p = 0; p < 64; ++p) want += double(a[std::size_t(i * 64 + p)]) * double(b[std::size_t(j * 64 + p)]);
        REQUIRE(within_one_step(ch[std::size_t(i * 7 + j)], TestType(want)));
      }
  }
  SECTION("RMSNorm keeps its statistic in float") {
    std::vector<float> x = random(3 * 40), gamma = random(40);
    std::vector<TestType> xh = rounded<TestType>(x), gh = rounded<TestType>(gamma), y(x.size());
    std::vector<float> rstd(3);
    dev.rmsnorm_fwd<TestType>(3, 40, xh, gh, 1e-6, y, rstd);
    for (int r = 0; r < 3; ++r) {
      double ms = 0;
      for (int c = 0; c < 40; ++c) ms += double(x[std::size_t(r * 40 + c)]) * x[std::size_t(r * 40 + c)];
      const double want_rstd = 1 / std::sqrt(ms / 40 + 1e-6);
      REQUIRE(std::abs(rstd[std::size_t(r)] - want_rstd) < 1e-5 * want_rstd);  // float, not 16-bit, precision
      for (int c = 0; c < 40; ++c)
        REQUIRE(within_one_step(y[std::size_t(r * 40 + c)],
                                TestType(double(x[std::size_t(r * 40 + c)]) * want_rstd * gamma[std::size_t(c)])));
    }
  }
  SECTION("a softmax cross-entropy over 300 columns, its loss in float") {
    std::vector<float> x = random(2 * 300);
    std::vector<TestType> xh = rounded<TestType>(x);
    std::vector<std::int64_t> labels{3, 299};
    std::vector<float> m(2), stats(4), out(1);
    dev.row_max<TestType>(2, 300, xh, m);
    dev.xent_stats<TestType>(2, 300, xh, labels, 0, m, stats);
    dev.xent_loss(2, std::span<const float>(m), std::span<const float>(stats), 1.0f / 3, std::span<float>(out));
    double want = 0;  // in double, of the 16-bit logits, scaled by a 1/3 that no 16-bit type holds
    for (int r = 0; r < 2; ++r) {
      double s = 0;
      for (int c = 0; c < 300; ++c) s += std::exp(double(xh[std::size_t(r * 300 + c)]));
      want += std::log(s) - double(xh[std::size_t(r * 300 + labels[std::size_t(r)])]);
    }
    want /= 3;
    REQUIRE(std::abs(out[0] - want) <= 1e-5 * std::abs(want));  // float's precision, not the 16-bit type's
    REQUIRE(std::abs(double(TestType(float(want))) - want) > 1e-5 * std::abs(want));  // which would miss it
  }
}
