// Each cpu_device primitive against a naive reference (or, for backward primitives, against
// central finite differences of its forward), in float and double where the type matters.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>

#include "autoddl/backend/cpu.hpp"

using namespace autoddl;

namespace {
template <class T>
std::vector<T> rnd(std::size_t n, std::uint64_t seed, double lo = -1, double hi = 1) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<T> v(n);
  for (T& x : v) x = T(u(g));
  return v;
}
template <class T>
double max_diff(const std::vector<T>& a, const std::vector<T>& b) {
  double m = a.size() == b.size() ? 0 : 1e300;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  return m;
}
template <class T>
constexpr double tol() { return std::is_same_v<T, float> ? 2e-5 : 1e-12; }
template <class T>
std::span<const T> cs(const std::vector<T>& v) { return {v.data(), v.size()}; }
template <class T>
std::span<T> ms(std::vector<T>& v) { return {v.data(), v.size()}; }

/// Central difference of f (a scalar function of x) against the analytic gradient g.
template <class F>
double fd_error(std::vector<double> x, const std::vector<double>& g, F&& f) {
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double k = x[i], e = 1e-6;
    x[i] = k + e;
    const double up = f(x);
    x[i] = k - e;
    const double dn = f(x);
    x[i] = k;
    worst = std::max(worst, std::abs((up - dn) / (2 * e) - g[i]));
  }
  return worst;
}
double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}
}  // namespace

TEMPLATE_TEST_CASE("gemm matches the naive product for every transpose, batch and beta", "[backend][gemm]", float, double) {
  using T = TestType;
  cpu_device d;
  const std::int64_t m = 5, n = 4, k = 3, batch = 3;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (double beta : {0.0, 0.5}) {
        INFO("trans_a " << ta << " trans_b " << tb << " beta " << beta);
        auto a = rnd<T>(std::size_t(batch * m * k), 1), b = rnd<T>(std::size_t(batch * k * n), 2);
        auto c = rnd<T>(std::size_t(batch * m * n), 3), ref = c;
        gemm_desc g{ta, tb, m, n, k, ta ? m : k, tb ? k : n, n, batch, m * k, k * n, m * n};
        for (std::int64_t s = 0; s < batch; ++s)
          for (std::int64_t i = 0; i < m; ++i)
            for (std::int64_t j = 0; j < n; ++j) {
              double acc = 0;
              for (std::int64_t p = 0; p < k; ++p) {
                double av = ta ? a[std::size_t(s * m * k + p * m + i)] : a[std::size_t(s * m * k + i * k + p)];
                double bv = tb ? b[std::size_t(s * k * n + j * k + p)] : b[std::size_t(s * k * n + p * n + j)];
                acc += av * bv;
              }
              auto& out = ref[std::size_t(s * m * n + i * n + j)];
              out = T(2 * acc + beta * double(out));
            }
        auto blas = c;
        d.gemm(g, T(2), cs(a), cs(b), T(beta), ms(blas));
        CHECK(max_diff(blas, ref) <= tol<T>() * 10);
        auto loop = c;  // the fallback without BLAS
        for (std::int64_t s = 0; s < batch; ++s)
          detail::gemm_loop(g, T(2), a.data() + s * m * k, b.data() + s * k * n, T(beta), loop.data() + s * m * n);
        CHECK(max_diff(loop, ref) <= tol<T>() * 10);
      }
}

