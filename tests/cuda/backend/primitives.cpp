// Each cuda_device primitive against cpu_device on fresh random inputs, in float, double,
// __half and __nv_bfloat16: inputs are rounded to the element type, the CPU runs in double on
// the rounded values, and the device's result must agree within cudatest::tol<T>() relative to
// max(1, max |reference|). Dropout must draw the CPU's mask exactly.
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "autoddl/backend/cpu.hpp"
#include "harness.hpp"

using namespace autoddl;
using namespace cudatest;

#define CUDA_TYPES float, double, __half, __nv_bfloat16

TEMPLATE_TEST_CASE("gemm matches the CPU for every transpose, batch and beta", "[cuda][gemm]", CUDA_TYPES) {
  using T = TestType;
  cuda_device dev;
  cpu_device cpu;
  const std::int64_t m = 33, n = 17, k = 65, batch = 3;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (double beta : {0.0, 0.5}) {
        INFO(type_name<T>() << " trans_a " << ta << " trans_b " << tb << " beta " << beta);
        auto a = rounded<T>(rnd(std::size_t(batch * m * k), 1)), b = rounded<T>(rnd(std::size_t(batch * k * n), 2));
        auto c = rounded<T>(rnd(std::size_t(batch * m * n), 3)), ref = c;
        const gemm_desc g{ta, tb, m, n, k, ta ? m : k, tb ? k : n, n, batch, m * k, k * n, m * n};
        cpu.gemm(g, 1.5, cs(a), cs(b), beta, ms(ref));
        dvec<T> da(dev, a), db(dev, b), dc(dev, c);
        dev.gemm(g, from_double<T>(1.5), da.c(), db.c(), from_double<T>(beta), dc.m());
        CHECK(rel_err(dc.get(), ref) <= tol<T>() * 2);  // float accumulation; one rounding to T
      }
}

TEMPLATE_TEST_CASE("element-wise primitives match the CPU", "[cuda][elementwise]", CUDA_TYPES) {
  using T = TestType;
  INFO(type_name<T>());
  cuda_device dev;
  cpu_device cpu;
  const std::size_t n = 100003;  // not a multiple of the block size
  auto x = rounded<T>(rnd(n, 11)), y = rounded<T>(rnd(n, 12));
  std::vector<double> r(n, 0.0);
  dvec<T> dx(dev, x), dy(dev, y), dr(dev, r);
  cpu.add(cs(x), cs(y), ms(r));
  dev.add(dx.c(), dy.c(), dr.m());
  CHECK(rel_err(dr.get(), r) <= tol<T>());
  cpu.axpy(0.75, cs(x), ms(r));
  dev.axpy(from_double<T>(0.75), dx.c(), dr.m());
  CHECK(rel_err(dr.get(), r) <= tol<T>());
  cpu.scale(-2.0, ms(r));
  dev.scale(from_double<T>(-2.0), dr.m());
  CHECK(rel_err(dr.get(), r) <= tol<T>());
  cpu.fill(ms(r), 0.25);
  dev.fill(dr.m(), from_double<T>(0.25));
  CHECK(rel_err(dr.get(), r) == 0);
  dev.copy(dx.c(), dr.m());
  CHECK(rel_err(dr.get(), x) == 0);
  const cuda_buffer<T> z = dev.alloc<T>(7);  // alloc gives zeros
  std::vector<T> hz(7, from_double<T>(1.0));
  dev.download(dev.view(z), std::span<T>(hz));
  for (const T& v : hz) CHECK(to_double(v) == 0);
}

