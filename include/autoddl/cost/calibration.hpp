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
  double steps = 0;    ///< ring_steps of the collective
  double bytes = 0;    ///< bytes per device the model counts
  double seconds = 0;  ///< measured
};

/// The sample of collective `c` on `n` devices whose group holds `group_bytes`, measured `t` s.
constexpr timing_sample sample_of(collective c, std::int64_t n, std::int64_t group_bytes, double t) {
  return {double(ring_steps(c, n)), double(bytes_factor(c, n).of(group_bytes)), t};
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

}  // namespace autoddl