TEST_CASE("permute_0213, bias_add and bias_grad move and sum what the naive loops do", "[backend][layout]") {
  cpu_device d;
  const std::int64_t A = 2, Bd = 3, C = 4;
  for (const std::int64_t D : {std::int64_t(5), std::int64_t(20)}) {  // runs copied element by element, and by memcpy
    INFO("D = " << D);
    auto x = rnd<double>(std::size_t(A * Bd * C * D), 4);
    std::vector<double> y(x.size());
    d.permute_0213(A, Bd, C, D, cs(x), ms(y));
    for (std::int64_t a = 0; a < A; ++a)
      for (std::int64_t b = 0; b < Bd; ++b)
        for (std::int64_t c = 0; c < C; ++c)
          for (std::int64_t e = 0; e < D; ++e)
            REQUIRE(y[std::size_t(((a * C + c) * Bd + b) * D + e)] == x[std::size_t(((a * Bd + b) * C + c) * D + e)]);
    auto bias = rnd<double>(std::size_t(Bd), 5);
    auto z = x;
    d.bias_add(A, Bd, C * D, cs(bias), ms(z));
    std::vector<double> db(static_cast<std::size_t>(Bd));
    d.bias_grad(A, Bd, C * D, cs(x), ms(db));
    for (std::int64_t b = 0; b < Bd; ++b) {
      double s = 0;
      for (std::int64_t a = 0; a < A; ++a)
        for (std::int64_t i = 0; i < C * D; ++i) {
          const std::size_t at = std::size_t((a * Bd + b) * C * D + i);
          CHECK(z[at] == x[at] + bias[std::size_t(b)]);
          s += x[at];
        }
      CHECK(std::abs(db[std::size_t(b)] - s) < 1e-12);
    }
  }
}

TEST_CASE("relu and GPT-2 gelu match their formulas, and their backward their finite differences", "[backend][activation]") {
  cpu_device d;
  auto x = rnd<double>(50, 6, -3, 3), r = rnd<double>(50, 7);
  std::vector<double> y(x.size()), dx(x.size());
  d.gelu_fwd(cs(x), ms(y));
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    CHECK(std::abs(y[i] - 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)))) < 1e-14);
  }
  d.gelu_bwd(cs(x), cs(r), ms(dx));
  CHECK(fd_error(x, dx, [&](const std::vector<double>& v) {
          std::vector<double> o(v.size());
          d.gelu_fwd(cs(v), ms(o));
          return dot(o, r);
        }) < 1e-8);
  d.relu_fwd(cs(x), ms(y));
  d.relu_bwd(cs(x), cs(r), ms(dx));
  for (std::size_t i = 0; i < x.size(); ++i) {
    CHECK(y[i] == std::max(x[i], 0.0));
    CHECK(dx[i] == (x[i] > 0 ? r[i] : 0.0));
  }
}

TEST_CASE("relu and dropout select without a branch but keep the ternary's values at 0, -0, NaN and inf", "[backend][activation]") {
  // Oracle: the scalar definitions y = x > 0 ? x : +0 and dx = x > 0 ? dy : +0, compared bit for bit
  // (a +0 and a -0 differ in their bits), in float and double.
  cpu_device d;
  auto check = [&]<class T>(T) {
    const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
    const std::vector<T> x{T(1.5), T(-2), T(0), -T(0), nan, -nan, inf, -inf, std::numeric_limits<T>::denorm_min(), T(-1e-30)};
    const std::vector<T> dy{T(3), inf, nan, T(-4), T(5), T(6), -inf, T(7), T(-8), T(9)};
    std::vector<T> y(x.size()), dx(x.size());
    d.relu_fwd<T>(x, y);
    d.relu_bwd<T>(x, dy, dx);
    auto same_bits = [](T a, T b) { return std::memcmp(&a, &b, sizeof(T)) == 0; };
    for (std::size_t i = 0; i < x.size(); ++i) {
      INFO("element " << i);
      CHECK(same_bits(y[i], x[i] > T(0) ? x[i] : T(0)));
      CHECK(same_bits(dx[i], x[i] > T(0) ? dy[i] : T(0)));
    }
  };
  check(0.0f);
  check(0.0);
}