TEMPLATE_TEST_CASE("permute_0213, bias_add and bias_grad match the CPU", "[cuda][layout]", CUDA_TYPES) {
  using T = TestType;
  INFO(type_name<T>());
  cuda_device dev;
  cpu_device cpu;
  const std::int64_t a = 3, b = 5, c = 7, d = 9, n = a * b * c * d;
  auto x = rounded<T>(rnd(std::size_t(n), 21));
  std::vector<double> y(std::size_t(n), 0.0);
  dvec<T> dx(dev, x), dy(dev, y);
  cpu.permute_0213(a, b, c, d, cs(x), ms(y));
  dev.permute_0213(a, b, c, d, dx.c(), dy.m());
  CHECK(rel_err(dy.get(), y) == 0);
  auto bias = rounded<T>(rnd(std::size_t(b), 22));
  dvec<T> dbias(dev, bias);
  cpu.bias_add(a, b, c * d, cs(bias), ms(y));
  dev.bias_add(a, b, c * d, dbias.c(), dy.m());
  CHECK(rel_err(dy.get(), y) <= tol<T>());
  std::vector<double> db(std::size_t(b), 0.0);
  dvec<T> ddb(dev, db);
  cpu.bias_grad(a, b, c * d, cs(x), ms(db));
  dev.bias_grad(a, b, c * d, dx.c(), ddb.m());
  CHECK(rel_err(ddb.get(), db) <= tol<T>() * 4);  // 189-term sums
}

TEMPLATE_TEST_CASE("relu and gelu forward and backward match the CPU", "[cuda][activations]", CUDA_TYPES) {
  using T = TestType;
  INFO(type_name<T>());
  cuda_device dev;
  cpu_device cpu;
  const std::size_t n = 4099;
  auto x = rounded<T>(rnd(n, 31, -4, 4)), g = rounded<T>(rnd(n, 32));
  std::vector<double> r(n, 0.0);
  dvec<T> dx(dev, x), dg(dev, g), dr(dev, r);
  cpu.relu_fwd(cs(x), ms(r));
  dev.relu_fwd(dx.c(), dr.m());
  CHECK(rel_err(dr.get(), r) == 0);
  cpu.relu_bwd(cs(x), cs(g), ms(r));
  dev.relu_bwd(dx.c(), dg.c(), dr.m());
  CHECK(rel_err(dr.get(), r) == 0);
  cpu.gelu_fwd(cs(x), ms(r));
  dev.gelu_fwd(dx.c(), dr.m());
  CHECK(rel_err(dr.get(), r) <= tol<T>());
  cpu.gelu_bwd(cs(x), cs(g), ms(r));
  dev.gelu_bwd(dx.c(), dg.c(), dr.m());
  CHECK(rel_err(dr.get(), r) <= tol<T>());
}

TEMPLATE_TEST_CASE("silu, the element-wise product and rotary embeddings match the CPU", "[cuda][activations]",
                   CUDA_TYPES) {
  using T = TestType;
  INFO(type_name<T>());
  cuda_device dev;
  cpu_device cpu;
  const std::size_t n = 4099;
  auto x = rounded<T>(rnd(n, 33, -4, 4)), g = rounded<T>(rnd(n, 34));
  std::vector<double> r(n, 0.0);
  dvec<T> dx(dev, x), dg(dev, g), dr(dev, r);
  cpu.silu_fwd(cs(x), ms(r));
  dev.silu_fwd(dx.c(), dr.m());
  CHECK(rel_err(dr.get(), r) <= tol<T>());
  cpu.silu_bwd(cs(x), cs(g), ms(r));
  dev.silu_bwd(dx.c(), dg.c(), dr.m());
  CHECK(rel_err(dr.get(), r) <= tol<T>());
  cpu.mul(cs(x), cs(g), ms(r));
  dev.mul(dx.c(), dg.c(), dr.m());
  CHECK(rel_err(dr.get(), r) <= tol<T>());
  // x [b=3, s=5, heads=4, d=16] at positions 7.. (a sequence shard), both directions
  const std::int64_t b = 3, s = 5, heads = 4, d = 16;
  const auto m = std::size_t(b * s * heads * d);
  auto xr = rounded<T>(rnd(m, 35, -2, 2));
  std::vector<double> yr(m);
  dvec<T> dxr(dev, xr), dyr(dev, yr);
  for (bool inverse : {false, true}) {
    cpu.rotary(b, s, heads, d, 7, 500000.0, inverse, cs(xr), ms(yr));
    dev.rotary(b, s, heads, d, 7, 500000.0, inverse, dxr.c(), dyr.m());
    CHECK(rel_err(dyr.get(), yr) <= tol<T>());
  }
}

