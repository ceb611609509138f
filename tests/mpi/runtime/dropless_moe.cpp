// The dropless expert-parallel layer (runtime/dropless_moe.hpp) on every rank of the job, in
// doubles, against a brute-force serial layer written here: every token times each picked
// expert's SwiGLU, weighted by its gate, summed; its gradients by the chain rule, token by token.
// Random routings with fixed seeds (printed on failure), skewed so that some experts get no
// token on some ranks and one gate of every few tokens is forced to 0 (still dispatched). Also:
// tokens per expert against a brute-force count of the picks, and bytes sent == the prediction
// of cost/dropless.hpp for the whole job's histogram (counted here from every rank's picks).
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "autoddl/backend/cpu.hpp"
#include "autoddl/backend/mpi.hpp"
#include "autoddl/runtime/dropless_moe.hpp"

using namespace autoddl;

namespace {

/// The whole job's problem: p ranks x t tokens, E experts, every rank draws the same numbers.
struct problem {
  int p = 1;
  dropless_geometry g;  // per rank
  std::vector<double> x, gates, dy, w_gate, w_up, w_down;  // global: [p t, h], [p t, E], [p t, h], E x ...
  std::vector<std::int64_t> picks;                         // [p t, k], ascending per token
};

problem make_problem(unsigned seed, int p) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> pick_size(1, 3);
  problem pr;
  pr.p = p;
  const std::int64_t local = pick_size(rng);
  pr.g = {std::int64_t(pick_size(rng) * 3 + (seed % 2)), 4, 3 + std::int64_t(seed % 3), local * p, 0};
  pr.g.topk = std::min<std::int64_t>(pr.g.experts, 1 + std::int64_t(rng() % 3));
  const std::int64_t n = p * pr.g.tokens, h = pr.g.hidden, f = pr.g.ffn, e = pr.g.experts, k = pr.g.topk;
  std::uniform_real_distribution<double> u(-1, 1);
  auto fill = [&](std::vector<double>& v, std::int64_t size) {
    v.resize(std::size_t(size));
    for (auto& z : v) z = u(rng);
  };
  fill(pr.x, n * h);
  fill(pr.dy, n * h);
  fill(pr.w_gate, e * h * f);
  fill(pr.w_up, e * h * f);
  fill(pr.w_down, e * f * h);
  pr.gates.assign(std::size_t(n * e), 0.0);
  std::vector<double> weight(static_cast<std::size_t>(e));  // skew: later experts are rarely picked
  for (std::int64_t c = 0; c < e; ++c) weight[std::size_t(c)] = 1.0 / double(1 + c * c);
  for (std::int64_t t = 0; t < n; ++t) {
    std::vector<std::int64_t> chosen;
    std::vector<double> w = weight;
    while (std::int64_t(chosen.size()) < k) {
      const std::int64_t c = std::discrete_distribution<std::int64_t>(w.begin(), w.end())(rng);
      chosen.push_back(c);
      w[std::size_t(c)] = 0;
    }
    std::sort(chosen.begin(), chosen.end());
    for (const std::int64_t c : chosen) {
      pr.picks.push_back(c);
      pr.gates[std::size_t(t * e + c)] = t % 5 == 2 && c == chosen.front() ? 0.0 : 0.5 + u(rng) / 4;
    }
  }
  return pr;
}

double silu(double a) { return a / (1 + std::exp(-a)); }
double silu_grad(double a) {
  const double s = 1 / (1 + std::exp(-a));
  return s * (1 + a * (1 - s));
}

/// The serial layer and its gradients over all tokens and experts, by loops.
struct reference {
  std::vector<double> y, dx, dgates, dw_gate, dw_up, dw_down;
};