TEST_CASE("layernorm rows normalise with eps 1e-5 and backpropagate like finite differences", "[backend][layernorm]") {
  cpu_device d;
  const std::int64_t rows = 3, cols = 7;
  auto x = rnd<double>(std::size_t(rows * cols), 8), gm = rnd<double>(std::size_t(cols), 9);
  auto bt = rnd<double>(std::size_t(cols), 10), r = rnd<double>(x.size(), 11);
  std::vector<double> y(x.size()), mean(static_cast<std::size_t>(rows)), rstd(static_cast<std::size_t>(rows));
  d.layernorm_fwd(rows, cols, cs(x), cs(gm), cs(bt), ms(y), ms(mean), ms(rstd));
  for (std::int64_t i = 0; i < rows; ++i) {
    double mu = 0, var = 0;
    for (std::int64_t c = 0; c < cols; ++c) mu += x[std::size_t(i * cols + c)] / double(cols);
    for (std::int64_t c = 0; c < cols; ++c) var += std::pow(x[std::size_t(i * cols + c)] - mu, 2) / double(cols);
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::size_t at = std::size_t(i * cols + c);
      CHECK(std::abs(y[at] - ((x[at] - mu) / std::sqrt(var + 1e-5) * gm[std::size_t(c)] + bt[std::size_t(c)])) < 1e-12);
    }
  }
  std::vector<double> dx(x.size()), dg(gm.size()), db(bt.size());
  d.layernorm_bwd(rows, cols, cs(x), cs(gm), cs(mean), cs(rstd), cs(r), ms(dx), ms(dg), ms(db));
  auto f = [&](const std::vector<double>& xv, const std::vector<double>& gv, const std::vector<double>& bv) {
    std::vector<double> o(xv.size()), m2(static_cast<std::size_t>(rows)), r2(static_cast<std::size_t>(rows));
    d.layernorm_fwd(rows, cols, cs(xv), cs(gv), cs(bv), ms(o), ms(m2), ms(r2));
    return dot(o, r);
  };
  CHECK(fd_error(x, dx, [&](const std::vector<double>& v) { return f(v, gm, bt); }) < 1e-7);
  CHECK(fd_error(gm, dg, [&](const std::vector<double>& v) { return f(x, v, bt); }) < 1e-7);
  CHECK(fd_error(bt, db, [&](const std::vector<double>& v) { return f(x, gm, v); }) < 1e-7);
}

TEST_CASE("softmax rows, their backward, and the causal mask with a global query offset", "[backend][softmax]") {
  cpu_device d;
  const std::int64_t rows = 4, cols = 6;
  auto x = rnd<double>(std::size_t(rows * cols), 12, -4, 4), r = rnd<double>(x.size(), 13);
  std::vector<double> y(x.size()), dx(x.size());
  d.softmax_fwd(rows, cols, cs(x), ms(y));
  for (std::int64_t i = 0; i < rows; ++i) {
    double s = 0;
    for (std::int64_t c = 0; c < cols; ++c) s += std::exp(x[std::size_t(i * cols + c)]);
    for (std::int64_t c = 0; c < cols; ++c)
      CHECK(std::abs(y[std::size_t(i * cols + c)] - std::exp(x[std::size_t(i * cols + c)]) / s) < 1e-14);
  }
  d.softmax_bwd(rows, cols, cs(y), cs(r), ms(dx));
  CHECK(fd_error(x, dx, [&](const std::vector<double>& v) {
          std::vector<double> o(v.size());
          d.softmax_fwd(rows, cols, cs(v), ms(o));
          return dot(o, r);
        }) < 1e-8);
  // 2 groups of 2 queries at global positions 3, 4 over 6 keys: query 3 sees keys 0..3
  auto s = x;
  d.scale_causal_mask(std::int64_t(2), std::int64_t(2), cols, 0.5, std::int64_t(3), true, ms(s));
  for (std::int64_t g = 0; g < 2; ++g)
    for (std::int64_t q = 0; q < 2; ++q)
      for (std::int64_t k = 0; k < cols; ++k) {
        const std::size_t at = std::size_t((g * 2 + q) * cols + k);
        if (k > 3 + q) CHECK(std::isinf(s[at]));
        else CHECK(s[at] == 0.5 * x[at]);
      }
}

