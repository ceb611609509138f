#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "autoddl/sbp.hpp"

using namespace autoddl;
using Catch::Matchers::ContainsSubstring;

TEST_CASE("single SBP values print and parse in the notation", "[sbp][notation]") {
  CHECK(to_string(S(0)) == "S(0)");
  CHECK(to_string(S(7)) == "S(7)");
  CHECK(to_string(B) == "B");
  CHECK(to_string(P) == "P");
  CHECK(parse_sbp("S(3)") == S(3));
  CHECK(parse_sbp(" B ") == B);
  CHECK(parse_sbp("P") == P);
}

TEST_CASE("compile-time SBP values convert to the runtime value they stand for", "[sbp][static]") {
  sbp a = split<2>{};
  sbp b = broadcast{};
  sbp c = partial<>{};
  CHECK(a == S(2));
  CHECK(b == B);
  CHECK(c == P);
  CHECK(to_string(split<1>{}) == "S(1)");
  CHECK(nd<split<0>, broadcast>::value == nd_sbp{S(0), B});
}

TEST_CASE("malformed SBP text is rejected with its position", "[sbp][notation][errors]") {
  CHECK_THROWS_WITH(parse_sbp("Q"), ContainsSubstring("expected S(d), B or P at position 0"));
  CHECK_THROWS_WITH(parse_sbp("S(9)"), ContainsSubstring("split dim 9 is out of range"));
  CHECK_THROWS_WITH(parse_sbp("S0"), ContainsSubstring("expected '(' after S"));
  CHECK_THROWS_WITH(parse_sbp("S(1"), ContainsSubstring("expected ')'"));
  CHECK_THROWS_WITH(parse_sbp("B B"), ContainsSubstring("unexpected text"));
  CHECK_THROWS_AS(parse_sbp(""), parse_error);
}

TEST_CASE("nd-SBPs, meshes and layouts print and parse", "[sbp][notation]") {
  CHECK(to_string(nd_sbp{S(0), B}) == "[S(0),B]");
  CHECK(parse_nd_sbp("[ S(1) , P ]") == nd_sbp{S(1), P});
  CHECK(to_string(parse_mesh("2x2x2")) == "2x2x2");
  CHECK(parse_mesh("8").devices() == 8);
  CHECK(to_string(parse_layout("[S(0),B]@2x4")) == "[S(0),B]@2x4");
  CHECK(to_string(parse_layout("[P]")) == "[P]");
  CHECK_FALSE(parse_layout("[P]").has_mesh());
}

TEST_CASE("malformed layouts name the problem", "[sbp][notation][errors]") {
  CHECK_THROWS_WITH(parse_nd_sbp("[]"), ContainsSubstring("at least one entry"));
  CHECK_THROWS_WITH(parse_nd_sbp("[B,B,B,B,B]"), ContainsSubstring("at most 4"));
  CHECK_THROWS_WITH(parse_nd_sbp("S(0),B]"), ContainsSubstring("expected '['"));
  CHECK_THROWS_WITH(parse_mesh("2x0"), ContainsSubstring("positive device count"));
  CHECK_THROWS_WITH(parse_mesh("2y4"), ContainsSubstring("unexpected text after a mesh"));
  CHECK_THROWS_WITH(parse_layout("[S(0),B]@8"), ContainsSubstring("has 2 SBP entries for a mesh of 1 axes"));
  CHECK_THROWS_AS(parse_layout("[S(0)]@"), parse_error);
}

TEST_CASE("a mesh of more devices than an int64 product holds is refused (fuzz regression)", "[sbp][notation][errors]") {
  // 1372809x89x096412x2800967 once overflowed devices() (tests/fuzz/regressions/mesh/device-count-overflows)
  CHECK_THROWS_WITH(parse_mesh("1372809x89x096412x2800967"), ContainsSubstring("devices is too large"));
  CHECK_THROWS_WITH(parse_mesh("4096x4097"), ContainsSubstring("a mesh of 16781312 devices is too large"));
  CHECK_THROWS_AS(parse_layout("[S(0),S(0)]@65536x65536"), parse_error);
  CHECK(parse_mesh("4096x4096").devices() == 16777216);  // the most devices a mesh may have
  CHECK(parse_mesh("16777216").devices() == 16777216);
}
