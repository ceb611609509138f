// libFuzzer target: parse_nd_sbp ("[S(0),B]"). An accepted nd-SBP prints in the notation and
// parses back to the same value (one notation for printing and parsing).
#include <cstddef>
#include <cstdint>
#include <string>

#include "autoddl/sbp/nd_sbp.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace autoddl;
  const std::string_view text = fuzz::as_text(data, size);
  const auto v = fuzz::parse_or_refuse([&] { return parse_nd_sbp(text); }, text);
  if (!v) return 0;
  fuzz::expect(v->size() >= 1 && v->size() <= max_mesh_axes, "an nd-SBP has 1 to max_mesh_axes entries", text);
  const std::string printed = to_string(*v);
  fuzz::expect(fuzz::must_succeed([&] { return parse_nd_sbp(printed); }, "the printed nd-SBP parses", text) == *v,
               "parse_nd_sbp(to_string(v)) == v", text);
  return 0;
}