TEST_CASE("gather and scatter-add of embedding rows own only the rows [lo, lo + held)", "[backend][embedding]") {
  cpu_device d;
  const std::int64_t cols = 3;
  auto table = rnd<double>(std::size_t(4 * cols), 14);  // holds global rows 4..7
  std::vector<std::int64_t> ids{0, 5, 7, 4, 9, 5};
  std::vector<double> y(ids.size() * std::size_t(cols), 99.0);
  d.gather_rows(std::span<const std::int64_t>(ids), std::int64_t(4), cs(table), ms(y));
  for (std::size_t t = 0; t < ids.size(); ++t)
    for (std::int64_t c = 0; c < cols; ++c) {
      const bool held = ids[t] >= 4 && ids[t] < 8;
      CHECK(y[t * std::size_t(cols) + std::size_t(c)] == (held ? table[std::size_t((ids[t] - 4) * cols + c)] : 0.0));
    }
  auto dy = rnd<double>(y.size(), 15);
  std::vector<double> dt(table.size());
  d.scatter_add_rows(std::span<const std::int64_t>(ids), std::int64_t(4), cs(dy), ms(dt));
  for (std::int64_t c = 0; c < cols; ++c) {
    CHECK(std::abs(dt[std::size_t(1 * cols + c)] - (dy[std::size_t(1 * cols + c)] + dy[std::size_t(5 * cols + c)])) < 1e-15);
    CHECK(dt[std::size_t(3 * cols + c)] == dy[std::size_t(2 * cols + c)]);  // id 7
    CHECK(dt[std::size_t(0 * cols + c)] == dy[std::size_t(3 * cols + c)]);  // id 4
    CHECK(dt[std::size_t(2 * cols + c)] == 0.0);                            // id 6: no token
  }
}

TEST_CASE("im2col then GEMM is the direct convolution, and col2im is im2col's adjoint", "[backend][conv]") {
  cpu_device d;
  using geom = std::tuple<int, int, int, std::int64_t, std::int64_t>;  // kernel, stride, padding, h, w
  // 5x6 with each window; 3x3 stride-1 windows on the widths with unrolled rows (2..32), and
  // without padding
  for (auto [k, s, p, h, wd] : {geom{3, 1, 1, 5, 6}, geom{3, 2, 0, 5, 6}, geom{2, 2, 1, 5, 6}, geom{1, 1, 0, 5, 6},
                                geom{3, 1, 1, 2, 2}, geom{3, 1, 1, 4, 4}, geom{3, 1, 1, 3, 8}, geom{3, 1, 1, 2, 16},
                                geom{3, 1, 1, 1, 32}, geom{3, 1, 0, 6, 6}, geom{3, 1, 2, 4, 3}}) {
    INFO("kernel " << k << " stride " << s << " padding " << p << " image " << h << "x" << wd);
    window_geom g{2, 3, h, wd, k, s, p};
    const std::int64_t o = 4, oh = g.out_h(), ow = g.out_w();
    auto x = rnd<double>(std::size_t(g.n * g.c * g.h * g.w), 16), w = rnd<double>(std::size_t(o * g.col_rows()), 17);
    std::vector<double> col(std::size_t(g.col_rows() * g.col_cols())), y(std::size_t(o * g.col_cols()));
    d.im2col(g, cs(x), ms(col));
    d.gemm(gemm_desc{false, false, o, g.col_cols(), g.col_rows(), g.col_rows(), g.col_cols(), g.col_cols()}, 1.0, cs(w),
           cs(col), 0.0, ms(y));
    for (std::int64_t n = 0; n < g.n; ++n)
      for (std::int64_t oc = 0; oc < o; ++oc)
        for (std::int64_t i = 0; i < oh; ++i)
          for (std::int64_t j = 0; j < ow; ++j) {
            double acc = 0;
            for (std::int64_t c = 0; c < g.c; ++c)
              for (int ki = 0; ki < k; ++ki)
                for (int kj = 0; kj < k; ++kj) {
                  const std::int64_t h = i * s - p + ki, ww = j * s - p + kj;
                  if (h < 0 || h >= g.h || ww < 0 || ww >= g.w) continue;
                  acc += w[std::size_t(((oc * g.c + c) * k + ki) * k + kj)] * x[std::size_t(((n * g.c + c) * g.h + h) * g.w + ww)];
                }
            CHECK(std::abs(y[std::size_t(oc * g.col_cols() + (n * oh + i) * ow + j)] - acc) < 1e-12);
          }
    auto c2 = rnd<double>(col.size(), 18);
    std::vector<double> back(x.size());
    d.col2im(g, cs(c2), ms(back));
    CHECK(std::abs(dot(col, c2) - dot(x, back)) < 1e-10);
  }
}