TEMPLATE_TEST_CASE("rmsnorm rows match the CPU, with rstd in statistic_t", "[cuda][rows]", CUDA_TYPES) {
  using T = TestType;
  using S = statistic_t<T>;
  INFO(type_name<T>());
  cuda_device dev;
  cpu_device cpu;
  const std::int64_t rows = 7, cols = 300;
  const auto n = std::size_t(rows * cols);
  auto x = rounded<T>(rnd(n, 45, -2, 3)), gamma = rounded<T>(rnd(std::size_t(cols), 46)), dy = rounded<T>(rnd(n, 47));
  std::vector<double> y(n), rstd(static_cast<std::size_t>(rows));
  cpu.rmsnorm_fwd(rows, cols, cs(x), cs(gamma), 1e-6, ms(y), ms(rstd));
  dvec<T> dx(dev, x), dgam(dev, gamma), ddy(dev, dy), dyo(dev, std::vector<double>(n)), ddx(dev, std::vector<double>(n)),
      ddg(dev, std::vector<double>(static_cast<std::size_t>(cols)));
  dvec<S> drstd(dev, std::vector<double>(static_cast<std::size_t>(rows)));
  dev.rmsnorm_fwd(rows, cols, dx.c(), dgam.c(), 1e-6, dyo.m(), drstd.m());
  CHECK(rel_err(dyo.get(), y) <= tol<T>());
  CHECK(rel_err(drstd.get(), rstd) <= tol<S>());
  rstd = rounded<S>(rstd);
  dvec<S> r2(dev, rstd);
  std::vector<double> dxr(n), dgr(static_cast<std::size_t>(cols));
  cpu.rmsnorm_bwd(rows, cols, cs(x), cs(gamma), cs(rstd), cs(dy), ms(dxr), ms(dgr));
  dev.rmsnorm_bwd(rows, cols, dx.c(), dgam.c(), r2.c(), ddy.c(), ddx.m(), ddg.m());
  CHECK(rel_err(ddx.get(), dxr) <= tol<T>() * 2);
  CHECK(rel_err(ddg.get(), dgr) <= tol<T>() * 2);
}

TEMPLATE_TEST_CASE("layernorm and softmax rows match the CPU, with mean and rstd in statistic_t", "[cuda][rows]",
                   CUDA_TYPES) {
  using T = TestType;
  using S = statistic_t<T>;  // float for the half types
  INFO(type_name<T>());
  cuda_device dev;
  cpu_device cpu;
  const std::int64_t rows = 7, cols = 300;  // more columns than threads in a block
  const auto n = std::size_t(rows * cols);
  auto x = rounded<T>(rnd(n, 41, -2, 3)), gamma = rounded<T>(rnd(std::size_t(cols), 42)),
       beta = rounded<T>(rnd(std::size_t(cols), 43)), dy = rounded<T>(rnd(n, 44));
  std::vector<double> y(n), mean(static_cast<std::size_t>(rows)), rstd(static_cast<std::size_t>(rows));
  cpu.layernorm_fwd(rows, cols, cs(x), cs(gamma), cs(beta), ms(y), ms(mean), ms(rstd));
  dvec<T> dx(dev, x), dgam(dev, gamma), dbet(dev, beta), ddy(dev, dy), dyo(dev, std::vector<double>(n)),
      ddx(dev, std::vector<double>(n)), ddg(dev, std::vector<double>(static_cast<std::size_t>(cols))),
      ddb(dev, std::vector<double>(static_cast<std::size_t>(cols)));
  dvec<S> dmean(dev, std::vector<double>(static_cast<std::size_t>(rows))),
      drstd(dev, std::vector<double>(static_cast<std::size_t>(rows)));
  dev.layernorm_fwd(rows, cols, dx.c(), dgam.c(), dbet.c(), dyo.m(), dmean.m(), drstd.m());
  CHECK(rel_err(dyo.get(), y) <= tol<T>());
  CHECK(rel_err(dmean.get(), mean) <= tol<S>());  // not rounded to T
  CHECK(rel_err(drstd.get(), rstd) <= tol<S>());
  // backward from the same (rounded) statistics on both sides
  mean = rounded<S>(mean);
  rstd = rounded<S>(rstd);
  dvec<S> m2(dev, mean), r2(dev, rstd);
  std::vector<double> dxr(n), dgr(static_cast<std::size_t>(cols)), dbr(static_cast<std::size_t>(cols));
  cpu.layernorm_bwd(rows, cols, cs(x), cs(gamma), cs(mean), cs(rstd), cs(dy), ms(dxr), ms(dgr), ms(dbr));
  dev.layernorm_bwd(rows, cols, dx.c(), dgam.c(), m2.c(), r2.c(), ddy.c(), ddx.m(), ddg.m(), ddb.m());
  CHECK(rel_err(ddx.get(), dxr) <= tol<T>() * 2);
  CHECK(rel_err(ddg.get(), dgr) <= tol<T>() * 2);
  CHECK(rel_err(ddb.get(), dbr) <= tol<T>() * 2);

  std::vector<double> p(n), dp(n);
  cpu.softmax_fwd(rows, cols, cs(x), ms(p));
  dev.softmax_fwd(rows, cols, dx.c(), dyo.m());
  CHECK(rel_err(dyo.get(), p) <= tol<T>());
  p = rounded<T>(p);
  dvec<T> dpr(dev, p);
  cpu.softmax_bwd(rows, cols, cs(p), cs(dy), ms(dp));
  dev.softmax_bwd(rows, cols, dpr.c(), ddy.c(), ddx.m());
  CHECK(rel_err(ddx.get(), dp) <= tol<T>());
}

