#include <catch2/catch_test_macros.hpp>

#include "all_layouts.hpp"

using namespace autoddl;

TEST_CASE("every layout on 1-D to 3-D meshes survives print then parse", "[laws][notation]") {
  const mesh_shape meshes[] = {{2}, {3}, {8}, {2, 4}, {3, 5}, {2, 2, 2}};
  for (const auto& m : meshes)
    for (const auto& s : test::all_nd_sbp(m.size(), 3)) {
      layout l{s, m};
      INFO(to_string(l));
      CHECK(parse_layout(to_string(l)) == l);
      CHECK(parse_nd_sbp(to_string(s)) == s);
    }
}

TEST_CASE("parsing agrees at compile time and at run time", "[laws][notation][static]") {
  constexpr layout c = parse_layout("[S(2),P,B]@2x3x4");
  layout r = parse_layout(std::string("[S(2),P,B]@2x3x4"));
  CHECK(c == r);
  static_assert(to_string(parse_layout("[S(2),P,B]@2x3x4")) == "[S(2),P,B]@2x3x4");
}
