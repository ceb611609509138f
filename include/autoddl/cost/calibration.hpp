#pragma once
// Fitting a link's alpha and beta to measured collective times. Each sample is one collective
// run: its ring steps s, bytes per device m (the model's bytes_factor) and measured seconds t.
// The model t = s * alpha + m * g (g = 1/beta) is linear in (alpha, g); fit it by least squares
// on relative residuals (t_model - t) / t, so 4 KiB and 64 MiB messages weigh alike (ordinary
// least squares would let the largest messages decide alone). Normal equations of the 2x2 system;
// a negative alpha (latency below timer noise) is clamped to 0 and g refitted alone.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "autoddl/cost/collective_cost.hpp"
#include "autoddl/mesh/link.hpp"
#include "autoddl/sbp/boxing.hpp"
#include "autoddl/error.hpp"

namespace autoddl {

struct timing_sample {
  double steps = 0;        ///< ring_steps of the collective
  double bytes = 0;        ///< bytes per device the model counts
  double seconds = 0;      ///< measured
  double group_bytes = 0;  ///< T of the run (selects the range in fit_link_two_ranges)
  double reduced = 0;      ///< bytes per device reduced (reduced_bytes)
};

/// The sample of collective `c` on `n` devices whose group holds `group_bytes`, measured `t` s.
constexpr timing_sample sample_of(collective c, std::int64_t n, std::int64_t group_bytes, double t) {
  return {double(ring_steps(c, n)), double(bytes_factor(c, n).of(group_bytes)), t, double(group_bytes),
          double(reduced_bytes(c, n, group_bytes))};
}

/// Least-squares alpha and beta (rule above). @pre at least one sample with bytes > 0 and every
/// seconds > 0; throws autoddl::error otherwise.
///   fit_link({sample_of(all_gather, 4, 4096, 3e-6 + 3072/1e9), ...}) recovers alpha 1e-6, beta 1e9.
constexpr link fit_link(const std::vector<timing_sample>& samples, std::string_view name) {
  // The normal equations' weighted sums of products: steps_bytes is the sum of w * steps * bytes.
  double steps_steps = 0, steps_bytes = 0, bytes_bytes = 0, steps_seconds = 0, bytes_seconds = 0;
  for (const auto& x : samples) {
    if (!(x.seconds > 0)) detail::fail<error>("a timing sample of link '" + std::string(name) + "' has seconds <= 0; measure again");
    const double w = 1 / (x.seconds * x.seconds);
    steps_steps += w * x.steps * x.steps;
    steps_bytes += w * x.steps * x.bytes;
    bytes_bytes += w * x.bytes * x.bytes;
    steps_seconds += w * x.steps * x.seconds;
    bytes_seconds += w * x.bytes * x.seconds;
  }
  if (!(bytes_bytes > 0)) detail::fail<error>("fitting link '" + std::string(name) + "' needs samples that move bytes; measure messages of 4 KiB and more");
  double alpha = 0, seconds_per_byte = 0;
  const double det = steps_steps * bytes_bytes - steps_bytes * steps_bytes;
  if (det > 1e-300 * (steps_steps * bytes_bytes)) {
    alpha = (steps_seconds * bytes_bytes - bytes_seconds * steps_bytes) / det;
    seconds_per_byte = (steps_steps * bytes_seconds - steps_bytes * steps_seconds) / det;
  }
  if (!(alpha > 0) || !(seconds_per_byte > 0)) {
    alpha = 0;
    seconds_per_byte = bytes_seconds / bytes_bytes;
  }
  if (!(seconds_per_byte > 0)) detail::fail<error>("fitting link '" + std::string(name) + "' gave no positive bandwidth; check the samples");
  return link{alpha, 1 / seconds_per_byte, link_name(name)};
}

namespace detail {

/// Weighted least squares of y ~ u * x1 + v * x2 on relative residuals (weight 1 / seconds^2);
/// v is clamped at 0 (and u refitted alone) when it comes out <= 0 or x2 is all 0.
struct rate_pair {
  double u = 0, v = 0;
};
struct rate_row {
  double x1 = 0, x2 = 0, y = 0, seconds = 1;
};
constexpr rate_pair fit_rate_pair(const std::vector<rate_row>& rows) {
  // The normal equations' weighted sums of products: x1_x2 is the sum of w * x1 * x2.
  double x1_x1 = 0, x1_x2 = 0, x2_x2 = 0, x1_y = 0, x2_y = 0;
  for (const auto& r : rows) {
    const double w = 1 / (r.seconds * r.seconds);
    x1_x1 += w * r.x1 * r.x1;
    x1_x2 += w * r.x1 * r.x2;
    x2_x2 += w * r.x2 * r.x2;
    x1_y += w * r.x1 * r.y;
    x2_y += w * r.x2 * r.y;
  }
  rate_pair f;
  const double det = x1_x1 * x2_x2 - x1_x2 * x1_x2;
  if (x2_x2 > 0 && det > 1e-12 * x1_x1 * x2_x2) {
    f.u = (x1_y * x2_x2 - x2_y * x1_x2) / det;
    f.v = (x1_x1 * x2_y - x1_x2 * x1_y) / det;
  }
  if (!(f.v > 0)) f = {x1_x1 > 0 ? x1_y / x1_x1 : 0.0, 0.0};
  return f;
}

/// The alternating fit behind fit_link_two_ranges and fit_link_two_regimes: alpha from the runs
/// below `large_from`; (1/beta, gamma) from the runs of T in [large_from, large_bytes] (all runs
/// of at least large_from when large_bytes == 0); (1/beta_large, gamma_large) from the runs of
/// T > large_bytes, on what they take beyond the first regime's share large_bytes / T. Each on
/// relative residuals, alternated until they settle. @pre both alpha and bandwidth runs exist.
/// Returns the link, with ok == false when a rate came out <= 0.
struct regime_fit {
  link l;
  bool ok = false;
};
constexpr regime_fit fit_regimes(const std::vector<timing_sample>& samples, std::string_view name, double large_from,
                                 double large_bytes) {
  link l{0, 1, link_name(name)};
  l.large_bytes = large_bytes;
  double alpha = 0, g = 0, gamma = 0, g_large = 0, gamma_large = 0;
  for (int it = 0; it < 500; ++it) {
    std::vector<rate_row> mid, big;
    for (const auto& x : samples) {
      if (x.group_bytes < large_from) continue;
      if (large_bytes > 0 && x.group_bytes > large_bytes) continue;
      mid.push_back({x.bytes, x.reduced, x.seconds - x.steps * alpha, x.seconds});
    }
    const rate_pair first = fit_rate_pair(mid);
    rate_pair second{};
    if (large_bytes > 0) {
      for (const auto& x : samples) {
        if (!(x.group_bytes > large_bytes)) continue;
        const double f = large_bytes / x.group_bytes;
        big.push_back({(1 - f) * x.bytes, (1 - f) * x.reduced,
                       x.seconds - x.steps * alpha - f * (x.bytes * first.u + x.reduced * first.v), x.seconds});
      }
      second = fit_rate_pair(big);
    }
    double num = 0, den = 0;
    for (const auto& x : samples) {
      if (!(x.group_bytes < large_from)) continue;
      const double w = 1 / (x.seconds * x.seconds);
      num += w * x.steps * (x.seconds - x.bytes * first.u - x.reduced * first.v);  // T < large_bytes: first regime
      den += w * x.steps * x.steps;
    }
    const double a2 = den > 0 && num > 0 ? num / den : 0.0;
    auto near = [](double a, double b) { return (a - b) * (a - b) <= 1e-26 * (a * a + b * b) + 1e-300; };
    const bool settled = near(a2, alpha) && near(first.u, g) && near(first.v, gamma) && near(second.u, g_large) &&
                         near(second.v, gamma_large);
    alpha = a2;
    g = first.u;
    gamma = first.v;
    g_large = second.u;
    gamma_large = second.v;
    if (settled) break;
  }
  if (!(g > 0) || (large_bytes > 0 && !(g_large > 0))) return {l, false};
  l.alpha = alpha;
  l.beta = 1 / g;
  l.gamma = gamma;
  if (large_bytes > 0) {
    l.beta_large = 1 / g_large;
    l.gamma_large = gamma_large;
  }
  return {l, true};
}

/// Sum over the runs of at least `large_from` of the squared relative error of `l`.
constexpr double relative_error(const link& l, const std::vector<timing_sample>& samples, double large_from) {
  double e = 0;
  for (const auto& x : samples) {
    if (x.group_bytes < large_from) continue;
    const double r = (l.time(x.steps, x.bytes, x.reduced, x.group_bytes) - x.seconds) / x.seconds;
    e += r * r;
  }
  return e;
}

constexpr void check_seconds(const std::vector<timing_sample>& samples, std::string_view name) {
  for (const auto& x : samples)
    if (!(x.seconds > 0)) fail<error>("a timing sample of link '" + std::string(name) + "' has seconds <= 0; measure again");
}

}  // namespace detail

/// Two-range fit: beta and gamma from the runs of at least `large_from` group bytes, where
/// bandwidth dominates and where training's gradient buckets lie; alpha from the smaller runs.
/// All on relative residuals, alternated until they settle: (g, gamma) from the large runs'
/// t - s alpha (alpha = 0 at first; gamma clamped at 0, and 0 when no run reduces); alpha from
/// the small runs' t - m g - r gamma (clamped at 0). Exact for linear data. One regime: see
/// fit_link_two_regimes for a link whose rate drops beyond a cache. Falls back to fit_link (no
/// gamma) when either range is empty.
constexpr link fit_link_two_ranges(const std::vector<timing_sample>& samples, std::string_view name, double large_from) {
  detail::check_seconds(samples, name);
  bool small = false, large = false;
  for (const auto& x : samples) (x.group_bytes >= large_from ? large : small) = true;
  if (!small || !large) return fit_link(samples, name);
  const detail::regime_fit f = detail::fit_regimes(samples, name, large_from, 0);
  if (!f.ok) detail::fail<error>("fitting link '" + std::string(name) + "' gave no positive bandwidth; check the samples");
  return f.l;
}

/// Two regimes split at `large_bytes` of T (link::time): alpha from the runs below
/// `large_from`, (beta, gamma) from the runs of T in [large_from, large_bytes],
/// (beta_large, gamma_large) from the runs beyond, each by relative least squares. Exact on
/// data of that shape. @pre runs in all three ranges and every seconds > 0; throws
/// autoddl::error otherwise or when a rate comes out <= 0.
constexpr link fit_link_two_regimes_at(const std::vector<timing_sample>& samples, std::string_view name, double large_from,
                                       double large_bytes) {
  detail::check_seconds(samples, name);
  bool small = false, mid = false, big = false;
  for (const auto& x : samples) {
    small = small || x.group_bytes < large_from;
    mid = mid || (x.group_bytes >= large_from && x.group_bytes <= large_bytes);
    big = big || x.group_bytes > large_bytes;
  }
  if (!(large_bytes >= large_from) || !small || !mid || !big)
    detail::fail<error>("fitting link '" + std::string(name) + "' with a second regime beyond " + std::to_string(large_bytes) +
                        " bytes needs runs below " + std::to_string(large_from) + " bytes, between the two and beyond; measure a wider range of sizes");
  const detail::regime_fit f = detail::fit_regimes(samples, name, large_from, large_bytes);
  if (!f.ok) detail::fail<error>("fitting link '" + std::string(name) + "' gave no positive bandwidth in one of its regimes; check the samples");
  return f.l;
}

/// The calibration fit: fit_link_two_ranges, or two regimes (fit_link_two_regimes_at) split at
/// whichever candidate large_bytes leaves the least squared relative error over the runs of at
/// least `large_from`. Candidates: the measured sizes T >= large_from and the geometric means of
/// neighbouring ones, such that each regime keeps at least two measured sizes (two rates per
/// regime). The one-regime link is kept unless a second regime at least halves the error, so
/// data without a cliff keep one regime. Recovers a known split among the candidates exactly;
/// on this machine it finds the L3 cliff (docs/cost-model.md).
constexpr link fit_link_two_regimes(const std::vector<timing_sample>& samples, std::string_view name, double large_from) {
  link best = fit_link_two_ranges(samples, name, large_from);
  double best_error = detail::relative_error(best, samples, large_from);
  std::vector<double> sizes;
  bool small = false;
  for (const auto& x : samples) {
    small = small || x.group_bytes < large_from;
    if (x.group_bytes < large_from) continue;
    bool seen = false;
    for (double s : sizes) seen = seen || s == x.group_bytes;
    if (!seen) sizes.push_back(x.group_bytes);
  }
  if (!small) return best;
  std::sort(sizes.begin(), sizes.end());
  std::vector<double> candidates;
  // each regime's two rates are fitted on at least two sizes: the split leaves two measured sizes
  // at or below it (from large_from) and two above
  for (std::size_t i = 1; i + 2 < sizes.size(); ++i) {
    candidates.push_back(sizes[i]);
    // geometric mean by Newton's method (std::sqrt is not constexpr in C++20)
    double g = (sizes[i] + sizes[i + 1]) / 2;
    for (int k = 0; k < 60; ++k) g = (g + sizes[i] * sizes[i + 1] / g) / 2;
    candidates.push_back(g);
  }
  for (double cut : candidates) {
    const detail::regime_fit f = detail::fit_regimes(samples, name, large_from, cut);
    if (!f.ok) continue;
    const double e = detail::relative_error(f.l, samples, large_from);
    if (e < 0.5 * best_error - 1e-18) {
      best = f.l;
      best_error = e;
    }
  }
  return best;
}

}  // namespace autoddl