TEMPLATE_TEST_CASE("scale_causal_mask matches the CPU with a global query offset", "[cuda][attention]", CUDA_TYPES) {
  using T = TestType;
  cuda_device dev;
  cpu_device cpu;
  const std::int64_t groups = 3, sq = 5, sk = 12;
  for (bool causal : {false, true})
    for (std::int64_t q0 : {0, 4}) {
      INFO(type_name<T>() << " causal " << causal << " q_offset " << q0);
      auto s = rounded<T>(rnd(std::size_t(groups * sq * sk), 51, -3, 3));
      dvec<T> ds(dev, s);
      cpu.scale_causal_mask(groups, sq, sk, 0.125, q0, causal, ms(s));
      dev.scale_causal_mask(groups, sq, sk, from_double<T>(0.125), q0, causal, ds.m());
      CHECK(rel_err(ds.get(), s) <= tol<T>());
    }
}

TEMPLATE_TEST_CASE("embedding gather and scatter-add match the CPU on a table block", "[cuda][embedding]", CUDA_TYPES) {
  using T = TestType;
  INFO(type_name<T>());
  cuda_device dev;
  cpu_device cpu;
  const std::int64_t lo = 4, held = 6, cols = 33;
  const std::vector<std::int64_t> ids{4, 9, 0, 5, 5, 13, 9, 4, 7, 10, 5};  // repeats and rows not held
  auto table = rounded<T>(rnd(std::size_t(held * cols), 61)), dy = rounded<T>(rnd(ids.size() * std::size_t(cols), 62));
  std::vector<double> y(ids.size() * std::size_t(cols)), dt = rounded<T>(rnd(std::size_t(held * cols), 63));
  ivec di(dev, ids);
  dvec<T> dtab(dev, table), dyo(dev, y), ddy(dev, dy), ddt(dev, dt);
  cpu.gather_rows(std::span<const std::int64_t>(ids), lo, cs(table), ms(y));
  dev.gather_rows(di.c(), lo, dtab.c(), dyo.m());
  CHECK(rel_err(dyo.get(), y) == 0);
  cpu.scatter_add_rows(std::span<const std::int64_t>(ids), lo, cs(dy), ms(dt));
  dev.scatter_add_rows(di.c(), lo, ddy.c(), ddt.m());
  CHECK(rel_err(ddt.get(), dt) <= tol<T>());
}

