#pragma once
// Fitting a link's alpha and beta to measured collective times. Each sample is one collective
// run: its ring steps s, bytes per device m (the model's bytes_factor) and measured seconds t.
// The model t = s * alpha + m * g (g = 1/beta) is linear in (alpha, g); fit it by least squares
// on relative residuals (t_model - t) / t, so 4 KiB and 64 MiB messages weigh alike (ordinary
// least squares would let the largest messages decide alone). Normal equations of the 2x2 system;
// a negative alpha (latency below timer noise) is clamped to 0 and g refitted alone.
#include <string>
#include <vector>

#include "autoddl/cost/collective_cost.hpp"
#include "autoddl/mesh/link.hpp"
#include "autoddl/sbp/boxing.hpp"
#include "autoddl/sbp/error.hpp"

namespace autoddl {

struct timing_sample {
  double steps = 0;        ///< ring_steps of the collective
  double bytes = 0;        ///< bytes per device the model counts
  double seconds = 0;      ///< measured
  double group_bytes = 0;  ///< T of the run (selects the range in fit_link_two_ranges)
};

/// The sample of collective `c` on `n` devices whose group holds `group_bytes`, measured `t` s.
constexpr timing_sample sample_of(collective c, std::int64_t n, std::int64_t group_bytes, double t) {
  return {double(ring_steps(c, n)), double(bytes_factor(c, n).of(group_bytes)), t, double(group_bytes)};
}

/// Least-squares alpha and beta (rule above). @pre at least one sample with bytes > 0 and every
/// seconds > 0; throws autoddl::error otherwise.
///   fit_link({sample_of(all_gather, 4, 4096, 3e-6 + 3072/1e9), ...}) recovers alpha 1e-6, beta 1e9.
constexpr link fit_link(const std::vector<timing_sample>& samples, std::string_view name) {
  double sss = 0, ssm = 0, smm = 0, st = 0, sm = 0;
  for (const auto& x : samples) {
    if (!(x.seconds > 0)) detail::fail<error>("a timing sample of link '" + std::string(name) + "' has seconds <= 0; measure again");
    const double w = 1 / (x.seconds * x.seconds);
    sss += w * x.steps * x.steps;
    ssm += w * x.steps * x.bytes;
    smm += w * x.bytes * x.bytes;
    st += w * x.steps * x.seconds;
    sm += w * x.bytes * x.seconds;
  }
  if (!(smm > 0)) detail::fail<error>("fitting link '" + std::string(name) + "' needs samples that move bytes; measure messages of 4 KiB and more");
  double alpha = 0, g = 0;
  const double det = sss * smm - ssm * ssm;
  if (det > 1e-300 * (sss * smm)) {
    alpha = (st * smm - sm * ssm) / det;
    g = (sss * sm - ssm * st) / det;
  }
  if (!(alpha > 0) || !(g > 0)) {
    alpha = 0;
    g = sm / smm;
  }
  if (!(g > 0)) detail::fail<error>("fitting link '" + std::string(name) + "' gave no positive bandwidth; check the samples");
  return link{alpha, 1 / g, link_name(name)};
}

/// Two-range fit: beta from the runs of at least `large_from` group bytes, where bandwidth
/// dominates and where training's gradient buckets lie; alpha from the smaller runs. Both on
/// relative residuals, alternated until they settle: g from the large runs' t - s alpha
/// (alpha = 0 at first); alpha from the small runs' t - m g (clamped at 0). Exact for linear
/// data. A caches-then-memory machine (CPU ranks: ~10 GB/s in L3, ~3 GB/s beyond) is not
/// linear, and one fit over 4 KiB..64 MiB would let the cache-resident sizes set beta.
/// Falls back to fit_link when either range is empty.
constexpr link fit_link_two_ranges(const std::vector<timing_sample>& samples, std::string_view name, double large_from) {
  std::vector<timing_sample> small, large;
  for (const auto& x : samples) {
    if (!(x.seconds > 0)) detail::fail<error>("a timing sample of link '" + std::string(name) + "' has seconds <= 0; measure again");
    if (x.group_bytes >= large_from) large.push_back(x);
    else small.push_back(x);
  }
  if (small.empty() || large.empty()) return fit_link(samples, name);
  auto fit_g = [&](double alpha) {
    double num = 0, den = 0;
    for (const auto& x : large) {
      const double w = 1 / (x.seconds * x.seconds);
      num += w * x.bytes * (x.seconds - x.steps * alpha);
      den += w * x.bytes * x.bytes;
    }
    return den > 0 ? num / den : 0.0;
  };
  auto fit_alpha = [&](double g) {
    double num = 0, den = 0;
    for (const auto& x : small) {
      const double w = 1 / (x.seconds * x.seconds);
      num += w * x.steps * (x.seconds - x.bytes * g);
      den += w * x.steps * x.steps;
    }
    return den > 0 && num > 0 ? num / den : 0.0;
  };
  double g = fit_g(0), alpha = 0;
  for (int it = 0; it < 500; ++it) {
    const double a2 = fit_alpha(g), g2 = fit_g(a2);
    const bool settled = (a2 - alpha) * (a2 - alpha) <= 1e-26 * a2 * a2 && (g2 - g) * (g2 - g) <= 1e-26 * g2 * g2;
    alpha = a2;
    g = g2;
    if (settled) break;
  }
  if (!(g > 0)) detail::fail<error>("fitting link '" + std::string(name) + "' gave no positive bandwidth; check the samples");
  return link{alpha, 1 / g, link_name(name)};
}

}  // namespace autoddl