reference serial(const problem& pr) {
  const std::int64_t n = pr.p * pr.g.tokens, h = pr.g.hidden, f = pr.g.ffn, e = pr.g.experts, k = pr.g.topk;
  reference r;
  r.y.assign(std::size_t(n * h), 0);
  r.dx.assign(std::size_t(n * h), 0);
  r.dgates.assign(std::size_t(n * e), 0);
  r.dw_gate.assign(pr.w_gate.size(), 0);
  r.dw_up.assign(pr.w_up.size(), 0);
  r.dw_down.assign(pr.w_down.size(), 0);
  auto wg = [&](std::int64_t c, std::int64_t i, std::int64_t j) { return std::size_t((c * h + i) * f + j); };
  auto wd = [&](std::int64_t c, std::int64_t j, std::int64_t i) { return std::size_t((c * f + j) * h + i); };
  for (std::int64_t t = 0; t < n; ++t)
    for (std::int64_t q = 0; q < k; ++q) {
      const std::int64_t c = pr.picks[std::size_t(t * k + q)];
      const double gate = pr.gates[std::size_t(t * e + c)];
      std::vector<double> a(std::size_t(f), 0), up(std::size_t(f), 0), out(std::size_t(h), 0), dm(std::size_t(f), 0);
      for (std::int64_t j = 0; j < f; ++j)
        for (std::int64_t i = 0; i < h; ++i) {
          a[std::size_t(j)] += pr.x[std::size_t(t * h + i)] * pr.w_gate[wg(c, i, j)];
          up[std::size_t(j)] += pr.x[std::size_t(t * h + i)] * pr.w_up[wg(c, i, j)];
        }
      for (std::int64_t i = 0; i < h; ++i)
        for (std::int64_t j = 0; j < f; ++j) out[std::size_t(i)] += silu(a[std::size_t(j)]) * up[std::size_t(j)] * pr.w_down[wd(c, j, i)];
      for (std::int64_t i = 0; i < h; ++i) {
        const double dyi = pr.dy[std::size_t(t * h + i)];
        r.y[std::size_t(t * h + i)] += gate * out[std::size_t(i)];
        r.dgates[std::size_t(t * e + c)] += dyi * out[std::size_t(i)];
        for (std::int64_t j = 0; j < f; ++j) {
          r.dw_down[wd(c, j, i)] += silu(a[std::size_t(j)]) * up[std::size_t(j)] * gate * dyi;
          dm[std::size_t(j)] += gate * dyi * pr.w_down[wd(c, j, i)];
        }
      }
      for (std::int64_t j = 0; j < f; ++j) {
        const double da = dm[std::size_t(j)] * up[std::size_t(j)] * silu_grad(a[std::size_t(j)]);
        const double du = dm[std::size_t(j)] * silu(a[std::size_t(j)]);
        for (std::int64_t i = 0; i < h; ++i) {
          const double xi = pr.x[std::size_t(t * h + i)];
          r.dw_gate[wg(c, i, j)] += xi * da;
          r.dw_up[wg(c, i, j)] += xi * du;
          r.dx[std::size_t(t * h + i)] += da * pr.w_gate[wg(c, i, j)] + du * pr.w_up[wg(c, i, j)];
        }
      }
    }
  return r;
}

/// |got - want| <= 1e-10 (1 + |want|) element by element, on this rank's block [off, off + len) of want.
bool close(std::span<const double> got, const std::vector<double>& want, std::size_t off) {
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(got[i] - want[off + i]) <= 1e-10 * (1 + std::abs(want[off + i])))) return false;
  return true;
}

template <class V>
std::span<const double> block(const V& v, std::size_t off, std::size_t len) {
  return std::span<const double>(v).subspan(off, len);
}

}  // namespace