TEMPLATE_TEST_CASE("im2col, col2im and max-pool match the CPU", "[cuda][windows]", CUDA_TYPES) {
  using T = TestType;
  cuda_device dev;
  cpu_device cpu;
  for (const window_geom g : {window_geom{2, 3, 7, 6, 3, 1, 1}, window_geom{2, 3, 7, 6, 3, 2, 1}, window_geom{2, 3, 8, 6, 2, 2, 0},
                              window_geom{1, 2, 5, 5, 1, 1, 0}}) {
    INFO(type_name<T>() << " kernel " << g.kernel << " stride " << g.stride << " padding " << g.padding);
    const auto nx = std::size_t(g.n * g.c * g.h * g.w), ncol = std::size_t(g.col_rows() * g.col_cols());
    const auto ny = std::size_t(g.n * g.c * g.out_h() * g.out_w());
    auto x = rounded<T>(rnd(nx, 71, -2, 2)), colr = rounded<T>(rnd(ncol, 72)), dy = rounded<T>(rnd(ny, 73));
    std::vector<double> col(ncol), dx(nx), y(ny);
    dvec<T> dxv(dev, x), dcol(dev, col), dcolr(dev, colr), ddx(dev, dx), dyo(dev, y), ddy(dev, dy);
    cpu.im2col(g, cs(x), ms(col));
    dev.im2col(g, dxv.c(), dcol.m());
    CHECK(rel_err(dcol.get(), col) == 0);
    cpu.col2im(g, cs(colr), ms(dx));
    dev.col2im(g, dcolr.c(), ddx.m());
    CHECK(rel_err(ddx.get(), dx) <= tol<T>() * 3);
    cpu.max_pool_fwd(g, cs(x), ms(y));
    dev.max_pool_fwd(g, dxv.c(), dyo.m());
    CHECK(rel_err(dyo.get(), y) == 0);
    cpu.max_pool_bwd(g, cs(x), cs(dy), ms(dx));
    dev.max_pool_bwd(g, dxv.c(), ddy.c(), ddx.m());
    CHECK(rel_err(ddx.get(), dx) <= tol<T>() * 2);
  }
}

TEMPLATE_TEST_CASE("dropout of a shard draws the CPU's mask exactly", "[cuda][dropout]", CUDA_TYPES) {
  using T = TestType;
  INFO(type_name<T>());
  cuda_device dev;
  cpu_device cpu;
  const shard_info s = make_shard(tensor_shape{8, 6, 10}, nd_sbp{S(0), S(1)}, mesh_shape{2, 2}, mesh_coord{1, 1});
  const auto n = std::size_t(s.local.elements());
  auto x = rounded<T>(rnd(n, 81, 0.5, 1.5));  // never 0, so a 0 output means "dropped"
  std::vector<double> y(n);
  const dropout_key key{1234, 17, 0.3};
  dvec<T> dx(dev, x), dy(dev, y);
  cpu.dropout(key, s, cs(x), ms(y));
  dev.dropout(key, s, dx.c(), dy.m());
  const std::vector<double> got = dy.get();
  std::size_t differ = 0, dropped = 0;
  for (std::size_t i = 0; i < n; ++i) {
    differ += (got[i] == 0) != (y[i] == 0);
    dropped += y[i] == 0;
  }
  CHECK(differ == 0);
  CHECK(dropped > 0);
  CHECK(dropped < n);
  CHECK(rel_err(got, y) <= tol<T>());
}

