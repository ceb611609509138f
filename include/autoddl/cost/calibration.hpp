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

/// Two-range fit: beta and gamma from the runs of at least `large_from` group bytes, where
/// bandwidth dominates and where training's gradient buckets lie; alpha from the smaller runs.
/// All on relative residuals, alternated until they settle: (g, gamma) from the large runs'
/// t - s alpha (alpha = 0 at first; gamma clamped at 0, and 0 when no run reduces); alpha from
/// the small runs' t - m g - r gamma (clamped at 0). Exact for linear data. A caches-then-memory
/// machine (CPU ranks: ~10 GB/s in L3, ~3 GB/s beyond) is not linear, and one fit over
/// 4 KiB..64 MiB would let the cache-resident sizes set beta. Falls back to fit_link (no gamma)
/// when either range is empty.
constexpr link fit_link_two_ranges(const std::vector<timing_sample>& samples, std::string_view name, double large_from) {
  std::vector<timing_sample> small, large;
  for (const auto& x : samples) {
    if (!(x.seconds > 0)) detail::fail<error>("a timing sample of link '" + std::string(name) + "' has seconds <= 0; measure again");
    if (x.group_bytes >= large_from) large.push_back(x);
    else small.push_back(x);
  }
  if (small.empty() || large.empty()) return fit_link(samples, name);
  struct bandwidth_fit {
    double g = 0, gamma = 0;
  };
  auto fit_large = [&](double alpha) {
    double mm = 0, mr = 0, rr = 0, my = 0, ry = 0;
    for (const auto& x : large) {
      const double w = 1 / (x.seconds * x.seconds), y = x.seconds - x.steps * alpha;
      mm += w * x.bytes * x.bytes;
      mr += w * x.bytes * x.reduced;
      rr += w * x.reduced * x.reduced;
      my += w * x.bytes * y;
      ry += w * x.reduced * y;
    }
    bandwidth_fit f;
    const double det = mm * rr - mr * mr;
    if (rr > 0 && det > 1e-12 * mm * rr) {
      f.g = (my * rr - ry * mr) / det;
      f.gamma = (mm * ry - mr * my) / det;
    }
    if (!(f.gamma > 0)) f = {mm > 0 ? my / mm : 0.0, 0.0};
    return f;
  };
  auto fit_alpha = [&](const bandwidth_fit& f) {
    double num = 0, den = 0;
    for (const auto& x : small) {
      const double w = 1 / (x.seconds * x.seconds);
      num += w * x.steps * (x.seconds - x.bytes * f.g - x.reduced * f.gamma);
      den += w * x.steps * x.steps;
    }
    return den > 0 && num > 0 ? num / den : 0.0;
  };
  bandwidth_fit f = fit_large(0);
  double alpha = 0;
  for (int it = 0; it < 500; ++it) {
    const double a2 = fit_alpha(f);
    const bandwidth_fit f2 = fit_large(a2);
    auto near = [](double a, double b) { return (a - b) * (a - b) <= 1e-26 * (a * a + b * b) + 1e-300; };
    const bool settled = near(a2, alpha) && near(f2.g, f.g) && near(f2.gamma, f.gamma);
    alpha = a2;
    f = f2;
    if (settled) break;
  }
  if (!(f.g > 0)) detail::fail<error>("fitting link '" + std::string(name) + "' gave no positive bandwidth; check the samples");
  link l{alpha, 1 / f.g, link_name(name)};
  l.gamma = f.gamma;
  return l;
}

}  // namespace autoddl
