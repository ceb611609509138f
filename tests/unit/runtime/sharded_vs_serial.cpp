// Sharded == serial for single ops: for every op kind and every signature on meshes 2 and 2x2,
// every device runs its local forward and backward; the reassembled output and gradients must
// match the serial (one-device) run to a relative error of 1e-9 in double.
#include <algorithm>
#include <random>
#include <string>

#include <catch2/catch_test_macros.hpp>

#include "autoddl/models.hpp"
#include "cases.hpp"
#include "sim.hpp"

using namespace autoddl;

namespace sharded_vs_serial_cases {

TEST_CASE("every op under every signature on meshes 2 and 2x2 computes the serial result", "[runtime][kernels][sharded]") {
  const std::uint64_t seed = 20240611;
  std::size_t checked = 0;
  for (const op_node& op : sim::op_cases()) {
    std::mt19937_64 rng(seed);
    const sim::global_operands g = sim::random_operands(op, rng);
    const sim::host_tensor dy = sim::random_tensor(op.outputs[0], rng);
    const sim::run_result serial = sim::run_serial(op, g, dy, seed);
    for (const mesh_shape& mesh : {mesh_shape{2}, mesh_shape{2, 2}}) {
      for (const signature& sig : signatures(op, mesh)) {
        const std::string where = to_string(op, sig) + "@" + to_string(mesh) + " of op '" + op.name + "' (seed " +
                                  std::to_string(seed) + ")";
        INFO(where);
        const sim::run_result r = sim::run(op, sig, mesh, g, dy, seed);
        CHECK(r.b_mismatch <= 1e-12);
        CHECK(sim::rel_error(r.y, serial.y) <= 1e-9);
        for (std::size_t i = 0; i < r.dinputs.size(); ++i) {
          INFO("gradient of input " << i);
          CHECK(sim::rel_error(r.dinputs[i], serial.dinputs[i]) <= 1e-9);
        }
        for (std::size_t i = 0; i < r.dparams.size(); ++i) {
          INFO("gradient of parameter " << i);
          CHECK(sim::rel_error(r.dparams[i], serial.dparams[i]) <= 1e-9);
        }
        ++checked;
      }
    }
  }
  INFO("signatures checked: " << checked);
  CHECK(checked > 500);
}

TEST_CASE("the ops of small gpt, bert, vgg and mlp models compute the serial result under sampled 2x2 signatures",
          "[runtime][kernels][sharded][models]") {
  const std::uint64_t seed = 99;
  std::mt19937_64 pick(seed);
  for (const char* spec : {"gpt:layers=1,hidden=16,heads=4,seq=8,batch=4,vocab=32",
                           "bert:layers=1,hidden=16,heads=4,seq=8,batch=4,vocab=32", "vgg11:image=32,batch=4,fc=16,classes=8",
                           "mlp:layers=2,hidden=16,batch=8,in=12,out=8"}) {
    const graph g = build_model(spec);
    std::size_t block_ops = 0;
    for (std::size_t i = 0; i < g.ops.size(); ++i) {
      if (g.block_pos[i] >= 0 && g.block[i] > 0) continue;  // repeated blocks: the first suffices
      const op_node& op = g.ops[i];
      ++block_ops;
      std::mt19937_64 rng(seed + i);
      const sim::global_operands in = sim::random_operands(op, rng);
      const sim::host_tensor dy = sim::random_tensor(op.outputs[0], rng);
      const sim::run_result serial = sim::run_serial(op, in, dy, seed);
      std::vector<signature> sigs = signatures(op, mesh_shape{2, 2});
      std::shuffle(sigs.begin(), sigs.end(), pick);
      if (sigs.size() > 4) sigs.resize(4);
      for (const signature& sig : sigs) {
        INFO(spec << ": " << to_string(op, sig) << "@2x2 of op '" << op.name << "' (seed " << seed << ")");
        const sim::run_result r = sim::run(op, sig, mesh_shape{2, 2}, in, dy, seed);
        CHECK(r.b_mismatch <= 1e-12);
        CHECK(sim::rel_error(r.y, serial.y) <= 1e-9);
        for (std::size_t j = 0; j < r.dinputs.size(); ++j) CHECK(sim::rel_error(r.dinputs[j], serial.dinputs[j]) <= 1e-9);
        for (std::size_t j = 0; j < r.dparams.size(); ++j) CHECK(sim::rel_error(r.dparams[j], serial.dparams[j]) <= 1e-9);
      }
    }
    CHECK(block_ops > 0);
  }
}

}  // namespace sharded_vs_serial_cases
