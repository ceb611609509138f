// Numbers in model specs (parse_number.hpp) and the capacity they set (ops/moe.hpp).
// Oracles: the compiler's reading of a literal (the double nearest the decimal), GShard's
// capacity ceil(factor * seq * k / E) evaluated in integer arithmetic on the decimal as written,
// and the limits of the types.
#include <cstdint>
#include <string>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "autoddl/models/model_file.hpp"
#include "autoddl/ops/moe.hpp"
#include "autoddl/parse_number.hpp"

using namespace autoddl;
using Catch::Matchers::ContainsSubstring;

namespace numbers_cases {

// The dispatch op's slots per expert of a built model.
int dispatch_slots(const graph& g) {
  for (const op_node& n : g.ops)
    if (n.kind == op_kind::dispatch) return n.attrs.capacity;
  return -1;
}

TEST_CASE("decimals parse to the double nearest them, as the compiler reads the literal", "[models][parse]") {
  CHECK(parse_number<double>("1.15", "x") == 1.15);
  CHECK(parse_number<double>("0.1", "x") == 0.1);
  CHECK(parse_number<double>("1.25", "x") == 1.25);
  CHECK(parse_number<double>("2.5e2", "x") == 250.0);
  CHECK(parse_number<double>("0.001", "x") == 0.001);
  CHECK(parse_number<double>("0", "x") == 0.0);
  CHECK(parse_number<std::int64_t>("9223372036854775807", "x") == INT64_MAX);
  CHECK(parse_number<int>("08", "x") == 8);
}

TEST_CASE("malformed, trailing, empty and out-of-range numbers are refused with a sentence naming the text",
          "[models][parse]") {
  const std::string big(400, '9');
  CHECK_THROWS_WITH(parse_number<double>("", "capacity"), ContainsSubstring("capacity is empty"));
  CHECK_THROWS_WITH(parse_number<double>("x1", "capacity"), ContainsSubstring("capacity 'x1' is not a number"));
  CHECK_THROWS_WITH(parse_number<double>("+1", "capacity"), ContainsSubstring("capacity '+1' is not a number"));
  CHECK_THROWS_WITH(parse_number<double>(" 1", "capacity"), ContainsSubstring("capacity ' 1' is not a number"));
  CHECK_THROWS_WITH(parse_number<double>("1.1x", "capacity"),
                    ContainsSubstring("capacity '1.1x' has 'x' after the number 1.1; remove it"));
  CHECK_THROWS_WITH(parse_number<double>("1e400", "aux"), ContainsSubstring("aux '1e400' lies outside what a double holds"));
  CHECK_THROWS_WITH(parse_number<double>("1e-400", "aux"), ContainsSubstring("aux '1e-400' lies outside"));
  CHECK_THROWS_WITH(parse_number<double>(big, "aux"), ContainsSubstring("aux '" + big.substr(0, 80) + "...' lies outside"));
  CHECK_THROWS_WITH(parse_number<double>("inf", "aux"), ContainsSubstring("aux 'inf' is not a finite number"));
  CHECK_THROWS_WITH(parse_number<double>("nan", "aux"), ContainsSubstring("aux 'nan' is not a finite number"));
  CHECK_THROWS_WITH(parse_number<std::int64_t>(big, "layers"),
                    ContainsSubstring("layers '" + big.substr(0, 80) + "...' lies outside [-9223372036854775808, 9223372036854775807]"));
  CHECK_THROWS_WITH(parse_number<std::int64_t>("9223372036854775808", "layers"), ContainsSubstring("lies outside"));
  CHECK_THROWS_WITH(parse_number<int>("1.5", "layers"), ContainsSubstring("layers '1.5' has '.5' after the number 1"));
  CHECK_THROWS_WITH(parse_number<unsigned>("-1", "seed"), ContainsSubstring("seed '-1' is not a whole number"));
  CHECK_THROWS_AS(parse_number<int>("", "x"), parse_error);
  CHECK_FALSE(parse_number_or_none<int>("12a").has_value());
  CHECK(parse_number_or_none<int>("12") == 12);
}

TEST_CASE("model specs refuse overflowing and malformed values with the spec and the key", "[models][parse]") {
  const std::string moe = "llama:layers=1,hidden=64,heads=4,kv_heads=2,ffn=64,experts=4,topk=2,seq=16,batch=2,vocab=96";
  const std::string big(400, '9');
  CHECK_THROWS_WITH(build_model(moe + ",capacity=" + big), ContainsSubstring("capacity '" + big.substr(0, 80) + "...' lies outside"));
  CHECK_THROWS_WITH(build_model(moe + ",aux=" + big), ContainsSubstring("aux '" + big.substr(0, 80) + "...' lies outside"));
  CHECK_THROWS_WITH(build_model(moe + ",aux=" + big), !ContainsSubstring(big.substr(0, 81)));  // echoed values cut short
  CHECK_THROWS_WITH(build_model(moe + ",capacity=1e400"), ContainsSubstring("': capacity '1e400' lies outside"));
  CHECK_THROWS_WITH(build_model(moe + ",capacity=1.2.5"), ContainsSubstring("capacity '1.2.5' has '.5' after the number"));
  CHECK_THROWS_WITH(build_model(moe + ",capacity=-1"), ContainsSubstring("capacity=-1 is not a non-negative decimal"));
  CHECK_THROWS_WITH(build_model("gpt:layers=" + big), ContainsSubstring("layers '" + big.substr(0, 80) + "...' lies outside"));
  CHECK_THROWS_WITH(build_model("gpt:layers=2x"), ContainsSubstring("model spec 'gpt:layers=2x': layers '2x' has 'x'"));
  CHECK_THROWS_WITH(build_model("gpt:dropout=0.1.1"), ContainsSubstring("dropout '0.1.1' has '.1' after the number 0.1"));
  CHECK_THROWS_WITH(build_model("gpt:dropout=1"), ContainsSubstring("dropout=1 is not a probability below 1"));
  CHECK_THROWS_WITH(load_model("hf:x.json:seq=" + big), ContainsSubstring("seq '" + big.substr(0, 80) + "...' lies outside"));
  CHECK_THROWS_WITH(load_model("hf:x.json:batch=4x"), ContainsSubstring("batch '4x' has 'x' after the number 4"));
  CHECK_THROWS_WITH(load_model("m.json:batch=" + big), ContainsSubstring("batch '" + big.substr(0, 80) + "...' lies outside"));
  CHECK_THROWS_WITH(load_model("m.json:batch=0"), ContainsSubstring("batch=0 is not a positive whole number"));
}

TEST_CASE("capacity=1.15 at seq=1000 gives ceil(1.15 x 1000 x 2 / 4) = 575 slots per expert", "[models][parse][moe]") {
  const graph g = build_model("llama:layers=1,hidden=64,heads=4,kv_heads=2,ffn=64,experts=4,topk=2,capacity=1.15,"
                              "seq=1000,batch=2,vocab=96");
  // 1.15 x 1000 x 2 / 4 = 115 x 2000 / 400, rounded up in integers
  const int expected = (115 * 1000 * 2 + 400 - 1) / 400;
  CHECK(expected == 575);
  CHECK(dispatch_slots(g) == expected);
}

TEST_CASE("capacity slots equal the integer ceiling of the written decimal factor", "[models][parse][moe]") {
  // Every factor c/100 for c in [1, 400] against seq, k and E: the oracle is the ceiling of the
  // rational c * seq * k / (100 * E), computed in integers, capped to [1, seq]. It includes
  // factors whose double product lands just above a whole number (0.07 x 100 x 2 / 2).
  const int seq = GENERATE(100, 1000, 1024, 3000);
  const int topk = GENERATE(1, 2, 4);
  const int experts = GENERATE(2, 4, 8, 64);
  int wrong = 0;
  for (std::int64_t cents = 1; cents <= 400; ++cents) {
    const double factor = parse_number<double>(std::to_string(cents / 100) + "." + (cents % 100 < 10 ? "0" : "") +
                                                   std::to_string(cents % 100),
                                               "capacity");
    std::int64_t want = (cents * seq * topk + 100 * experts - 1) / (100 * experts);
    want = want < 1 ? 1 : want > seq ? seq : want;
    if (capacity_slots(seq, experts, topk, factor) != want) {
      ++wrong;
      UNSCOPED_INFO("factor " << factor << " seq " << seq << " topk " << topk << " experts " << experts);
    }
  }
  CHECK(wrong == 0);
  CHECK(capacity_slots(100, 2, 2, 0.07) == 7);
  CHECK(capacity_slots(seq, experts, topk, 0) == seq);  // dropless
}

}  // namespace numbers_cases
