// The float paths of cpu_device that run in float lanes (backend/cpu/vector_math.hpp) against
// the same formulas in double through libm, on lengths that leave a tail shorter than a lane block; and the
// integer form of the dropout test against dropout_keep itself.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "autoddl/backend/cpu.hpp"

using namespace autoddl;

namespace {
std::vector<float> uniform(std::size_t n, std::uint64_t seed, double lo, double hi) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = float(u(g));
  return v;
}
/// |got - want| <= tol (1 + |want|) for every element, the worst excess reported.
double worst_excess(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  double w = 0;
  for (std::size_t i = 0; i < got.size(); ++i) w = std::max(w, std::abs(double(got[i]) - want[i]) - tol * (1 + std::abs(want[i])));
  return w;
}
double gelu(double v) { return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))); }
double silu(double v) { return v / (1 + std::exp(-v)); }
}  // namespace

TEST_CASE("lane e^x is within 2 ulp of e^x over float's normal range, 0 below it, NaN kept", "[backend][lanes]") {
  double worst = 0;
  for (double x = -87.3; x < 88.3; x += 0.00731) {
    const float e = detail::exp_lanes<detail::f32x4>((detail::f32x4{} + float(x)))[0];
    const double ref = std::exp(double(float(x)));
    worst = std::max(worst, std::abs(e - ref) / ref);
  }
  CHECK(worst < 2 * std::numeric_limits<float>::epsilon());
  CHECK(detail::exp_lanes<detail::f32x4>((detail::f32x4{} + -std::numeric_limits<float>::infinity()))[1] == 0.0f);
  CHECK(detail::exp_lanes<detail::f32x4>((detail::f32x4{} + -100.0f))[2] == 0.0f);
  CHECK(std::isnan(detail::exp_lanes<detail::f32x4>((detail::f32x4{} + std::numeric_limits<float>::quiet_NaN()))[3]));
  CHECK(detail::exp_lanes<detail::f32x4>((detail::f32x4{} + 0.0f))[0] == 1.0f);
}

TEST_CASE("float GeLU and SiLU and their backward follow the double formulas to float precision", "[backend][lanes]") {
  cpu_device d;
  for (std::size_t n : {std::size_t(1), std::size_t(7), std::size_t(1003)}) {
    const auto x = uniform(n, 3 + n, -9, 9), dy = uniform(n, 4 + n, -1, 1);
    std::vector<float> y(n), dx(n);
    std::vector<double> ref(n), dref(n);
    for (std::size_t i = 0; i < n; ++i) {
      const double v = x[i], h = 1e-5;
      ref[i] = gelu(v);
      dref[i] = dy[i] * (gelu(v + h) - gelu(v - h)) / (2 * h);
    }
    d.gelu_fwd<float>(x, y);
    d.gelu_bwd<float>(x, dy, dx);
    CHECK(worst_excess(y, ref, 1e-6) <= 0);
    CHECK(worst_excess(dx, dref, 1e-5) <= 0);
    for (std::size_t i = 0; i < n; ++i) {
      const double v = x[i], h = 1e-5;
      ref[i] = silu(v);
      dref[i] = dy[i] * (silu(v + h) - silu(v - h)) / (2 * h);
    }
    d.silu_fwd<float>(x, y);
    d.silu_bwd<float>(x, dy, dx);
    CHECK(worst_excess(y, ref, 1e-6) <= 0);
    CHECK(worst_excess(dx, dref, 1e-5) <= 0);
  }
}

