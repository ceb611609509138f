// cpu_device's whole-convolution calls (oneDNN where the build links it: backend/cpu/dnnl_conv.hpp)
// against a direct seven-loop convolution in double written here, forward, input gradient, weight
// and bias gradients; and the geometries they decline (double, output planes under 16 elements).
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "autoddl/backend/cpu.hpp"

using namespace autoddl;

namespace {
std::vector<float> uniform(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = float(u(g));
  return v;
}
struct conv_ref {
  std::vector<double> y, dx, dw, db;
};
/// The four results by their definitions, in double.
conv_ref direct(const window_geom& g, std::int64_t o, const std::vector<float>& x, const std::vector<float>& w,
                const std::vector<float>& b, const std::vector<float>& dy) {
  const std::int64_t oh = g.out_h(), ow = g.out_w(), k = g.kernel;
  conv_ref r{std::vector<double>(std::size_t(g.n * o * oh * ow)), std::vector<double>(x.size()),
             std::vector<double>(w.size()), std::vector<double>(std::size_t(o))};
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t f = 0; f < o; ++f)
      for (std::int64_t i = 0; i < oh; ++i)
        for (std::int64_t j = 0; j < ow; ++j) {
          const auto yi = std::size_t(((n * o + f) * oh + i) * ow + j);
          double acc = b[std::size_t(f)];
          r.db[std::size_t(f)] += dy[yi];
          for (std::int64_t c = 0; c < g.c; ++c)
            for (std::int64_t ki = 0; ki < k; ++ki)
              for (std::int64_t kj = 0; kj < k; ++kj) {
                const std::int64_t h = i * g.stride - g.padding + ki, v = j * g.stride - g.padding + kj;
                if (h < 0 || h >= g.h || v < 0 || v >= g.w) continue;
                const auto xi = std::size_t(((n * g.c + c) * g.h + h) * g.w + v);
                const auto wi = std::size_t(((f * g.c + c) * k + ki) * k + kj);
                acc += double(w[wi]) * x[xi];
                r.dx[xi] += double(w[wi]) * dy[yi];
                r.dw[wi] += double(dy[yi]) * x[xi];
              }
          r.y[yi] = acc;
        }
  return r;
}
double worst(const std::vector<float>& got, const std::vector<double>& want) {
  double m = 0;
  for (std::size_t i = 0; i < got.size(); ++i) m = std::max(m, std::abs(got[i] - want[i]));
  return m;
}
}  // namespace

TEST_CASE("whole-convolution calls equal a direct convolution in double, where the build has them", "[backend][conv]") {
  cpu_device d;
  // VGG's 3x3 stride-1 padding-1 stages at 8x8 and 4x4, a 3x3 stride-2 window without padding, a 1x1
  const window_geom geoms[] = {{2, 3, 8, 8, 3, 1, 1}, {3, 8, 4, 4, 3, 1, 1}, {2, 4, 9, 9, 3, 2, 0}, {2, 6, 5, 5, 1, 1, 0}};
  std::uint64_t seed = 1;
  for (const window_geom& g : geoms) {
    const std::int64_t o = 5;
    INFO("n c h w " << g.n << " " << g.c << " " << g.h << " " << g.w << ", kernel " << g.kernel << " stride " << g.stride
                    << " padding " << g.padding);
    const auto x = uniform(std::size_t(g.n * g.c * g.h * g.w), seed++), w = uniform(std::size_t(o * g.c * g.kernel * g.kernel), seed++);
    const auto b = uniform(std::size_t(o), seed++), dy = uniform(std::size_t(g.n * o * g.out_h() * g.out_w()), seed++);
    std::vector<float> y(dy.size()), dx(x.size()), dw(w.size()), db(b.size());
    const bool ran = d.conv_fwd_direct<float>(g, o, x, w, b, y);
    REQUIRE(ran == bool(AUTODDL_HAS_DNNL));
    if (!ran) continue;
    REQUIRE(d.conv_bwd_data_direct<float>(g, o, w, dy, dx));
    REQUIRE(d.conv_bwd_weights_direct<float>(g, o, x, dy, dw, db));
    conv_ref r = direct(g, o, x, w, b, dy);
    const double tol = 1e-5 * double(g.c * g.kernel * g.kernel + g.n * g.out_h() * g.out_w());
    CHECK(worst(y, r.y) < tol);
    CHECK(worst(dx, r.dx) < tol);
    CHECK(worst(dw, r.dw) < tol);
    CHECK(worst(db, r.db) < tol);
    // without a bias: y is the product alone; dw the same without asking for db
    std::vector<float> y0(y.size()), dw0(w.size());
    REQUIRE(d.conv_fwd_direct<float>(g, o, x, w, {}, y0));
    REQUIRE(d.conv_bwd_weights_direct<float>(g, o, x, dy, dw0, {}));
    for (std::size_t i = 0; i < y0.size(); ++i) r.y[i] -= b[i / std::size_t(g.out_h() * g.out_w()) % std::size_t(o)];
    CHECK(worst(y0, r.y) < tol);
    CHECK(worst(dw0, r.dw) < tol);
  }
  // declined: double, and an output plane of 2x2 (im2col and one GEMM there)
  const window_geom small{2, 4, 2, 2, 3, 1, 1};
  const std::vector<double> xd(384), wd(5 * 27);
  std::vector<double> yd(640);
  CHECK_FALSE(d.conv_fwd_direct<double>(window_geom{2, 3, 8, 8, 3, 1, 1}, 5, xd, wd, {}, yd));
  std::vector<float> xs(32), ws(5 * 36), ys(40);
  CHECK_FALSE(d.conv_fwd_direct<float>(small, 5, xs, ws, {}, ys));
}

#if AUTODDL_HAS_DNNL
TEST_CASE("a oneDNN convolution leaves the caller's OpenMP thread count as it found it", "[backend][conv]") {
  // oneDNN runs on one thread for the call; the program's own setting (here 3) holds after it
  cpu_device d;
  const window_geom g{2, 3, 8, 8, 3, 1, 1};
  const std::int64_t o = 5;
  const auto x = uniform(std::size_t(g.n * g.c * g.h * g.w), 11), w = uniform(std::size_t(o * g.c * g.kernel * g.kernel), 12);
  std::vector<float> y(std::size_t(g.n * o * g.out_h() * g.out_w()));
  const int before = omp_get_max_threads();
  omp_set_num_threads(3);
  REQUIRE(d.conv_fwd_direct<float>(g, o, x, w, {}, y));
  CHECK(omp_get_max_threads() == 3);
  omp_set_num_threads(before);
}
#endif
