#pragma once
// Lifts a per-mesh-axis rule to nd-SBPs: the n-D result is the per-axis results side by side,
// which is exact because chunk order is mixed-radix, outer axis most significant, for every
// tensor alike (autoddl/sbp/nd_sbp.hpp).
#include <optional>

#include "autoddl/sbp/nd_sbp.hpp"

namespace autoddl::detail {

/// lift(f, x, w) applies f(x[i], w[i]) on every axis i; nullopt when an axis has no rule or
/// the nd-SBPs disagree on the number of mesh axes.
template <class F, class... T>
constexpr std::optional<nd_sbp> lift(F f, const nd_sbp& first, const T&... rest) {
  if (((rest.size() != first.size()) || ...)) return std::nullopt;
  nd_sbp r;
  for (int i = 0; i < first.size(); ++i) {
    std::optional<sbp> o = f(first[i], rest[i]...);
    if (!o) return std::nullopt;
    r.push_back(*o);
  }
  return r;
}

}  // namespace autoddl::detail