TEST_CASE("max-pool takes each window's maximum and routes dy to it", "[backend][pool]") {
  cpu_device d;
  window_geom g{2, 2, 5, 5, 3, 2, 1};
  auto x = rnd<double>(std::size_t(g.n * g.c * g.h * g.w), 19);
  std::vector<double> y(std::size_t(g.n * g.c * g.out_h() * g.out_w()));
  d.max_pool_fwd(g, cs(x), ms(y));
  for (std::int64_t nc = 0; nc < g.n * g.c; ++nc)
    for (std::int64_t i = 0; i < g.out_h(); ++i)
      for (std::int64_t j = 0; j < g.out_w(); ++j) {
        double m = -1e300;
        for (int ki = 0; ki < 3; ++ki)
          for (int kj = 0; kj < 3; ++kj) {
            const std::int64_t h = i * 2 - 1 + ki, w = j * 2 - 1 + kj;
            if (h >= 0 && h < g.h && w >= 0 && w < g.w) m = std::max(m, x[std::size_t((nc * g.h + h) * g.w + w)]);
          }
        CHECK(y[std::size_t((nc * g.out_h() + i) * g.out_w() + j)] == m);
      }
  auto r = rnd<double>(y.size(), 20);
  std::vector<double> dx(x.size());
  d.max_pool_bwd(g, cs(x), cs(r), ms(dx));
  CHECK(fd_error(x, dx, [&](const std::vector<double>& v) {
          std::vector<double> o(y.size());
          d.max_pool_fwd(g, cs(v), ms(o));
          return dot(o, r);
        }) < 1e-8);
}

TEST_CASE("a 2x2 stride-2 max-pool takes each window's first maximum, padding none", "[backend][pool]") {
  cpu_device d;
  window_geom g{2, 3, 4, 5, 2, 2, 0};  // the last column lies outside every window
  std::vector<double> x(std::size_t(g.n * g.c * g.h * g.w));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = double((i * 7) % 5);  // values 0..4, with ties
  std::vector<double> y(std::size_t(g.n * g.c * g.out_h() * g.out_w())), dy(y.size()), dx(x.size());
  for (std::size_t i = 0; i < dy.size(); ++i) dy[i] = double(i + 1);
  d.max_pool_fwd(g, cs(x), ms(y));
  d.max_pool_bwd(g, cs(x), cs(dy), ms(dx));
  std::vector<double> want_dx(x.size(), 0.0);
  for (std::int64_t nc = 0; nc < g.n * g.c; ++nc)
    for (std::int64_t i = 0; i < g.out_h(); ++i)
      for (std::int64_t j = 0; j < g.out_w(); ++j) {
        std::size_t first = 0;
        double m = -1;
        for (int ki = 0; ki < 2; ++ki)  // row-major window order, a later equal value loses
          for (int kj = 0; kj < 2; ++kj) {
            const auto pos = std::size_t((nc * g.h + 2 * i + ki) * g.w + 2 * j + kj);
            if (x[pos] > m) {
              m = x[pos];
              first = pos;
            }
          }
        const auto out = std::size_t((nc * g.out_h() + i) * g.out_w() + j);
        CHECK(y[out] == m);
        want_dx[first] += dy[out];
      }
  CHECK(dx == want_dx);
}

