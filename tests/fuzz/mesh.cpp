// libFuzzer target: parse_mesh ("8", "2x4", "2x2x2"). An accepted mesh has 1 to max_mesh_axes
// axes of at least one device, a device count that is their product (no overflow), and prints
// back to the same value.
#include <cstddef>
#include <cstdint>
#include <string>

#include "autoddl/sbp/mesh_shape.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace autoddl;
  const std::string_view text = fuzz::as_text(data, size);
  const auto m = fuzz::parse_or_refuse([&] { return parse_mesh(text); }, text);
  if (!m) return 0;
  fuzz::expect(m->size() >= 1 && m->size() <= max_mesh_axes, "a mesh has 1 to max_mesh_axes axes", text);
  std::int64_t devices = 1;
  for (int e : *m) {
    fuzz::expect(e >= 1, "every axis has a device", text);
    devices *= e;  // UBSan reports an overflow here and in devices()
  }
  fuzz::expect(m->devices() == devices, "devices() is the product of the axes", text);
  const std::string printed = to_string(*m);
  fuzz::expect(fuzz::must_succeed([&] { return parse_mesh(printed); }, "the printed mesh parses", text) == *m,
               "parse_mesh(to_string(m)) == m", text);
  return 0;
}
