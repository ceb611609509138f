#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "autoddl/cost/calibration.hpp"
#include "autoddl/cost/compute.hpp"
#include "autoddl/cost/memory.hpp"
#include "autoddl/cost/step_time.hpp"

using namespace autoddl;
using Catch::Approx;

namespace model_cases {
using autoddl::link;  // <unistd.h>, read by another file of the unity build, declares ::link

namespace {
device_spec gpu() {
  device_spec d;
  d.name = "g";
  d.peak_flops = {10e12, 100e12, 0};
  d.efficiency = {0.8, 0.5, 0.25, 0.8};
  d.memory_bytes = 16e9;
  d.memory_bandwidth = 1e12;
  return d;
}
}  // namespace

TEST_CASE("compute time is flops over peak times efficiency", "[cost][compute]") {
  // 2*1024^3 flops of fp32 GEMM at 10 TFLOP/s * 0.8
  CHECK(compute_time(2.0 * 1024 * 1024 * 1024, work_kind::gemm, dtype::fp32, gpu()) ==
        Approx(2.0 * 1073741824 / 8e12));
  CHECK(compute_time(1e12, work_kind::conv, dtype::fp16, gpu()) == Approx(1e12 / 50e12));
  CHECK_THROWS_AS(compute_time(1, work_kind::gemm, dtype::bf16, gpu()), error);
}

TEST_CASE("element-wise work is priced by the roofline", "[cost][compute]") {
  // 1e9 flops at 2.5 TFLOP/s = 0.4 ms; 4e9 bytes at 1 TB/s = 4 ms: memory bound
  CHECK(elementwise_time(1e9, 4e9, dtype::fp32, gpu()) == Approx(4e-3));
  // 1e12 flops = 0.4 s vs 1e6 bytes: compute bound
  CHECK(elementwise_time(1e12, 1e6, dtype::fp32, gpu()) == Approx(0.4));
}

TEST_CASE("optimizer state follows ZeRO's K per element", "[cost][memory]") {
  CHECK(optimizer_state_bytes(optimizer::adam, 1000, dtype::fp16) == 12000);
  CHECK(optimizer_state_bytes(optimizer::adam, 1000, dtype::bf16) == 12000);
  CHECK(optimizer_state_bytes(optimizer::adam, 1000, dtype::fp32) == 8000);
  CHECK(optimizer_state_bytes(optimizer::sgd_momentum, 1000, dtype::fp16) == 8000);
  CHECK(optimizer_state_bytes(optimizer::sgd_momentum, 1000, dtype::fp32) == 4000);
  // fp64 (the CPU executor's double): no master copy, each state 8 bytes
  CHECK(optimizer_state_bytes(optimizer::adam, 1000, dtype::fp64) == 16000);
  CHECK(optimizer_state_bytes(optimizer::sgd_momentum, 1000, dtype::fp64) == 8000);
  CHECK(parse_optimizer("adam") == optimizer::adam);
  CHECK_THROWS_AS(parse_optimizer("lamb"), parse_error);
}

TEST_CASE("memory breakdowns add persistent bytes and keep the largest transient", "[cost][memory]") {
  // 7.5B-parameter model, fp16, Adam, 64-way ZeRO-3 shards: ZeRO paper's 2+2+12 bytes/param
  const std::int64_t psi = 7'500'000'000, nd = 64;
  memory_breakdown m{2 * psi / nd, 2 * psi / nd, optimizer_state_bytes(optimizer::adam, psi, dtype::fp16) / nd, 0, 0};
  CHECK(m.total() == 16 * psi / nd);  // 1.875 GB
  memory_breakdown a{10, 10, 20, 100, 50}, b{1, 1, 2, 30, 70};
  a += b;
  CHECK(a == memory_breakdown{11, 11, 22, 130, 70});
  CHECK(a.total() == 11 + 11 + 22 + 130 + 70);
}

TEST_CASE("gradient synchronisation hides behind backward compute", "[cost][step]") {
  step_terms t{1.0, 2.0, 0.1, 0.2, 1.5};
  CHECK(step_time(t) == Approx(1.0 + 0.1 + 0.2 + 2.0));
  CHECK(step_time(t, overlap_rule::none) == Approx(1.0 + 2.0 + 0.1 + 0.2 + 1.5));
  step_terms comm_bound{1.0, 2.0, 0.1, 0.2, 3.5};
  CHECK(step_time(comm_bound) == Approx(1.0 + 0.1 + 0.2 + 3.5));
  // 4 micro-batches: three backwards of 0.5 s accumulate, the sync hides behind the last one only
  CHECK(step_time(t, overlap_rule::grad_sync_with_backward, 4) == Approx(1.3 + 3 * 0.5 + 1.5));
  step_terms compute_bound{1.0, 8.0, 0.1, 0.2, 1.5};
  CHECK(step_time(compute_bound, overlap_rule::grad_sync_with_backward, 4) == Approx(1.3 + 8.0));
  CHECK(step_time(t, overlap_rule::none, 4) == step_time(t, overlap_rule::none));
  step_terms sum = t;
  sum += comm_bound;
  CHECK(sum == step_terms{2.0, 4.0, 0.2, 0.4, 5.0});
  CHECK(parse_dtype("bf16") == dtype::bf16);
  CHECK(bytes_of(dtype::fp16) == 2);
  CHECK(parse_dtype("fp64") == dtype::fp64);
  CHECK(bytes_of(dtype::fp64) == 8);
  CHECK(to_string(dtype::fp64) == "fp64");
  CHECK_THROWS_AS(parse_dtype("fp8"), parse_error);
}

TEST_CASE("least squares recovers alpha and beta from exact samples", "[cost][calibration]") {
  const link truth{2e-6, 3e9, "truth"};
  std::vector<timing_sample> v;
  for (collective c : {collective::all_gather, collective::all_reduce, collective::all_to_all})
    for (std::int64_t n : {2, 3, 4})
      for (std::int64_t bytes = 4096; bytes <= (64 << 20); bytes *= 4)
        v.push_back(sample_of(c, n, bytes, collective_time(c, n, bytes, truth)));
  link fit = fit_link(v, "fit");
  CHECK(fit.alpha == Approx(2e-6).epsilon(1e-9));
  CHECK(fit.beta == Approx(3e9).epsilon(1e-9));
  CHECK(fit.name == link_name("fit"));
  // noise-free bandwidth-only data: alpha clamps to 0
  std::vector<timing_sample> bw{{1, 1e6, 1e-3}, {1, 2e6, 2e-3}, {3, 4e6, 4e-3}};
  link f2 = fit_link(bw, "bw");
  CHECK(f2.alpha >= 0);
  CHECK(f2.beta == Approx(1e9).epsilon(1e-6));
  CHECK_THROWS_AS(fit_link({{1, 0, 1e-6}}, "x"), error);
  CHECK_THROWS_AS(fit_link({{1, 10, 0}}, "x"), error);
}

TEST_CASE("the two-range fit takes beta from large runs and alpha from small ones", "[cost][calibration]") {
  const autoddl::link cache{1e-6, 10e9, "cache"}, dram{1e-6, 2e9, "dram"};
  std::vector<timing_sample> v;
  for (std::int64_t bytes = 4096; bytes <= (64 << 20); bytes *= 4) {
    const autoddl::link& l = bytes < (1 << 20) ? cache : dram;
    v.push_back(sample_of(collective::all_gather, 4, bytes, collective_time(collective::all_gather, 4, bytes, l)));
  }
  autoddl::link two = fit_link_two_ranges(v, "two", 1 << 20);
  CHECK(two.beta == Approx(2e9).epsilon(0.01));
  CHECK(two.alpha >= 0);
  CHECK(fit_link(v, "one").beta > 1.2 * 2e9);  // the single fit is pulled up by the cache sizes
  // linear data: both fits recover the truth
  std::vector<timing_sample> lin;
  for (std::int64_t bytes = 4096; bytes <= (64 << 20); bytes *= 4)
    lin.push_back(sample_of(collective::all_reduce, 3, bytes, collective_time(collective::all_reduce, 3, bytes, cache)));
  autoddl::link exact = fit_link_two_ranges(lin, "lin", 1 << 20);
  CHECK(exact.alpha == Approx(1e-6).epsilon(1e-6));
  CHECK(exact.beta == Approx(10e9).epsilon(1e-6));
  // one range only: the plain fit
  std::vector<timing_sample> big(v.end() - 3, v.end());
  CHECK(fit_link_two_ranges(big, "x", 1 << 20).beta == Approx(fit_link(big, "x").beta));
}

TEST_CASE("the two-range fit recovers the reduction cost gamma", "[cost][calibration]") {
  autoddl::link truth{5e-7, 8e9, "t"};
  truth.gamma = 1.0 / 4e9;
  std::vector<timing_sample> v;
  for (collective c : {collective::all_gather, collective::reduce_scatter, collective::all_reduce, collective::all_to_all})
    for (std::int64_t bytes = 4096; bytes <= (64 << 20); bytes *= 4)
      v.push_back(sample_of(c, 3, bytes, collective_time(c, 3, bytes, truth)));
  autoddl::link fit = fit_link_two_ranges(v, "t", 1 << 20);
  CHECK(fit.alpha == Approx(5e-7).epsilon(1e-6));
  CHECK(fit.beta == Approx(8e9).epsilon(1e-6));
  CHECK(fit.gamma == Approx(1.0 / 4e9).epsilon(1e-6));
}

TEST_CASE("the two-regime fit recovers a known cache cliff exactly from synthetic timings", "[cost][calibration]") {
  // 4 MiB of buffer in the first regime at 10 GB/s and 0.1 ns/B reduced, beyond at 4 GB/s and 0.3 ns/B
  const autoddl::link truth{3e-7, 10e9, "t", 1e-10, double(4 << 20), 4e9, 3e-10};
  for (std::int64_t n : {2, 4, 8}) {
    INFO("n = " << n);
    std::vector<timing_sample> v;
    for (collective c : {collective::all_gather, collective::reduce_scatter, collective::all_reduce, collective::all_to_all})
      for (std::int64_t bytes = 4096; bytes <= (64 << 20); bytes *= 4)
        v.push_back(sample_of(c, n, bytes, collective_time(c, n, bytes, truth)));
    const autoddl::link at = fit_link_two_regimes_at(v, "t", 1 << 20, double(4 << 20));
    const autoddl::link fit = fit_link_two_regimes(v, "t", 1 << 20);
    for (const autoddl::link& l : {at, fit}) {
      CHECK(l.large_bytes == double(4 << 20));
      CHECK(l.alpha == Approx(3e-7).epsilon(1e-9));
      CHECK(l.beta == Approx(10e9).epsilon(1e-9));
      CHECK(l.gamma == Approx(1e-10).epsilon(1e-9));
      CHECK(l.beta_large == Approx(4e9).epsilon(1e-9));
      CHECK(l.gamma_large == Approx(3e-10).epsilon(1e-9));
      CHECK(l.name == link_name("t"));
    }
    // one regime is what the one-regime fit gets wrong: it leaves a larger error
    CHECK(detail::relative_error(fit_link_two_ranges(v, "t", 1 << 20), v, 1 << 20) > 100 * detail::relative_error(fit, v, 1 << 20));
  }
}

TEST_CASE("the two-regime fit keeps one regime on data without a cliff", "[cost][calibration]") {
  autoddl::link truth{5e-7, 8e9, "t"};
  truth.gamma = 1.0 / 4e9;
  std::vector<timing_sample> v;
  for (collective c : {collective::all_gather, collective::reduce_scatter, collective::all_reduce, collective::all_to_all})
    for (std::int64_t bytes = 4096; bytes <= (64 << 20); bytes *= 4)
      v.push_back(sample_of(c, 3, bytes, collective_time(c, 3, bytes, truth)));
  const autoddl::link fit = fit_link_two_regimes(v, "t", 1 << 20);
  CHECK_FALSE(fit.two_regimes());
  CHECK(fit.beta == Approx(8e9).epsilon(1e-6));
  CHECK(fit.gamma == Approx(1.0 / 4e9).epsilon(1e-6));
  // without runs beyond the split there is nothing to fit the second regime on
  CHECK_THROWS_WITH(fit_link_two_regimes_at(v, "t", 1 << 20, double(64 << 20)),
                    Catch::Matchers::ContainsSubstring("needs runs below"));
  CHECK_THROWS_AS(fit_link_two_regimes({{1, 10, 0, 4096}}, "x", 1 << 20), error);
}

}  // namespace model_cases