TEST_CASE("dropless expert parallelism equals the serial layer, forward and backward, with bytes as predicted",
          "[mpi][moe][dropless]") {
  mpi::ring_comm comm(MPI_COMM_WORLD);
  const int p = comm.size(), me = comm.rank();
  for (unsigned seed = 1; seed <= 12; ++seed) {
    INFO("seed " << seed << " on " << p << " ranks");
    const problem pr = make_problem(seed, p);
    const dropless_geometry& g = pr.g;
    const std::int64_t t = g.tokens, h = g.hidden, f = g.ffn, e = g.experts, k = g.topk, local = e / p;
    INFO("tokens per rank " << t << ", experts " << e << ", topk " << k << ", ffn " << f);
    const reference want = serial(pr);
    cpu_device d;
    const std::size_t xo = std::size_t(me * t * h), go = std::size_t(me * t * e), wo = std::size_t(me * local * h * f);
    const dropless_weights<double> w{block(pr.w_gate, wo, std::size_t(local * h * f)),
                                     block(pr.w_up, wo, std::size_t(local * h * f)),
                                     block(pr.w_down, wo, std::size_t(local * f * h))};
    const auto picks = std::span<const std::int64_t>(pr.picks).subspan(std::size_t(me * t * k), std::size_t(t * k));
    dropless_state<double, cpu_device> st;
    const auto gates = block(pr.gates, go, std::size_t(t * e));
    const auto y = dropless_moe_forward(d, comm, g, block(pr.x, xo, std::size_t(t * h)), gates, picks, w, st);
    CHECK(close(d.view(y), want.y, xo));
    const auto grads = dropless_moe_backward(d, comm, g, gates, w, st, block(pr.dy, xo, std::size_t(t * h)));
    CHECK(close(d.view(grads.dx), want.dx, xo));
    CHECK(close(d.view(grads.dgates), want.dgates, go));
    CHECK(close(d.view(grads.dw_gate), want.dw_gate, wo));
    CHECK(close(d.view(grads.dw_up), want.dw_up, wo));
    CHECK(close(d.view(grads.dw_down), want.dw_down, wo));

    // Brute force: every rank's tokens per expert from the picks, and the bytes this rank sends:
    // the counts of its other ranks' experts, then (twice: forward and backward) its rows bound
    // for other ranks and the rows the others sent to its experts.
    std::vector<std::int64_t> histogram(std::size_t(p * e), 0);
    for (std::int64_t i = 0; i < p * t; ++i)
      for (std::int64_t q = 0; q < k; ++q) ++histogram[std::size_t((i / t) * e + pr.picks[std::size_t(i * k + q)])];
    CHECK(st.routes.tokens_per_expert == std::vector<std::int64_t>(histogram.begin() + me * e, histogram.begin() + (me + 1) * e));
    std::int64_t out_rows = 0, in_rows = 0;
    for (std::int64_t c = 0; c < e; ++c) {
      if (c / local != me) out_rows += histogram[std::size_t(me * e + c)];
      for (int j = 0; j < p; ++j)
        if (j != me && c / local == me) in_rows += histogram[std::size_t(j * e + c)];
    }
    const std::int64_t want_bytes = (p - 1) * local * 8 + 2 * (out_rows + in_rows) * h * 8;
    CHECK(st.bytes_sent == want_bytes);
    CHECK(st.bytes_predicted == want_bytes);
  }
}

TEST_CASE("a dropless layer refuses experts that do not split over its ranks, in one sentence", "[mpi][moe][dropless]") {
  mpi::ring_comm comm(MPI_COMM_WORLD);
  cpu_device d;
  dropless_state<double, cpu_device> st;
  const dropless_geometry g{1, 2, 2, 2 * comm.size() + 1, 1};
  std::vector<double> x(2), gates(std::size_t(g.experts)), w(8);
  std::vector<std::int64_t> picks{0};
  if (comm.size() > 1)
    CHECK_THROWS_WITH(dropless_moe_forward(d, comm, g, std::span<const double>(x), std::span<const double>(gates),
                                           std::span<const std::int64_t>(picks), dropless_weights<double>{w, w, w}, st),
                      "experts=" + std::to_string(g.experts) + " do not split over " + std::to_string(comm.size()) +
                          " expert-parallel ranks; choose a degree that divides the experts");
  const dropless_geometry bad_k{1, 2, 2, 2 * comm.size(), 2 * comm.size() + 1};
  CHECK_THROWS_WITH(dropless_moe_forward(d, comm, bad_k, std::span<const double>(x), std::span<const double>(gates),
                                         std::span<const std::int64_t>(picks), dropless_weights<double>{w, w, w}, st),
                    "a dropless layer needs topk=" + std::to_string(bad_k.topk) + " in [1, experts=" +
                        std::to_string(bad_k.experts) + "]");
}
