// The safetensors format read and written. Oracles: files spelled out byte by byte here from the
// format's definition (8-byte little-endian header length, JSON header, raw little-endian data),
// and the IEEE / bfloat16 bit patterns of small values.
#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "autoddl/runtime/safetensors.hpp"

using namespace autoddl;
using Catch::Matchers::ContainsSubstring;

namespace safetensors_cases {

/// A file: the header text's length (8 bytes, little-endian), the text, the data bytes.
std::vector<unsigned char> file_of(const std::string& header, const std::vector<unsigned char>& data) {
  std::vector<unsigned char> b;
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<unsigned char>(std::uint64_t(header.size()) >> (8 * i)));
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

// w: F32 [2] = {1, -2} (0x3f800000, 0xc0000000); h: BF16 [1] = 0.5 (0x3f00); f: F16 [1] = -1.5
// (0xbe00); d: F64 [1] = 0.25 (0x3fd0000000000000).
const std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("h":{"dtype":"BF16","shape":[1],"data_offsets":[8,10]},)"
                           R"("f":{"dtype":"F16","shape":[1,1],"data_offsets":[10,12]},)"
                           R"("d":{"dtype":"F64","shape":[],"data_offsets":[12,20]},)"
                           R"("__metadata__":{"format":"pt"}})";
const std::vector<unsigned char> data{0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0, 0x00, 0x3f, 0x00, 0xbe, 0, 0, 0, 0, 0, 0, 0xd0, 0x3f};

TEST_CASE("a safetensors file spelled out byte by byte reads as its values", "[runtime][safetensors]") {
  const safetensors_contents c = parse_safetensors(file_of(header, data), "t.safetensors");
  REQUIRE(c.tensors.size() == 4);
  CHECK(c.metadata.at("format") == "pt");
  CHECK(c.find("w")->values == std::vector<float>{1.0f, -2.0f});
  CHECK(c.find("h")->values == std::vector<float>{0.5f});
  CHECK(c.find("h")->dtype == safetensors_dtype::bf16);
  CHECK(c.find("f")->values == std::vector<float>{-1.5f});
  CHECK(c.find("f")->shape == std::vector<std::int64_t>{1, 1});
  CHECK(c.find("d")->values == std::vector<float>{0.25f});
  CHECK(c.find("d")->shape.empty());
  CHECK(c.tensors.front().name == "w");  // in the order of their data
  CHECK(c.find("x") == nullptr);
}

TEST_CASE("safetensors files are written with the header padded to 8 bytes, and read back", "[runtime][safetensors]") {
  const std::vector<named_tensor> t{{"w", safetensors_dtype::f32, {2}, {1.0f, -2.0f}},
                                    {"h", safetensors_dtype::bf16, {1}, {0.5f}}};
  const std::vector<unsigned char> b = safetensors_bytes(t, {{"format", "pt"}});
  const std::string text = R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("h":{"dtype":"BF16","shape":[1],"data_offsets":[8,10]}})";
  const std::string padded = text + std::string((8 - text.size() % 8) % 8, ' ');
  const std::vector<unsigned char> want = file_of(padded, {0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0, 0x00, 0x3f});
  CHECK(b == want);
  const safetensors_contents back = parse_safetensors(b, "b");
  CHECK(back.find("w")->values == t[0].values);
  CHECK(back.find("h")->values == t[1].values);
}

TEST_CASE("malformed safetensors files are one sentence naming the file and the tensor", "[runtime][safetensors][errors]") {
  auto refuses = [](const std::vector<unsigned char>& b, const std::string& says) {
    CHECK_THROWS_WITH(parse_safetensors(b, "m.safetensors"), ContainsSubstring("safetensors file m.safetensors") && ContainsSubstring(says));
  };
  refuses({1, 2, 3}, "has 3 bytes, too few for the 8-byte header length");
  std::vector<unsigned char> whole = file_of(header, data);
  refuses({whole.begin(), whole.begin() + 20}, "declares a header of " + std::to_string(header.size()) + " bytes");
  refuses({whole.begin(), whole.end() - 1}, "tensor 'd' has data_offsets [12, 20] outside the file's 19 bytes of data");
  refuses(file_of("[1,2]", {}), "the header is [1,2], not a JSON object");
  refuses(file_of("{\"w\":", {}), "is not valid JSON");
  refuses(file_of(R"({"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", data), "tensor 'w' has dtype \"I64\"");
  refuses(file_of(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data), "needs 12 bytes, but its offsets span 8");
  refuses(file_of(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,8]}})", data), "not a whole number >= 0");
  refuses(file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", data), "outside the file's");
  refuses(file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"v":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", data),
          "tensors 'w' and 'v' overlap in the data");
  refuses(file_of(R"({"w":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,8]}})", data), "over 2^48 elements");
  refuses(file_of(R"({"w":{"dtype":"F32","shape":[2]}})", data), "needs an object with 'dtype', 'shape' and 'data_offsets'");
  refuses(file_of(R"({"__metadata__":{"format":1}})", {}), "'__metadata__' entry 'format' is 1, not a string");
  CHECK_THROWS_WITH(read_safetensors("/nonexistent/x.safetensors"), ContainsSubstring("is missing or not a file"));
}

}  // namespace safetensors_cases
