#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "autoddl/cost/hardware_io.hpp"

using namespace autoddl;
using Catch::Matchers::ContainsSubstring;

namespace hardware_cases {

namespace {

const std::string good = R"({
  "name": "t", "description": "d", "sources": ["s"], "devices_per_node": 4,
  "links": {"intra_node": {"name": "nv", "alpha": 2e-6, "beta": 1e11},
            "inter_node": {"name": "ib", "alpha": 5e-6, "beta": 1e10}},
  "device": {"name": "g", "peak_flops": {"fp32": 1e13, "bf16": 1e14, "fp64": 5e12},
             "efficiency": {"gemm": 0.7, "conv": 0.6, "elementwise": 0.5},
             "memory_bytes": 1e10, "memory_bandwidth": 1e12}})";

/// The message parse_hardware throws for `text` (named "p.json"), or "" when it does not throw.
std::string error_of(const std::string& text) {
  try {
    (void)parse_hardware(text, "p.json");
  } catch (const parse_error& e) {
    return e.what();
  }
  return "";
}

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  auto i = s.find(from);
  REQUIRE(i != std::string::npos);
  return s.replace(i, from.size(), to);
}

std::filesystem::path scratch_dir() {
  auto d = std::filesystem::temp_directory_path() / ("autoddl-hw-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace

TEST_CASE("a valid profile parses field by field", "[cost][hardware]") {
  hardware h = parse_hardware(good, "p.json");
  CHECK(h.name == "t");
  CHECK(h.devices_per_node == 4);
  CHECK(h.intra_node == autoddl::link{2e-6, 1e11, "nv"});
  CHECK(h.inter_node.beta == 1e10);
  CHECK(h.device.peak(dtype::fp32) == 1e13);
  CHECK(h.device.peak(dtype::fp16) == 0);  // not listed: unsupported
  CHECK(h.device.peak(dtype::bf16) == 1e14);
  CHECK(h.device.peak(dtype::fp64) == 5e12);
  CHECK(h.device.efficiency_of(work_kind::conv) == 0.6);
  CHECK(h.device.efficiency_of(work_kind::attention) == 0.7);  // not given: the fused attention at gemm's rate
  CHECK(h.device.memory_bandwidth == 1e12);
}

TEST_CASE("a profile's own attention efficiency is read, bounded and written back", "[cost][hardware]") {
  const std::string with = replaced(good, "\"elementwise\": 0.5}", "\"elementwise\": 0.5, \"attention\": 0.55}");
  const hardware h = parse_hardware(with, "p.json");
  CHECK(h.device.efficiency_of(work_kind::attention) == 0.55);
  CHECK(h.device.efficiency_of(work_kind::gemm) == 0.7);
  CHECK(parse_hardware(to_json(h), "back.json").device.efficiency == h.device.efficiency);
  CHECK(to_json(parse_hardware(good, "p.json")).find("attention") == std::string::npos);  // as gemm: left out
  CHECK_THAT(error_of(replaced(with, "0.55", "1.5")), ContainsSubstring("device.efficiency.attention"));
}

TEST_CASE("each kind of invalid profile names the file and the field", "[cost][hardware]") {
  CHECK_THAT(error_of(replaced(good, "\"memory_bytes\"", "\"memory_byte\"")),
             ContainsSubstring("'p.json'") && ContainsSubstring("unknown key 'device.memory_byte'") &&
                 ContainsSubstring("memory_bytes"));
  CHECK_THAT(error_of(replaced(good, "\"name\": \"t\",", "\"name\": \"t\", \"colour\": 1,")),
             ContainsSubstring("unknown key 'colour'"));
  CHECK_THAT(error_of(replaced(good, "\"alpha\": 2e-6, ", "")),
             ContainsSubstring("field 'links.intra_node.alpha' is missing"));
  CHECK_THAT(error_of(replaced(good, "\"devices_per_node\": 4,", "")),
             ContainsSubstring("field 'devices_per_node' is missing"));
  CHECK_THAT(error_of(replaced(good, "\"beta\": 1e10", "\"beta\": 0")),
             ContainsSubstring("field 'links.inter_node.beta' is 0; give a positive number"));
  CHECK_THAT(error_of(replaced(good, "\"memory_bandwidth\": 1e12", "\"memory_bandwidth\": -5")),
             ContainsSubstring("field 'device.memory_bandwidth' is -5"));
  CHECK_THAT(error_of(replaced(good, "\"fp32\": 1e13", "\"fp32\": 0")),
             ContainsSubstring("field 'device.peak_flops.fp32' is 0"));
  CHECK_THAT(error_of(replaced(good, "\"gemm\": 0.7", "\"gemm\": 1.5")),
             ContainsSubstring("field 'device.efficiency.gemm' is 1.5") && ContainsSubstring("(0, 1]"));
  CHECK_THAT(error_of(replaced(good, "\"devices_per_node\": 4", "\"devices_per_node\": 2.5")),
             ContainsSubstring("field 'devices_per_node' is 2.5"));
  CHECK_THAT(error_of(replaced(good, "\"alpha\": 5e-6", "\"alpha\": \"fast\"")),
             ContainsSubstring("field 'links.inter_node.alpha' must be a number"));
  CHECK_THAT(error_of(replaced(good, "\"sources\": [\"s\"]", "\"sources\": []")),
             ContainsSubstring("field 'sources' must be a non-empty array"));
  CHECK_THAT(error_of(replaced(good, "}}", "}")), ContainsSubstring("'p.json' is not valid JSON"));
  CHECK_THAT(error_of("[1,2]"), ContainsSubstring("must be a JSON object"));
  CHECK_THAT(error_of(replaced(good, "\"beta\": 1e10", "\"beta\": 1e10, \"gamma\": -1")),
             ContainsSubstring("field 'links.inter_node.gamma' is -1"));
  CHECK(parse_hardware(replaced(good, "\"beta\": 1e10", "\"beta\": 1e10, \"gamma\": 2e-10")).inter_node.gamma == 2e-10);
}

TEST_CASE("a number beyond a double is invalid JSON, not another exception (fuzz regression)", "[cost][hardware][errors]") {
  // nlohmann-json throws out_of_range, not parse_error, for 1e999: parse_hardware once let it out
  // (tests/fuzz/regressions/hardware/number-beyond-double-escapes-as-out-of-range.json).
  CHECK_THAT(error_of(replaced(good, "\"beta\": 1e10", "\"beta\": 1e999")),
             ContainsSubstring("'p.json' is not valid JSON") && ContainsSubstring("number overflow"));
}

TEST_CASE("every shipped preset loads by name, cites sources, and prices its links", "[cost][hardware]") {
  for (const char* name : {"piz-daint", "dgx1-v100", "dgx-a100", "dgx-h100", "cpu-local"}) {
    INFO(name);
    hardware h = load_hardware(name);
    CHECK(h.name == name);
    CHECK_FALSE(h.sources.empty());
    CHECK(h.device.peak(dtype::fp32) > 0);
  }
  CHECK(load_hardware("piz-daint").devices_per_node == 1);
  hardware v = load_hardware("dgx1-v100");
  CHECK(v.devices_per_node == 8);
  CHECK(v.intra_node.beta == 150e9);
  CHECK(v.device.peak(dtype::fp16) == 125e12);
  CHECK(load_hardware("dgx-h100").device.peak(dtype::bf16) == 989.4e12);
  // the link rule on real presets: 2x8 DGX-1 = NVLink inside a node, InfiniBand across
  device_mesh m = make_device_mesh({2, 8}, v);
  CHECK(m.axis_link(1).name == link_name("nvlink2"));
  CHECK(m.axis_link(0).name == link_name("ib-edr-4x"));
  CHECK(make_device_mesh({8}, load_hardware("piz-daint")).axis_link(0).name == link_name("cray-aries"));
  auto presets = hardware_presets();
  CHECK(presets.size() >= 5);
}

TEST_CASE("an unknown preset is refused with the list of valid ones", "[cost][hardware]") {
  try {
    (void)load_hardware("dgx-z900");
    FAIL("no throw");
  } catch (const error& e) {
    CHECK_THAT(std::string(e.what()), ContainsSubstring("unknown hardware preset 'dgx-z900'") &&
                                          ContainsSubstring("dgx1-v100") && ContainsSubstring("piz-daint"));
  }
  CHECK_THROWS_WITH(load_hardware("/no/such/dir/x.json"), ContainsSubstring("'/no/such/dir/x.json' cannot be opened"));
}

TEST_CASE("save then load gives the same profile, and the environment variable picks the preset folder",
          "[cost][hardware]") {
  hardware h = parse_hardware(good, "p.json");
  auto dir = scratch_dir();
  save_hardware(h, (dir / "mine.json").string());
  hardware back = load_hardware((dir / "mine.json").string());
  CHECK(back.name == h.name);
  CHECK(back.sources == h.sources);
  CHECK(back.intra_node == h.intra_node);
  CHECK(back.inter_node == h.inter_node);
  CHECK(back.device.peak_flops == h.device.peak_flops);
  CHECK(back.device.efficiency == h.device.efficiency);
  CHECK(back.device.memory_bytes == h.device.memory_bytes);
  ::setenv("AUTODDL_HARDWARE_DIR", dir.string().c_str(), 1);
  CHECK(load_hardware("mine").devices_per_node == 4);
  CHECK_THROWS_WITH(load_hardware("dgx1-v100"), ContainsSubstring("valid presets are mine"));
  ::unsetenv("AUTODDL_HARDWARE_DIR");
  CHECK_THROWS_WITH(save_hardware(h, (dir / "no" / "such.json").string()), ContainsSubstring("cannot write"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a calibrated profile's CPU is read, written back, and this machine's read from cpuinfo", "[cost][hardware]") {
  const hardware none = parse_hardware(good, "p.json");
  CHECK(none.cpu_model.empty());
  CHECK(to_json(none).find("cpu_model") == std::string::npos);  // not recorded: not written
  const hardware h = parse_hardware(replaced(good, "\"sources\": [\"s\"],", "\"sources\": [\"s\"], \"cpu_model\": \"AMD EPYC 7B13\","),
                                    "p.json");
  CHECK(h.cpu_model == "AMD EPYC 7B13");
  CHECK(parse_hardware(to_json(h), "p.json").cpu_model == "AMD EPYC 7B13");
  CHECK_THROWS_WITH(parse_hardware(replaced(good, "\"sources\": [\"s\"],", "\"sources\": [\"s\"], \"cpu_model\": 7,"),
                                   "p.json"),
                    ContainsSubstring("cpu_model"));
  const auto dir = scratch_dir();
  std::ofstream(dir / "cpuinfo") << "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Gold 6148 "
                                    "CPU @ 2.40GHz  \n\nprocessor\t: 1\nmodel name\t: Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz\n";
  CHECK(this_cpu_model((dir / "cpuinfo").string()) == "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz");
  std::ofstream(dir / "arm") << "processor\t: 0\nBogoMIPS\t: 50.00\n";  // no model name: nothing to compare
  CHECK(this_cpu_model((dir / "arm").string()).empty());
  CHECK(this_cpu_model((dir / "none").string()).empty());
  std::filesystem::remove_all(dir);
}

TEST_CASE("a link's optional second regime is read, validated and written back", "[cost][hardware]") {
  const std::string two = replaced(good, "\"beta\": 1e10", "\"beta\": 1e10, \"gamma\": 1e-10, \"large_bytes\": 4194304, \"beta_large\": 4e9, \"gamma_large\": 3e-10");
  hardware h = parse_hardware(two, "p.json");
  CHECK(h.inter_node == autoddl::link{5e-6, 1e10, "ib", 1e-10, 4194304, 4e9, 3e-10});
  CHECK_FALSE(h.intra_node.two_regimes());  // absent: one regime, as before
  // round trip through the file format
  hardware back = parse_hardware(to_json(h), "back.json");
  CHECK(back.inter_node == h.inter_node);
  CHECK(back.intra_node == h.intra_node);
  CHECK(to_json(parse_hardware(good)).find("large_bytes") == std::string::npos);
  // gamma_large defaults to gamma
  CHECK(parse_hardware(replaced(two, ", \"gamma_large\": 3e-10", "")).inter_node.gamma_large == 1e-10);
  // each field named on its own
  CHECK_THAT(error_of(replaced(two, "\"beta_large\": 4e9, ", "")),
             ContainsSubstring("'p.json'") && ContainsSubstring("field 'links.inter_node.beta_large' is missing"));
  CHECK_THAT(error_of(replaced(two, "\"large_bytes\": 4194304, ", "")),
             ContainsSubstring("field 'links.inter_node.large_bytes' is missing"));
  CHECK_THAT(error_of(replaced(two, "\"large_bytes\": 4194304", "\"large_bytes\": 0")),
             ContainsSubstring("field 'links.inter_node.large_bytes' is 0; give a positive number"));
  CHECK_THAT(error_of(replaced(two, "\"beta_large\": 4e9", "\"beta_large\": -4")),
             ContainsSubstring("field 'links.inter_node.beta_large' is -4; give a positive number"));
  CHECK_THAT(error_of(replaced(two, "\"gamma_large\": 3e-10", "\"gamma_large\": -1")),
             ContainsSubstring("field 'links.inter_node.gamma_large' is -1"));
  CHECK_THAT(error_of(replaced(two, "\"beta_large\"", "\"beta_larg\"")),
             ContainsSubstring("unknown key 'links.inter_node.beta_larg'") && ContainsSubstring("beta_large"));
  CHECK_THAT(error_of(replaced(good, "\"beta\": 1e10", "\"beta\": 1e10, \"gamma_large\": 1e-10")),
             ContainsSubstring("field 'links.inter_node.large_bytes' is missing"));
}

}  // namespace hardware_cases
