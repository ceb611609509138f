// A small data-parallel plan priced entirely by the compiler with the same constexpr functions
// the runtime search uses.
#include "autoddl/cost/collective_cost.hpp"
#include "autoddl/cost/compute.hpp"
#include "autoddl/cost/hardware.hpp"
#include "autoddl/cost/memory.hpp"
#include "autoddl/cost/step_time.hpp"
#include "autoddl/mesh/device_mesh.hpp"

namespace {
using namespace autoddl;

// A DGX-1-like machine, written inline (JSON loading is a runtime matter).
constexpr hardware dgx_like() {
  hardware h;
  h.name = "dgx-like";
  h.devices_per_node = 8;
  h.intra_node = link{1e-6, 100e9, "nvlink"};
  h.inter_node = link{1e-5, 10e9, "ib"};
  h.device.name = "gpu";
  h.device.peak_flops = {10e12, 100e12, 100e12};
  h.device.efficiency = {0.5, 0.5, 0.5, 0.5};
  h.device.memory_bytes = 16e9;
  h.device.memory_bandwidth = 1e12;
  return h;
}

constexpr bool near(double x, double y) { return (x > y ? x - y : y - x) <= 1e-12 * (y > 0 ? y : -y) + 1e-18; }

// links per axis: 16 on 8 per node is inter; 2x8 puts axis 1 inside the node
static_assert(make_device_mesh({2, 8}, dgx_like()).axis_link(1).name == link_name("nvlink"));
static_assert(make_device_mesh({2, 8}, dgx_like()).axis_link(0).name == link_name("ib"));
static_assert(make_device_mesh({16}, dgx_like()).axis_link(0).beta == 10e9);

// collectives: all-reduce of 1 MB on 4 devices over a 1 GB/s, 10 us link
static_assert(near(collective_time(collective::all_reduce, 4, 1000000, link{1e-5, 1e9, "l"}), 6e-5 + 1.5e-3));
static_assert(collective_time(collective::local_slice, 4, 1000000, link{1e-5, 1e9, "l"}) == 0);

// a link with a second regime beyond 1 MB of buffer: 1 ns/B and 1 ns/B reduced up to there,
// 4 ns/B and 3 ns/B beyond. Reduce-scatter of T = 4 MB on 4 devices: 3 alpha, 3 MB sent and
// 3 MB reduced, a quarter of them in the first regime:
// 3e-5 + 0.25 * (3e-3 + 3e-3) + 0.75 * (12e-3 + 9e-3) = 3e-5 + 1.5e-3 + 15.75e-3.
constexpr link two_regimes{1e-5, 1e9, "l", 1e-9, 1e6, 0.25e9, 3e-9};
static_assert(near(collective_time(collective::reduce_scatter, 4, 4000000, two_regimes), 3e-5 + 1.5e-3 + 15.75e-3));
static_assert(near(collective_time(collective::all_gather, 4, 4000000, two_regimes), 3e-5 + 0.75e-3 + 9e-3));
// up to large_bytes the first regime alone; a one-regime link is the Hockney formula bit for bit
static_assert(collective_time(collective::reduce_scatter, 4, 1000000, two_regimes) ==
              3 * 1e-5 + 750000 / 1e9 + 750000 * 1e-9);
static_assert(link{1e-5, 1e9, "l"}.time(3, 750000) == 3 * 1e-5 + 750000 / 1e9);

// Plan: 2-layer MLP X[512,1024] x W1[1024,4096] x W2[4096,1024], fp32, data parallel on 2x8:
// X [S(0),S(0)], W [B,B], gradients [P,P] boxed to [B,B] (hierarchical all-reduce).
constexpr double mlp_step(overlap_rule rule) {
  const hardware hw = dgx_like();
  const device_mesh m = make_device_mesh({2, 8}, hw);
  const double batch = 512.0 / 16;  // rows per device
  const double fwd_flops = 2 * batch * 1024 * 4096 * 2;
  step_terms t;
  t.compute_fwd = compute_time(fwd_flops, work_kind::gemm, dtype::fp32, hw.device);
  t.compute_bwd = compute_time(2 * fwd_flops, work_kind::gemm, dtype::fp32, hw.device);
  t.comm_grad = boxing_cost({{P, P}, {B, B}, {2, 8}, {1024, 4096}, 4}, m).cost +
                boxing_cost({{P, P}, {B, B}, {2, 8}, {4096, 1024}, 4}, m).cost;
  return step_time(t, rule);
}

constexpr double grad_sync() {
  const device_mesh m = make_device_mesh({2, 8}, dgx_like());
  return boxing_cost({{P, P}, {B, B}, {2, 8}, {1024, 4096}, 4}, m).cost;
}

// the gradient all-reduce is hierarchical: RS on the node, AR across nodes, AG on the node
constexpr std::int64_t T = 1024 * 4096 * 4;
constexpr double rs = 7 * 1e-6 + (7.0 / 8) * T / 100e9;
constexpr double ar = 2 * 1e-5 + 1.0 * (T / 8) / 10e9;
static_assert(near(grad_sync(), rs + ar + rs));
static_assert(cheapest_boxing({{P, P}, {B, B}, {2, 8}, {1024, 4096}, 4},
                              alpha_beta_cost{make_device_mesh({2, 8}, dgx_like())}).size() == 3);

// compute: 2 * 32 * 1024 * 4096 * 2 flops at 5 TFLOP/s, backward twice that
constexpr double fwd = 2 * 32.0 * 1024 * 4096 * 2 / 5e12;
static_assert(near(mlp_step(overlap_rule::none), fwd + 2 * fwd + 2 * grad_sync()));
// the sync (about 2 x 1.1 ms) is longer than backward (about 0.21 ms), so it is what shows
static_assert(near(mlp_step(overlap_rule::grad_sync_with_backward), fwd + 2 * grad_sync()));
static_assert(mlp_step(overlap_rule::grad_sync_with_backward) < mlp_step(overlap_rule::none));

// memory: W1 + W2 replicated, fp32 Adam
constexpr std::int64_t params = 2 * 1024 * 4096;
constexpr memory_breakdown mem{params * 4, params * 4, optimizer_state_bytes(optimizer::adam, params, dtype::fp32), 0, 0};
static_assert(mem.total() == params * 16);
}  // namespace

int main() {}