TEST_CASE("the dropout mask of an element depends only on (seed, op, global index)", "[backend][dropout]") {
  cpu_device d;
  const tensor_shape global{4, 8, 8};
  auto x = rnd<double>(std::size_t(global.elements()), 21);
  std::vector<double> whole(x.size());
  const dropout_key key{42, 3, 0.25};
  d.dropout(key, whole_shard(global), cs(x), ms(whole));
  std::size_t kept = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const bool keep = dropout_keep(42, 3, i, 0.25);
    kept += keep;
    CHECK(whole[i] == (keep ? x[i] * (1.0 / 0.75) : 0.0));
  }
  CHECK(kept > x.size() / 2);
  CHECK(kept < x.size());
  // any layout's block draws the serial block's mask
  const mesh_shape mesh{2, 2};
  for (nd_sbp sbp : {nd_sbp{S(0), S(2)}, nd_sbp{S(1), S(1)}, nd_sbp{B, S(1)}}) {
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 2; ++b) {
        shard_info s = make_shard(global, sbp, mesh, {a, b, 0, 0});
        std::vector<double> lx(std::size_t(s.local.elements())), ly(lx.size()), ref(lx.size());
        detail::for_each_global_index(s, [&](std::int64_t i, std::int64_t gi) {
          lx[std::size_t(i)] = x[std::size_t(gi)];
          ref[std::size_t(i)] = whole[std::size_t(gi)];
        });
        d.dropout(key, s, cs(lx), ms(ly));
        CHECK(ly == ref);
      }
  }
  CHECK_FALSE((dropout_keep(1, 3, 5, 0.5) == dropout_keep(2, 3, 5, 0.5) && dropout_keep(1, 3, 6, 0.5) == dropout_keep(2, 3, 6, 0.5) &&
               dropout_keep(1, 3, 7, 0.5) == dropout_keep(2, 3, 7, 0.5) && dropout_keep(1, 3, 8, 0.5) == dropout_keep(2, 3, 8, 0.5) &&
               dropout_keep(1, 3, 9, 0.5) == dropout_keep(2, 3, 9, 0.5) && dropout_keep(1, 3, 10, 0.5) == dropout_keep(2, 3, 10, 0.5)));
}

TEST_CASE("make_shard nests several splits of one dim mixed-radix, outer axis first", "[backend][shard]") {
  shard_info s = make_shard({8, 6}, nd_sbp{S(0), S(1)}, mesh_shape{2, 3}, {1, 2, 0, 0});
  CHECK(s.local == tensor_shape{4, 2});
  CHECK(s.offset[0] == 4);
  CHECK(s.offset[1] == 4);
  shard_info t = make_shard({16}, nd_sbp{S(0), S(0)}, mesh_shape{2, 4}, {1, 2, 0, 0});
  CHECK(t.local == tensor_shape{2});
  CHECK(t.offset[0] == 2 * (4 * 1 + 2));
  shard_info p = make_shard({8, 6}, nd_sbp{P, B}, mesh_shape{2, 3}, {1, 2, 0, 0});
  CHECK(p.local == tensor_shape{8, 6});
  CHECK(p.offset[0] == 0);
  CHECK_THROWS_AS(make_shard({8, 6}, nd_sbp{S(0), B}, mesh_shape{2, 3}, {2, 0, 0, 0}), layout_error);
}

