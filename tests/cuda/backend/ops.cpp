// op_forward / op_backward on cuda_device against cpu_device, unchanged kernels of
// autoddl/runtime/op_kernels.hpp: every op case of the runtime tests and the ops of small gpt
// and vgg models, in float (and the half types for a transformer's ops). The reference is the
// CPU in double on the same T-rounded operands; the last case runs optimizer steps on the
// parameters of a small GPT's ops, op by op, and compares the updated parameters.
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>

#include <random>
#include <string>
#include <vector>

#include "autoddl/backend/cpu.hpp"
#include "autoddl/models.hpp"
#include "autoddl/runtime/op_kernels.hpp"
#include "cases.hpp"
#include "harness.hpp"
#include "sim.hpp"

using namespace autoddl;
using namespace cudatest;

namespace {

struct op_result {
  std::vector<double> y;
  std::vector<std::vector<double>> dinputs, dparams;
};

/// Serial run of `op` in double on the CPU.
op_result run_cpu(const op_node& op, const sim::global_operands& g, const std::vector<double>& dy, std::uint64_t seed) {
  cpu_device dev;
  auto ctx = make_kernel_context<double>(op, all_broadcast(op, 1), mesh_shape{1}, {}, seed, 7);
  operands<double> in;
  for (std::size_t i = 0; i < op.inputs.size(); ++i) in.inputs.push_back(std::span<const double>(g.inputs[i].v));
  for (const auto& p : g.params) in.params.push_back(std::span<const double>(p.v));
  in.indices = g.indices;
  auto f = op_forward(dev, ctx, in);
  auto gr = op_backward(dev, ctx, in, f, std::span<const double>(dy));
  auto host = [](const auto& v) { return std::vector<double>(v.begin(), v.end()); };  // from a device buffer
  op_result r{host(f.outputs[0]), {}, {}};
  for (auto& v : gr.inputs) r.dinputs.push_back(host(v));
  for (auto& v : gr.params) r.dparams.push_back(host(v));
  return r;
}

/// Serial run of `op` in T on the GPU.
template <class T>
op_result run_cuda(cuda_device& dev, const op_node& op, const sim::global_operands& g, const std::vector<double>& dy,
                   std::uint64_t seed) {
  using D = cuda_device;
  auto ctx = make_kernel_context<T>(op, all_broadcast(op, 1), mesh_shape{1}, {}, seed, 7);
  std::vector<dvec<T>> ins, prs;
  for (const auto& t : g.inputs) ins.emplace_back(dev, t.v);
  for (const auto& t : g.params) prs.emplace_back(dev, t.v);
  ivec idx(dev, g.indices);
  dvec<T> ddy(dev, dy);
  operands<T> in;
  for (const auto& v : ins) in.inputs.push_back(v.c());
  for (const auto& v : prs) in.params.push_back(v.c());
  in.indices = idx.c();
  forward_result<D, T> f = op_forward(dev, ctx, in);
  gradients<D, T> gr = op_backward(dev, ctx, in, f, ddy.c());
  auto get = [&](const cuda_buffer<T>& b) {
    std::vector<T> h(b.size());
    dev.download(dev.view(b), std::span<T>(h));
    std::vector<double> r(h.size());
    for (std::size_t i = 0; i < h.size(); ++i) r[i] = to_double(h[i]);
    return r;
  };
  op_result r{get(f.outputs[0]), {}, {}};
  for (const auto& b : gr.inputs) r.dinputs.push_back(get(b));
  for (const auto& b : gr.params) r.dparams.push_back(get(b));
  return r;
}

/// Operands and dY rounded to T.
template <class T>
void round_all(sim::global_operands& g, std::vector<double>& dy) {
  for (auto& t : g.inputs) t.v = rounded<T>(t.v);
  for (auto& t : g.params) t.v = rounded<T>(t.v);
  dy = rounded<T>(dy);
}

template <class T>
void compare_op(cuda_device& dev, const op_node& op, std::uint64_t seed, double tolerance) {
  std::mt19937_64 rng(seed);
  sim::global_operands g = sim::random_operands(op, rng);
  std::vector<double> dy = sim::random_tensor(op.outputs[0], rng).v;
  round_all<T>(g, dy);
  const op_result ref = run_cpu(op, g, dy, seed), got = run_cuda<T>(dev, op, g, dy, seed);
  INFO(type_name<T>() << " op '" << op.name << "' (" << to_string(op.kind) << ", seed " << seed << ")");
  CHECK(rel_err(got.y, ref.y) <= tolerance);
  REQUIRE(got.dinputs.size() == ref.dinputs.size());
  REQUIRE(got.dparams.size() == ref.dparams.size());
  for (std::size_t i = 0; i < ref.dinputs.size(); ++i) {
    INFO("input " << i);
    CHECK(rel_err(got.dinputs[i], ref.dinputs[i]) <= tolerance);
  }
  for (std::size_t i = 0; i < ref.dparams.size(); ++i) {
    INFO("parameter " << i);
    CHECK(rel_err(got.dparams[i], ref.dparams[i]) <= tolerance);
  }
}

}  // namespace

