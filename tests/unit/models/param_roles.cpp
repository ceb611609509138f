// Parameters start by the role the graph gives them (models/graph.hpp, runtime/data.hpp), not by
// their names. Oracles: LayerNorm's definition (scale 1, shift 0 make it the plain
// normalisation), and the standard deviation of a uniform in +-sqrt(3 / fan_in), 1 / sqrt(fan_in),
// with each expert's own fan-in (h into W_gate and W_up, F into W_down).
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "autoddl/models/model_file.hpp"
#include "autoddl/runtime/data.hpp"

using namespace autoddl;

namespace param_roles_cases {

int param_id(const graph& g, const std::string& name) {
  for (std::size_t p = 0; p < g.params.size(); ++p)
    if (g.params[p].name == name) return int(p);
  FAIL("no parameter " << name);
  return -1;
}

std::vector<double> initial(const graph& g, const std::string& name) {
  const int p = param_id(g, name);
  return init_param_shard<double>(g, p, whole_shard(g.params[std::size_t(p)].shape), 7);
}

double sample_std(const std::vector<double>& v) {
  double mean = 0, sq = 0;
  for (double x : v) mean += x;
  mean /= double(v.size());
  for (double x : v) sq += (x - mean) * (x - mean);
  return std::sqrt(sq / double(v.size() - 1));
}

// A model file whose layernorm parameters carry PyTorch's names, not gamma and beta.
const char* torch_named = R"({
 "format": "autoddl-model", "version": 1, "name": "torch-names",
 "inputs": [{"name": "x", "shape": [8, 16]}, {"name": "labels", "shape": [8]}],
 "params": [{"name": "ln1.weight", "shape": [16]}, {"name": "ln1.bias", "shape": [16]},
            {"name": "fc.weight", "shape": [16, 4]}, {"name": "fc.bias", "shape": [4]},
            {"name": "gamma", "shape": [16, 4]}],
 "ops": [{"name": "ln1", "op": "layernorm", "inputs": ["x"], "params": ["ln1.weight", "ln1.bias"]},
         {"name": "fc", "op": "linear", "inputs": ["ln1"], "params": ["fc.weight", "fc.bias"]},
         {"name": "head", "op": "linear", "inputs": ["ln1"], "params": ["gamma"], "attrs": {"bias": false}},
         {"name": "sum", "op": "add", "inputs": ["fc", "head"]},
         {"name": "loss", "op": "cross_entropy", "inputs": ["sum", "labels"]}],
 "loss": "loss"})";

TEST_CASE("a norm weight named ln1.weight in a model file starts at one, its bias at zero", "[models][init]") {
  const graph g = parse_model_file(torch_named, "torch-names.json");
  CHECK(g.params[std::size_t(param_id(g, "ln1.weight"))].role == param_role::norm_scale);
  for (double x : initial(g, "ln1.weight")) CHECK(x == 1.0);
  for (double x : initial(g, "ln1.bias")) CHECK(x == 0.0);
  for (double x : initial(g, "fc.bias")) CHECK(x == 0.0);
  // a linear weight named "gamma" is a weight: uniform in +-sqrt(3 / 4), not all ones
  const std::vector<double> w = initial(g, "gamma");
  bool varied = false;
  for (double x : w) {
    CHECK(std::abs(x) <= std::sqrt(3.0 / 4.0));
    varied = varied || x != w[0];
  }
  CHECK(varied);
}

TEST_CASE("each expert's weights start with the standard deviation of its own fan-in", "[models][init][moe]") {
  // E = 4 experts of width F = 128 over h = 64: W_gate, W_up [4, 64, 128], W_down [4, 128, 64],
  // n = 32768 elements each. The sample std of n iid uniforms lies within a relative 0.25% of the
  // true one (its relative standard error, sqrt(0.8 / n) / 2 for a uniform); 2% leaves eight of
  // them, while the stacked fan-in E x 64 = 256 would give std 1/16: half of W_gate's 1/8 and
  // 0.71 of W_down's 1/sqrt(128).
  const graph g = build_model("llama:layers=1,hidden=64,heads=4,kv_heads=2,ffn=64,experts=4,topk=2,moe_ffn=128,"
                              "seq=8,batch=2,vocab=96");
  const double h = 64, f = 128, tolerance = 0.02;
  for (const char* name : {"h0.moe.W_gate", "h0.moe.W_up"}) {
    INFO(name);
    CHECK(g.params[std::size_t(param_id(g, name))].role == param_role::expert_weight);
    CHECK(std::abs(sample_std(initial(g, name)) * std::sqrt(h) - 1) < tolerance);
  }
  CHECK(std::abs(sample_std(initial(g, "h0.moe.W_down")) * std::sqrt(f) - 1) < tolerance);
}

}  // namespace param_roles_cases