TEST_CASE("cross-entropy statistics, loss and gradient match the naive log-softmax", "[backend][xent]") {
  cpu_device d;
  const std::int64_t rows = 3, cols = 5;
  auto x = rnd<double>(std::size_t(rows * cols), 22, -3, 3);
  std::vector<std::int64_t> lab{4, 0, 2};
  std::vector<double> m(static_cast<std::size_t>(rows)), st(static_cast<std::size_t>(2 * rows)), out(1), dx(x.size()), dl{2.0};
  d.row_max(rows, cols, cs(x), ms(m));
  d.xent_stats(rows, cols, cs(x), std::span<const std::int64_t>(lab), std::int64_t(0), cs(m), ms(st));
  d.xent_loss(rows, cs(m), cs(st), 1.0 / 3, ms(out));
  double ref = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (std::int64_t c = 0; c < cols; ++c) s += std::exp(x[std::size_t(r * cols + c)]);
    ref += (std::log(s) - x[std::size_t(r * cols + lab[std::size_t(r)])]) / 3;
  }
  CHECK(std::abs(out[0] - ref) < 1e-13);
  d.xent_bwd(rows, cols, cs(x), std::span<const std::int64_t>(lab), std::int64_t(0), cs(m), cs(st), cs(dl), 1.0 / 3, ms(dx));
  CHECK(fd_error(x, dx, [&](const std::vector<double>& v) {
          std::vector<double> m2(static_cast<std::size_t>(rows)), s2(static_cast<std::size_t>(2 * rows)), o(1);
          d.row_max(rows, cols, cs(v), ms(m2));
          d.xent_stats(rows, cols, cs(v), std::span<const std::int64_t>(lab), std::int64_t(0), cs(m2), ms(s2));
          d.xent_loss(rows, cs(m2), cs(s2), 1.0 / 3, ms(o));
          return 2.0 * o[0];
        }) < 1e-8);
  // a block of columns [2, 5): the target logit is 0 where the label is not held
  std::vector<double> part(std::size_t(rows * 3));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < 3; ++c) part[std::size_t(r * 3 + c)] = x[std::size_t(r * cols + 2 + c)];
  d.xent_stats(rows, std::int64_t(3), cs(part), std::span<const std::int64_t>(lab), std::int64_t(2), cs(m), ms(st));
  CHECK(st[3] == x[std::size_t(0 * cols + 4)]);
  CHECK(st[4] == 0.0);
  CHECK(st[5] == x[std::size_t(2 * cols + 2)]);
}

TEST_CASE("element-wise add, axpy, scale and the SGD-momentum and Adam updates follow their formulas", "[backend][optim]") {
  cpu_device d;
  auto a = rnd<double>(10, 23), b = rnd<double>(10, 24), g = rnd<double>(10, 25);
  std::vector<double> y(10);
  d.add(cs(a), cs(b), ms(y));
  auto z = b;
  d.axpy(0.5, cs(a), ms(z));
  auto w = a;
  d.scale(3.0, ms(w));
  for (std::size_t i = 0; i < 10; ++i) {
    CHECK(y[i] == a[i] + b[i]);
    CHECK(z[i] == b[i] + 0.5 * a[i]);
    CHECK(w[i] == 3.0 * a[i]);
  }
  optimizer_step o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.weight_decay = 0.01;
  o.step = 2;
  auto p = a, vel = b, m = b, v = g;
  for (double& e : v) e = e * e;
  d.sgd_momentum(o, cs(g), ms(vel), ms(p));
  for (std::size_t i = 0; i < 10; ++i) {
    const double nv = 0.9 * b[i] + g[i] + 0.01 * a[i];
    CHECK(std::abs(vel[i] - nv) < 1e-15);
    CHECK(std::abs(p[i] - (a[i] - 0.1 * nv)) < 1e-15);
  }
  p = a;
  auto v0 = v;
  d.adam(o, cs(g), ms(m), ms(v), ms(p));
  for (std::size_t i = 0; i < 10; ++i) {
    const double gi = g[i] + 0.01 * a[i];
    const double nm = 0.9 * b[i] + 0.1 * gi, nv = 0.999 * v0[i] + 0.001 * gi * gi;
    const double upd = 0.1 * (nm / (1 - 0.81)) / (std::sqrt(nv / (1 - 0.999 * 0.999)) + 1e-8);
    CHECK(std::abs(p[i] - (a[i] - upd)) < 1e-12);
  }
}