TEST_CASE("every op case runs on the CUDA device and matches the CPU in float", "[cuda][ops]") {
  cuda_device dev;
  for (const op_node& op : sim::op_cases()) compare_op<float>(dev, op, 5, 1e-4);
}

TEST_CASE("the ops of small gpt, vgg and llama models run on the CUDA device and match the CPU", "[cuda][ops][models]") {
  cuda_device dev;
  for (const char* spec : {"gpt:layers=1,hidden=64,heads=4,seq=32,batch=4,vocab=128", "vgg11:image=32,batch=2,fc=32,classes=8",
                           "llama:layers=1,hidden=64,heads=4,kv_heads=2,ffn=96,seq=16,batch=4,vocab=96,qkv_bias=1,qk_norm=1",
                           "llama:layers=1,hidden=64,heads=4,kv_heads=2,ffn=64,experts=4,topk=2,seq=16,batch=4,vocab=96"}) {
    const graph g = build_model(spec);
    INFO(spec);
    for (std::size_t i = 0; i < g.ops.size(); ++i) compare_op<float>(dev, g.ops[i], 100 + i, 1e-4);
  }
}

TEMPLATE_TEST_CASE("a transformer's ops run in the half types within their precision", "[cuda][ops][half]", __half,
                   __nv_bfloat16) {
  using T = TestType;
  cuda_device dev;
  const graph g = build_model("gpt:layers=1,hidden=64,heads=4,seq=32,batch=4,vocab=128");
  // bfloat16 keeps 8 significant bits: a chain of GEMM, softmax and GEMM each rounding once
  const double tolerance = std::is_same_v<T, __half> ? 3e-2 : 6e-2;
  for (std::size_t i = 0; i < g.ops.size(); ++i) compare_op<T>(dev, g.ops[i], 200 + i, tolerance);
}

TEST_CASE("training steps of a small GPT's ops on the CUDA device track the CPU", "[cuda][ops][train]") {
  // Op by op (no executor yet): forward, backward with dY = a fixed random tensor, then an
  // SGD-momentum step on every parameter, three times; parameters must stay within float
  // tolerance. (SGD, not Adam: Adam's first step is lr * sign(g), which turns float noise in a
  // near-zero gradient into a difference of lr.)
  cuda_device dev;
  cpu_device cpu;
  const graph gr = build_model("gpt:layers=2,hidden=64,heads=4,seq=32,batch=4,vocab=128");
  optimizer_step o;
  o.lr = 1e-2;
  o.weight_decay = 1e-3;
  for (std::size_t i = 0; i < gr.ops.size(); ++i) {
    const op_node& op = gr.ops[i];
    if (op.params.empty()) continue;
    INFO("op '" << op.name << "'");
    std::mt19937_64 rng(300 + i);
    sim::global_operands g = sim::random_operands(op, rng);
    std::vector<double> dy = sim::random_tensor(op.outputs[0], rng).v;
    round_all<float>(g, dy);
    std::vector<std::vector<double>> vel;
    std::vector<dvec<float>> dp, dvel;
    for (const auto& p : g.params) {
      vel.emplace_back(p.v.size(), 0.0);
      dp.emplace_back(dev, p.v);
      dvel.emplace_back(dev, vel.back());
    }
    for (int step = 1; step <= 3; ++step) {
      const op_result ref = run_cpu(op, g, dy, 9);
      sim::global_operands gd = g;
      for (std::size_t j = 0; j < g.params.size(); ++j) gd.params[j].v = dp[j].get();
      const op_result got = run_cuda<float>(dev, op, gd, dy, 9);
      for (std::size_t j = 0; j < g.params.size(); ++j) {
        cpu.sgd_momentum(o, cs(ref.dparams[j]), ms(vel[j]), ms(g.params[j].v));
        dvec<float> dg(dev, got.dparams[j]);
        dev.sgd_momentum(o, dg.c(), dvel[j].m(), dp[j].m());
        INFO("step " << step << " parameter " << j);
        CHECK(rel_err(dp[j].get(), g.params[j].v) <= 1e-4);
      }
    }
  }
}
