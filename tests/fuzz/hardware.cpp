// libFuzzer target: parse_hardware (a hardware profile as JSON, data/hardware/*.json). An
// accepted profile has positive, finite figures and writes back (to_json) to JSON that parses
// to a profile with the same figures.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "autoddl/cost/hardware_io.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace autoddl;
  const std::string_view text = fuzz::as_text(data, size);
  const auto h = fuzz::parse_or_refuse([&] { return parse_hardware(text, "fuzz.json"); }, text);
  if (!h) return 0;
  fuzz::expect(h->devices_per_node >= 1, "at least one device per node", text);
  fuzz::expect(h->intra_node.beta > 0 && h->inter_node.beta > 0 && h->device.memory_bytes > 0, "positive figures", text);
  const std::string written = to_json(*h);
  const hardware back = fuzz::must_succeed([&] { return parse_hardware(written, "written.json"); },
                                           "the written profile parses", text);
  fuzz::expect(back.devices_per_node == h->devices_per_node && back.intra_node.beta == h->intra_node.beta &&
                   back.inter_node.alpha == h->inter_node.alpha && back.device.memory_bytes == h->device.memory_bytes,
               "to_json then parse_hardware keeps the figures", text);
  return 0;
}
