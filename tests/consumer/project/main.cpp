// Uses the installed headers: parse, price and print a boxing in the notation.
#include <autoddl/autoddl.hpp>

#include <cstdio>

int main() {
  constexpr auto l = autoddl::parse_layout("[S(0),B]@2x4");
  static_assert(autoddl::to_string(l) == "[S(0),B]@2x4");
  auto p = autoddl::cheapest_boxing({autoddl::nd_sbp{autoddl::P, autoddl::P}, autoddl::nd_sbp{autoddl::B, autoddl::B},
                                     autoddl::mesh_shape{2, 4}, autoddl::tensor_shape{64, 64}, 4});
  std::printf("%s: %d steps, %lld bytes per device\n", autoddl::to_string(l).c_str(), p.size(),
              static_cast<long long>(p.bytes_per_device()));
  return p.size() == 3 ? 0 : 1;
}