TEST_CASE("float sums, products, ReLU, biases and the optimizer updates follow the double formulas in every lane and tail", "[backend][lanes]") {
  // Oracle: each formula evaluated in double on the same float inputs (the double paths are the
  // scalar loops); float lanes may contract a * b + c into one rounding, so the bound is a few ulp.
  cpu_device d;
  constexpr double ulp = std::numeric_limits<float>::epsilon();
  for (std::size_t n : {std::size_t(1), std::size_t(7), std::size_t(16), std::size_t(1003)}) {
    INFO("n = " << n);
    const auto a = uniform(n, 11 + n, -3, 3), b = uniform(n, 12 + n, -3, 3), g = uniform(n, 13 + n, -1, 1);
    std::vector<float> y(n);
    std::vector<double> ref(n);
    d.add<float>(a, b, y);
    for (std::size_t i = 0; i < n; ++i) ref[i] = double(a[i]) + b[i];
    CHECK(worst_excess(y, ref, ulp) <= 0);
    d.mul<float>(a, b, y);
    for (std::size_t i = 0; i < n; ++i) ref[i] = double(a[i]) * b[i];
    CHECK(worst_excess(y, ref, ulp) <= 0);
    y = b;
    d.axpy<float>(0.375f, a, y);
    for (std::size_t i = 0; i < n; ++i) ref[i] = b[i] + 0.375 * a[i];
    CHECK(worst_excess(y, ref, ulp) <= 0);
    y = a;
    d.scale<float>(-2.5f, y);
    for (std::size_t i = 0; i < n; ++i) ref[i] = -2.5 * a[i];
    CHECK(worst_excess(y, ref, ulp) <= 0);
    d.relu_fwd<float>(a, y);
    for (std::size_t i = 0; i < n; ++i) CHECK(y[i] == (a[i] > 0 ? a[i] : 0.0f));
    d.relu_bwd<float>(a, g, y);
    for (std::size_t i = 0; i < n; ++i) CHECK(y[i] == (a[i] > 0 ? g[i] : 0.0f));

    optimizer_step o;
    o.lr = 0.05;
    o.momentum = 0.9;
    o.weight_decay = 0.01;
    o.step = 3;
    std::vector<float> p = a, vel = b;
    d.sgd_momentum<float>(o, g, vel, p);
    std::vector<double> pv(n);
    for (std::size_t i = 0; i < n; ++i) {
      ref[i] = 0.9 * b[i] + g[i] + 0.01 * a[i];
      pv[i] = a[i] - 0.05 * ref[i];
    }
    CHECK(worst_excess(vel, ref, 4 * ulp) <= 0);
    CHECK(worst_excess(p, pv, 4 * ulp) <= 0);
    std::vector<float> m = b, v = uniform(n, 14 + n, 0, 2);
    const std::vector<float> v0 = v;
    p = a;
    d.adam<float>(o, g, m, v, p);
    const double c1 = 1 - std::pow(0.9, 3), c2 = 1 - std::pow(0.999, 3);
    for (std::size_t i = 0; i < n; ++i) {
      const double gi = g[i] + 0.01 * a[i], nm = 0.9 * b[i] + 0.1 * gi, nv = 0.999 * v0[i] + 0.001 * gi * gi;
      ref[i] = nm;
      pv[i] = a[i] - 0.05 * (nm / c1) / (std::sqrt(nv / c2) + 1e-8);
    }
    CHECK(worst_excess(m, ref, 4 * ulp) <= 0);
    CHECK(worst_excess(p, pv, 8 * ulp) <= 0);
  }
  // bias_add and bias_grad over [outer, channels, inner], inner 1 (a linear's rows) and longer
  // runs than a lane block (a convolution's planes).
  for (std::int64_t inner : {std::int64_t(1), std::int64_t(5), std::int64_t(37)}) {
    INFO("inner = " << inner);
    const std::int64_t outer = 3, ch = 19;
    const auto x = uniform(std::size_t(outer * ch * inner), 20 + std::uint64_t(inner), -2, 2);
    const auto bias = uniform(std::size_t(ch), 21, -2, 2);
    std::vector<float> y = x, db(static_cast<std::size_t>(ch));
    d.bias_add<float>(outer, ch, inner, bias, y);
    d.bias_grad<float>(outer, ch, inner, x, db);
    std::vector<double> ref(y.size()), dref(db.size());
    for (std::int64_t o2 = 0; o2 < outer; ++o2)
      for (std::int64_t c = 0; c < ch; ++c)
        for (std::int64_t i = 0; i < inner; ++i) {
          const auto at = std::size_t((o2 * ch + c) * inner + i);
          ref[at] = double(x[at]) + bias[std::size_t(c)];
          dref[std::size_t(c)] += x[at];
        }
    CHECK(worst_excess(y, ref, ulp) <= 0);
    CHECK(worst_excess(db, dref, double(outer * inner) * ulp) <= 0);
  }
}