TEMPLATE_TEST_CASE("cross-entropy pieces match the CPU on a vocabulary block", "[cuda][xent]", CUDA_TYPES) {
  using T = TestType;
  using S = statistic_t<T>;
  INFO(type_name<T>());
  cuda_device dev;
  cpu_device cpu;
  const std::int64_t rows = 6, cols = 300, lo = 8;
  const std::vector<std::int64_t> labels{8, 20, 307, 3, 150, 400};  // held, held, held, not, held, not
  auto x = rounded<T>(rnd(std::size_t(rows * cols), 91, -4, 4));
  std::vector<double> m(static_cast<std::size_t>(rows)), stats(static_cast<std::size_t>(2 * rows)), loss(1), dx(static_cast<std::size_t>(rows * cols));
  ivec dl(dev, labels);
  dvec<T> dxv(dev, x), ddx(dev, dx);
  dvec<S> dm(dev, m), dst(dev, stats), dloss(dev, loss);  // the loss in statistic_t, as its 1/N
  cpu.row_max(rows, cols, cs(x), ms(m));
  dev.row_max(rows, cols, dxv.c(), dm.m());
  CHECK(rel_err(dm.get(), m) == 0);
  cpu.xent_stats(rows, cols, cs(x), std::span<const std::int64_t>(labels), lo, cs(m), ms(stats));
  dev.xent_stats(rows, cols, dxv.c(), dl.c(), lo, dm.c(), dst.m());
  CHECK(rel_err(dst.get(), stats) <= tol<S>() * 3);  // in statistic_t, not rounded to T
  stats = rounded<S>(stats);
  dvec<S> dst2(dev, stats);
  dvec<T> dscale(dev, std::vector<double>{0.5});
  cpu.xent_loss(rows, cs(m), cs(stats), 1.0 / 6, ms(loss));
  dev.xent_loss(rows, dm.c(), dst2.c(), S(1.0 / 6), dloss.m());
  CHECK(rel_err(dloss.get(), loss) <= tol<S>() * 3);  // not rounded to T
  const std::vector<double> half{0.5};
  cpu.xent_bwd(rows, cols, cs(x), std::span<const std::int64_t>(labels), lo, cs(m), cs(stats), cs(half), 1.0 / 6, ms(dx));
  dev.xent_bwd(rows, cols, dxv.c(), dl.c(), lo, dm.c(), dst2.c(), dscale.c(), S(1.0 / 6), ddx.m());
  CHECK(rel_err(ddx.get(), dx) <= tol<T>());
}

TEST_CASE("fp16 cross-entropy over a vocabulary of 70,000 keeps its sums in float and matches double",
          "[cuda][xent][half]") {
  using T = __half;
  using S = statistic_t<T>;
  static_assert(std::is_same_v<S, float>, "the half types keep row statistics in float");
  cuda_device dev;
  cpu_device cpu;
  const std::int64_t rows = 4, cols = 70000;
  const std::vector<std::int64_t> labels{0, 12345, 69999, 35000};
  // logits within 0.02 of each other: every exp(x - max) is near 1, so each row sums to about
  // 69,000, past fp16's largest finite value, 65,504
  const auto x = rounded<T>(rnd(std::size_t(rows * cols), 151, -0.02, 0.02));
  std::vector<double> m(static_cast<std::size_t>(rows)), stats(static_cast<std::size_t>(2 * rows)), loss(1),
      dx(std::size_t(rows * cols));
  const std::vector<double> one{1.0};
  cpu.row_max(rows, cols, cs(x), ms(m));
  cpu.xent_stats(rows, cols, cs(x), std::span<const std::int64_t>(labels), 0, cs(m), ms(stats));
  cpu.xent_loss(rows, cs(m), cs(stats), 1.0 / double(rows), ms(loss));
  cpu.xent_bwd(rows, cols, cs(x), std::span<const std::int64_t>(labels), 0, cs(m), cs(stats), cs(one), 1.0 / double(rows),
               ms(dx));
  for (std::int64_t r = 0; r < rows; ++r) {
    INFO("row " << r << " sum of exp " << stats[std::size_t(r)]);
    CHECK(stats[std::size_t(r)] > 65504.0);                                       // the case is the one it claims:
    CHECK(std::isinf(to_double(from_double<T>(stats[std::size_t(r)]))));  // stored in fp16 it would overflow
  }
  ivec dl(dev, labels);
  dvec<T> dxv(dev, x), done(dev, one), ddx(dev, std::vector<double>(dx.size()));
  dvec<S> dloss(dev, std::vector<double>{0.0}), dm(dev, std::vector<double>(static_cast<std::size_t>(rows))),
      dst(dev, std::vector<double>(static_cast<std::size_t>(2 * rows)));
  dev.row_max(rows, cols, dxv.c(), dm.m());
  dev.xent_stats(rows, cols, dxv.c(), dl.c(), 0, dm.c(), dst.m());
  dev.xent_loss(rows, dm.c(), dst.c(), S(1.0 / double(rows)), dloss.m());
  CHECK(rel_err(dm.get(), m) == 0);
  CHECK(rel_err(dst.get(), stats) <= 1e-4);  // float sums of 70,000 terms near 1
  const double got = dloss.get()[0];
  INFO("loss: device " << got << ", double " << loss[0]);
  CHECK(std::isfinite(got));
  CHECK(std::abs(got - loss[0]) <= 1e-2 * std::abs(loss[0]));
  dev.xent_bwd(rows, cols, dxv.c(), dl.c(), 0, dm.c(), dst.c(), done.c(), S(1.0 / double(rows)), ddx.m());
  CHECK(dev.all_finite(ddx.c()));
  CHECK(rel_err(ddx.get(), dx) <= tol<T>());
}

