// The measured sections of a hardware profile (cost/measured.hpp): JSON round trip, one-sentence
// errors naming the file and the field, the per-kind fit against closed forms, and the boxing
// copy prices against runtime/boxing.hpp's copies counted by hand.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cmath>
#include <string>

#include "autoddl/cost/boxing_copies.hpp"
#include "autoddl/cost/hardware_io.hpp"

using namespace autoddl;
using Catch::Matchers::ContainsSubstring;

namespace measured_cases {

namespace {

const std::string base = R"({
  "name": "t", "description": "d", "sources": ["s"], "devices_per_node": 2,
  "links": {"intra_node": {"name": "shm", "alpha": 1e-6, "beta": 1e10},
            "inter_node": {"name": "shm", "alpha": 1e-6, "beta": 1e10}},
  "device": {"name": "cpu", "peak_flops": {"fp32": 1e11},
             "efficiency": {"gemm": 1, "conv": 0.5, "elementwise": 0.01},
             "memory_bytes": 1e10, "memory_bandwidth": 1e10})";

const std::string kernels = R"(,
  "kernels": [{"op": "relu", "key": "relu k1 in=[4]", "dtype": "fp32", "forward_flops": 4, "backward_flops": 4,
               "bytes": 32, "forward_s": 2e-6, "backward_s": 3e-6}],
  "copy": {"alpha": 1e-7, "bandwidth": 5e9},
  "optimizer": {"sgd-momentum": {"alpha": 1e-7, "per_element": 1e-9}})";

std::string error_of(const std::string& text) {
  try {
    (void)parse_hardware(text, "m.json");
  } catch (const parse_error& e) {
    return e.what();
  }
  return "";
}

std::string with(const std::string& from, const std::string& to) {
  std::string s = kernels;
  auto i = s.find(from);
  REQUIRE(i != std::string::npos);
  return base + s.replace(i, from.size(), to) + "}";
}

}  // namespace

TEST_CASE("a profile's kernel table, copy rate and optimizer rate are read and written back", "[cost][hardware][measured]") {
  const hardware h = parse_hardware(base + kernels + "}", "m.json");
  REQUIRE(h.measured.kernels.size() == 1);
  const kernel_entry& k = h.measured.kernels[0];
  CHECK(k.op == "relu");
  CHECK(k.key == "relu k1 in=[4]");
  CHECK(k.forward_s == 2e-6);
  CHECK(k.backward_s == 3e-6);
  CHECK(k.bytes == 32);
  CHECK(h.measured.copy.alpha == 1e-7);
  CHECK(h.measured.copy.bandwidth == 5e9);
  CHECK(h.measured.sgd_momentum.per_element == 1e-9);
  CHECK(!h.measured.adam.measured());
  const hardware back = parse_hardware(to_json(h), "again.json");
  CHECK(to_json(back) == to_json(h));
  CHECK(back.measured.kernels[0].key == k.key);
  // a profile without the sections has none, and writes none
  const hardware plain = parse_hardware(base + "}", "p.json");
  CHECK(plain.measured.kernels.empty());
  CHECK(!plain.measured.copy.measured());
  CHECK(to_json(plain).find("kernels") == std::string::npos);
}

TEST_CASE("a corrupt or truncated kernel table is refused in one sentence naming the file and the field",
          "[cost][hardware][measured]") {
  CHECK_THAT(error_of(with("\"forward_s\": 2e-6", "\"forward_s\": -1")),
             ContainsSubstring("hardware profile 'm.json': field 'kernels[0].forward_s' is -1"));
  CHECK_THAT(error_of(with("\"backward_s\": 3e-6", "\"backward\": 3e-6")), ContainsSubstring("unknown key 'kernels[0].backward'"));
  CHECK_THAT(error_of(with(", \"backward_s\": 3e-6", "")), ContainsSubstring("field 'kernels[0].backward_s' is missing"));
  CHECK_THAT(error_of(with("\"dtype\": \"fp32\"", "\"dtype\": \"int8\"")), ContainsSubstring("field 'kernels[0].dtype' is \"int8\""));
  CHECK_THAT(error_of(with("\"key\": \"relu k1 in=[4]\"", "\"key\": \"gelu k1\"")),
             ContainsSubstring("field 'kernels[0].key' does not start with its op 'relu'"));
  CHECK_THAT(error_of(with("\"bandwidth\": 5e9", "\"bandwidth\": 0")), ContainsSubstring("field 'copy.bandwidth' is 0"));
  CHECK_THAT(error_of(with("\"per_element\": 1e-9", "\"per_element\": \"x\"")),
             ContainsSubstring("field 'optimizer.sgd-momentum.per_element' must be a number"));
  CHECK_THAT(error_of(base + ", \"kernels\": {}}"), ContainsSubstring("field 'kernels' must be an array"));
  const std::string whole = base + kernels + "}";
  CHECK_THAT(error_of(whole.substr(0, whole.size() - 40)), ContainsSubstring("hardware profile 'm.json' is not valid JSON"));
}

TEST_CASE("the per-kind kernel fit recovers a + flops/rate + bytes/bandwidth and keeps coefficients non-negative",
          "[cost][measured]") {
  // closed form: 5 us + 1 ns per kFLOP + 0.1 ns per byte, exact on four points
  std::vector<detail::fit_row> rows;
  for (double f : {1e6, 4e6, 2e7})
    for (double b : {1e4, 1e6}) rows.push_back({f, b, 5e-6 + f * 1e-12 + b * 1e-10});
  const kernel_fit k = fit_kernel_time(rows);
  CHECK(std::abs(k.a - 5e-6) < 1e-12);
  CHECK(std::abs(k.per_flop - 1e-12) < 1e-18);
  CHECK(std::abs(k.per_byte - 1e-10) < 1e-16);
  // time falling with size would need a negative rate: the fit drops that coefficient instead
  const kernel_fit c = fit_kernel_time({{1e6, 0, 2e-5}, {2e6, 0, 1e-5}});
  CHECK(c.per_flop >= 0);
  CHECK(c.a >= 0);
}

TEST_CASE("boxing copies are priced as the executor copies them", "[cost][boxing][measured]") {
  const copy_rate r{1e-6, 1e9};
  const double mb = 1e6;
  // all-gather of T = 1 MB on 2: zeroed gather buffer + concat_along, 1 MB each
  CHECK(step_copy_time({0, S(0), B, collective::all_gather, 2, 1000000, 4}, r) == 2 * (1e-6 + mb / 1e9));
  // reduce-scatter: chunks_along of T + the kept half
  CHECK(step_copy_time({0, P, S(0), collective::reduce_scatter, 2, 1000000, 4}, r) == (1e-6 + mb / 1e9) + (1e-6 + mb / 2e9));
  // all-reduce: in place, unless padded (10 fp32 on 4 ranks: 40 bytes into a padded buffer and back)
  CHECK(step_copy_time({0, P, B, collective::all_reduce, 2, 1000000, 4}, r) == 0);
  CHECK(step_copy_time({0, P, B, collective::all_reduce, 4, 40, 4}, r) == 2 * (1e-6 + 40 / 1e9));
  // no copy rate: copies are free (the GPU presets)
  CHECK(step_copy_time({0, S(0), B, collective::all_gather, 2, 1000000, 4}, copy_rate{}) == 0);
}

}  // namespace measured_cases
