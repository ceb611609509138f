// Sharded == serial for single ops: for every op kind and every signature on meshes 2 and 2x2,
// every device runs its local forward and backward; the reassembled output and gradients must
// match the serial (one-device) run to a relative error of 1e-9 in double.
#include <random>
#include <string>

#include <catch2/catch_test_macros.hpp>

#include "cases.hpp"
#include "sim.hpp"

using namespace autoddl;

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
