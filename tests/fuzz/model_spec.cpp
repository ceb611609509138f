// libFuzzer target: build_model ("gpt:layers=2,hidden=64,heads=4,seq=32,batch=8,vocab=128").
// A spec is refused with an autoddl::error or builds a graph that validates, whose parameter
// count and FLOPs are computed without overflow, and that fits the sizes the builders promise
// (no spec makes a model so large that describing or training it would exhaust memory).
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "autoddl/models/zoo.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace autoddl;
  const std::string_view text = fuzz::as_text(data, size);
  const auto g = fuzz::parse_or_refuse([&] { return build_model(text); }, text);
  if (!g) return 0;
  fuzz::must_succeed([&] { validate(*g); return 0; }, "a built model validates", text);
  const std::int64_t params = param_count(*g);
  fuzz::expect(params > 0, "a model has parameters", text);
  fuzz::expect(std::isfinite(forward_flops(*g)) && std::isfinite(backward_flops(*g)), "finite FLOPs", text);
  fuzz::expect(graph_batch(*g) >= 1, "a batch of at least 1", text);
  return 0;
}