TEST_CASE("float softmax, its backward and cross-entropy follow the double formulas to float precision", "[backend][lanes]") {
  cpu_device d;
  const std::int64_t rows = 5, cols = 39;
  const auto x = uniform(std::size_t(rows * cols), 5, -6, 6), dy = uniform(x.size(), 6, -1, 1);
  std::vector<float> y(x.size()), dx(x.size());
  d.softmax_fwd<float>(rows, cols, x, y);
  d.softmax_bwd<float>(rows, cols, y, dy, dx);
  std::vector<double> p(x.size()), dref(x.size()), xref(x.size());
  const std::vector<std::int64_t> labels{0, 38, 7, 100, 20};  // 100: another device's column
  std::vector<float> m(rows), stats(2 * rows), dlogits(x.size());
  d.row_max<float>(rows, cols, x, m);
  d.xent_stats<float>(rows, cols, x, labels, 0, m, stats);
  const std::vector<float> dloss{2.0f};
  d.xent_bwd<float>(rows, cols, x, labels, 0, m, stats, dloss, 0.25f, dlogits);
  for (std::int64_t r = 0; r < rows; ++r) {
    double s = 0, dot = 0;
    for (std::int64_t c = 0; c < cols; ++c) s += std::exp(double(x[std::size_t(r * cols + c)]));
    for (std::int64_t c = 0; c < cols; ++c) p[std::size_t(r * cols + c)] = std::exp(double(x[std::size_t(r * cols + c)])) / s;
    for (std::int64_t c = 0; c < cols; ++c) dot += p[std::size_t(r * cols + c)] * dy[std::size_t(r * cols + c)];
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::size_t i = std::size_t(r * cols + c);
      dref[i] = p[i] * (dy[i] - dot);
      xref[i] = 0.5 * (p[i] - (labels[std::size_t(r)] == c ? 1.0 : 0.0));
    }
    const double sum_shifted = s * std::exp(-double(m[std::size_t(r)]));
    CHECK(std::abs(stats[std::size_t(r)] - sum_shifted) <= 1e-6 * sum_shifted);
  }
  CHECK(worst_excess(y, p, 1e-6) <= 0);
  CHECK(worst_excess(dx, dref, 1e-6) <= 0);
  CHECK(worst_excess(dlogits, xref, 1e-6) <= 0);
}

TEST_CASE("the integer dropout test keeps exactly what dropout_keep keeps, in any block of a shard", "[backend][dropout]") {
  // Rows of 5 (shorter than any lane block) and of 100 (whole blocks and a tail) elements; a kept
  // element is x / (1 - p) exactly as the scalar product rounds it.
  cpu_device d;
  const shard_info short_rows = make_shard(tensor_shape{3, 6, 10}, nd_sbp{S(2), S(1)}, mesh_shape{2, 2}, {1, 1, 0, 0});
  const shard_info long_rows = make_shard(tensor_shape{2, 6, 100}, nd_sbp{S(1), B}, mesh_shape{2, 2}, {1, 0, 0, 0});
  for (const shard_info& s : {short_rows, long_rows})
    for (double p : {0.0, 0.1, 1.0 / 3, 0.5, 0.9}) {
      const dropout_key key{7, 11, p};
      const std::vector<float> x = uniform(std::size_t(s.local.elements()), 5, 0.5, 2);
      std::vector<float> y(x.size());
      d.dropout<float>(key, s, x, y);
      const float scale = float(1.0 / (1.0 - p));
      detail::for_each_global_index(s, [&](std::int64_t i, std::int64_t gi) {
        const bool kept = dropout_keep(7, 11, std::uint64_t(gi), p);
        CHECK(y[std::size_t(i)] == (kept ? x[std::size_t(i)] * scale : 0.0f));
      });
    }
}
