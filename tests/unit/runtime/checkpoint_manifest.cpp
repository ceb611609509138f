// parse_manifest against hostile manifests (fuzz regressions, tests/fuzz/regressions/manifest/):
// each refused with an autoddl::error naming the file and the field, never undefined behaviour.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <string>

#include "autoddl/runtime/checkpoint.hpp"

using namespace autoddl;
using Catch::Matchers::ContainsSubstring;

namespace checkpoint_manifest_cases {

namespace {

/// A one-rank manifest of one [8,16] parameter split in two [8,8] blocks (offsets written out).
nlohmann::json small_manifest() {
  checkpoint_manifest m;
  m.model = "mlp:layers=2,hidden=16,batch=8,in=8,out=4";
  m.optimizer = "sgd-momentum";
  m.lr = 0.01;
  m.seed = 7;
  m.strategy = "auto";
  m.recompute = "none";
  m.mesh = "2";
  m.steps_done = 3;
  m.pick = {2, 1};
  m.param_names = {"fc0.W"};
  m.storage = {"[S(1)]"};
  m.shapes = {{8, 16}};
  checkpoint_rank_file rf{0, "rank-00000.bin", 512, {}};
  rf.shards.push_back({0, "param", {0, 0}, {8, 8}, 0, 256, 1});
  rf.shards.push_back({0, "param", {0, 8}, {8, 8}, 256, 256, 2});
  m.ranks = {rf};
  return to_json(m);
}

std::string error_of(const nlohmann::json& j) {
  try {
    (void)parse_manifest(j.dump(), "ck/manifest.json");
  } catch (const error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a manifest written by to_json parses back field by field", "[runtime][checkpoint]") {
  const checkpoint_manifest m = parse_manifest(small_manifest().dump(), "ck/manifest.json");
  CHECK(m.steps_done == 3);
  CHECK(m.seed == 7);
  CHECK(m.shapes == std::vector<std::vector<std::int64_t>>{{8, 16}});
  REQUIRE(m.ranks.size() == 1);
  CHECK(m.ranks[0].shards.at(1).offset == std::vector<std::int64_t>{0, 8});
}

TEST_CASE("numbers a manifest field cannot hold are refused, not converted (fuzz regressions)",
          "[runtime][checkpoint][errors]") {
  nlohmann::json j = small_manifest();
  j["version"] = 1e20;  // get<int> of it was undefined behaviour
  CHECK_THAT(error_of(j), ContainsSubstring("ck/manifest.json: field 'version' must hold whole numbers from -2147483648 to 2147483647"));
  j = small_manifest();
  j["steps_done"] = 1e300;
  CHECK_THAT(error_of(j), ContainsSubstring("field 'steps_done' must hold whole numbers"));
  j = small_manifest();
  j["steps_done"] = 2.5;
  CHECK_THAT(error_of(j), ContainsSubstring("field 'steps_done' must hold whole numbers"));
  j = small_manifest();
  j["plan"]["stages"] = 4294967296;  // beyond an int: once wrapped to 0
  CHECK_THAT(error_of(j), ContainsSubstring("field 'stages' must hold whole numbers"));
  j = small_manifest();
  j["plan"]["pick"] = {2, 1.5};
  CHECK_THAT(error_of(j), ContainsSubstring("field 'pick' must hold whole numbers"));
  j = small_manifest();
  j["ranks"][0]["shards"][0]["byte_offset"] = 18446744073709551615ULL;
  CHECK_THAT(error_of(j), ContainsSubstring("field 'byte_offset' must hold whole numbers"));
}

TEST_CASE("a shape whose element count overflows is impossible, checked before multiplying (fuzz regression)",
          "[runtime][checkpoint][errors]") {
  nlohmann::json j = small_manifest();
  j["params"][0]["shape"] = {281474976710656, 281474976710656};  // 2^48 x 2^48: the product once overflowed
  CHECK_THAT(error_of(j), ContainsSubstring("parameter 'fc0.W' has an impossible shape"));
  j["params"][0]["shape"] = {281474976710656, 1, 0};
  CHECK_THAT(error_of(j), !ContainsSubstring("impossible shape"));  // 2^48 elements (a 0 dim counts as 1) is allowed
}

TEST_CASE("a checksum or seed is decimal digits only", "[runtime][checkpoint][errors]") {
  nlohmann::json j = small_manifest();
  j["seed"] = "-1";  // std::stoull alone read it as 2^64 - 1
  CHECK_THAT(error_of(j), ContainsSubstring("field 'seed' is not a number ('-1')"));
  j["seed"] = " 7";
  CHECK_THAT(error_of(j), ContainsSubstring("field 'seed' is not a number"));
  j["seed"] = "18446744073709551616";  // 2^64
  CHECK_THAT(error_of(j), ContainsSubstring("field 'seed' is not a number"));
  j["seed"] = "18446744073709551615";
  CHECK(error_of(j).empty());
}

}  // namespace checkpoint_manifest_cases
