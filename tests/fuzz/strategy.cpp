// libFuzzer target: parse_strategy ("auto", "megatron:tp=4,dp=2,mbs=1,recompute=full,sp=1", ...)
// and parse_strategy_list ("dp,megatron:tp=4,zero"). An accepted strategy prints in the same
// text form and parses back to the same value.
#include <cstddef>
#include <cstdint>
#include <string>

#include "autoddl/search/strategy.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace autoddl;
  const std::string_view text = fuzz::as_text(data, size);
  if (const auto s = fuzz::parse_or_refuse([&] { return parse_strategy(text); }, text)) {
    const std::string printed = to_string(*s);
    fuzz::expect(fuzz::must_succeed([&] { return parse_strategy(printed); }, "the printed strategy parses", text) == *s,
                 "parse_strategy(to_string(s)) == s", text);
    if (const auto* m = std::get_if<strategy::megatron>(&*s))
      fuzz::expect(m->tp >= 0 && m->dp >= 0 && m->mbs >= 0, "megatron knobs are not negative", text);
  }
  (void)fuzz::parse_or_refuse([&] { return parse_strategy_list(text); }, text);
  return 0;
}