TEMPLATE_TEST_CASE("copy_rows copies a strided block as the CPU does and leaves the rest of y alone", "[cuda][copy_rows]",
                   CUDA_TYPES) {
  using T = TestType;
  cuda_device dev;
  cpu_device cpu;
  struct block {
    std::int64_t rows, cols, ldx, ldy, x_at, y_at;  // x and y start x_at, y_at elements into their buffers
  };
  for (const block b : {block{5, 7, 7, 7, 0, 0}, block{5, 7, 11, 9, 0, 0}, block{300, 3, 4, 17, 2, 5},
                        block{1, 64, 64, 64, 1, 0}, block{6, 1, 1, 3, 0, 2}}) {
    INFO(type_name<T>() << " rows " << b.rows << " cols " << b.cols << " ldx " << b.ldx << " ldy " << b.ldy << " x at "
                        << b.x_at << " y at " << b.y_at);
    const auto nx = std::size_t(b.x_at + (b.rows - 1) * b.ldx + b.cols), ny = std::size_t(b.y_at + (b.rows - 1) * b.ldy + b.cols);
    const auto x = rounded<T>(rnd(nx, 131));
    auto y = rounded<T>(rnd(ny, 132));
    dvec<T> dx(dev, x), dy(dev, y);
    cpu.copy_rows(b.rows, b.cols, cs(x).subspan(std::size_t(b.x_at)), b.ldx, ms(y).subspan(std::size_t(b.y_at)), b.ldy);
    dev.copy_rows(b.rows, b.cols, dx.c().subspan(std::size_t(b.x_at)), b.ldx, dy.m().subspan(std::size_t(b.y_at)), b.ldy);
    CHECK(rel_err(dy.get(), y) == 0);
  }
  dvec<T> small(dev, std::vector<double>(10, 1.0)), out(dev, std::vector<double>(10, 0.0));
  CHECK_THROWS_AS(dev.copy_rows(3, 4, small.c(), 4, out.m(), 4), autoddl::cuda::cuda_error);  // 12 > 10 elements
  CHECK_THROWS_AS(dev.copy_rows(2, 4, small.c(), 3, out.m(), 4), autoddl::cuda::cuda_error);  // ldx < cols
}

TEMPLATE_TEST_CASE("all_finite finds a NaN or an infinity anywhere, as the CPU does", "[cuda][all_finite]", CUDA_TYPES) {
  using T = TestType;
  cuda_device dev;
  cpu_device cpu;
  const std::size_t n = 100003;  // not a multiple of the block size
  const auto finite = rounded<T>(rnd(n, 141, -100, 100));
  {
    dvec<T> d(dev, finite);
    CHECK(cpu.all_finite(cs(finite)));
    CHECK(dev.all_finite(d.c()));
  }
  CHECK(dev.all_finite(std::span<const T>{}));
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (double bad : {nan, inf, -inf})
    for (std::size_t at : {std::size_t(0), n / 2, n - 1}) {
      INFO(type_name<T>() << " " << bad << " at " << at);
      auto v = finite;
      v[at] = bad;
      dvec<T> d(dev, v);
      CHECK_FALSE(cpu.all_finite(cs(v)));
      CHECK_FALSE(dev.all_finite(d.c()));
    }
  // 70,000 is finite in every type but fp16, where it rounds to infinity
  auto big = finite;
  big[7] = 70000.0;
  dvec<T> d(dev, big);
  INFO(type_name<T>());
  CHECK(dev.all_finite(d.c()) == cpu.all_finite(cs(rounded<T>(big))));
  CHECK(dev.all_finite(d.c()) == !std::is_same_v<T, __half>);
}

TEMPLATE_TEST_CASE("SGD-momentum and Adam steps match the CPU", "[cuda][optimizer]", CUDA_TYPES) {
  using T = TestType;
  INFO(type_name<T>());
  cuda_device dev;
  cpu_device cpu;
  const std::size_t n = 5003;
  optimizer_step o;
  o.lr = 0.01;
  o.weight_decay = 0.01;
  auto p = rounded<T>(rnd(n, 101)), vel = rounded<T>(rnd(n, 102, -0.1, 0.1)), m = rounded<T>(rnd(n, 103, -0.1, 0.1)),
       v = rounded<T>(rnd(n, 104, 0.01, 0.1)), p2 = p;
  dvec<T> dp(dev, p), dvel(dev, vel), dm(dev, m), dv(dev, v), dp2(dev, p2);
  for (std::int64_t step = 1; step <= 3; ++step) {
    const auto g = rounded<T>(rnd(n, 110 + std::uint64_t(step)));
    dvec<T> dg(dev, g);
    o.step = step;
    cpu.sgd_momentum(o, cs(g), ms(vel), ms(p));
    dev.sgd_momentum(o, dg.c(), dvel.m(), dp.m());
    cpu.adam(o, cs(g), ms(m), ms(v), ms(p2));
    dev.adam(o, dg.c(), dm.m(), dv.m(), dp2.m());
    // compare, then continue both from the device's (rounded) state
    CHECK(rel_err(dp.get(), p) <= tol<T>());
    CHECK(rel_err(dvel.get(), vel) <= tol<T>());
    CHECK(rel_err(dp2.get(), p2) <= tol<T>());
    CHECK(rel_err(dm.get(), m) <= tol<T>());
    CHECK(rel_err(dv.get(), v) <= tol<T>());
    p = dp.get();
    vel = dvel.get();
    p2 = dp2.get();
    m = dm.get();
    v = dv.get();
  }
}

TEST_CASE("bytes_in_use counts the bytes of the device's live buffers exactly, through moves", "[cuda][memory]") {
  cuda_device dev;
  const std::int64_t before = dev.bytes_in_use();
  {
    cuda_buffer<float> a = dev.alloc<float>(1000);
    CHECK(dev.bytes_in_use() - before == 4000);
    cuda_buffer<double> b = dev.alloc<double>(3);
    CHECK(dev.bytes_in_use() - before == 4000 + 24);
    cuda_buffer<float> moved = std::move(a);
    CHECK(dev.bytes_in_use() - before == 4000 + 24);
    CHECK(a.empty());
    CHECK(moved.size() == 1000);
    CHECK(moved.stream() == dev.stream());
    b = dev.alloc<double>(5);  // the 3 doubles are released
    CHECK(dev.bytes_in_use() - before == 4000 + 40);
    const cuda_buffer<float> none = dev.alloc<float>(0);
    CHECK(none.empty());
    CHECK(dev.bytes_in_use() - before == 4000 + 40);
  }
  dev.synchronize();  // also reports a failed release
  CHECK(dev.bytes_in_use() == before);
}

TEST_CASE("a buffer that outlives its device is released on the device's stream, which lives as long", "[cuda][memory]") {
  cuda_buffer<float> kept;
  {
    cuda_device dev;
    kept = dev.alloc<float>(16);
    dev.fill(dev.view(kept), 2.0f);  // queued: the release after the device is gone is ordered after it
  }
  CHECK(kept.size() == 16);
  CHECK(kept.stream() != nullptr);
  kept = cuda_buffer<float>{};
  CHECK(kept.empty());
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
}

TEST_CASE("uploading into a smaller device buffer is refused with both sizes", "[cuda][errors]") {
  cuda_device dev;
  auto b = dev.alloc<float>(3);
  const std::vector<float> h(5, 1.0f);
  CHECK_THROWS_WITH(dev.upload(std::span<const float>(h), dev.view(b)),
                    "cuda_device::upload of 5 elements into 3: the destination is too small; give it at least 5");
}
