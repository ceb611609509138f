#pragma once
// Order statistics of timing samples, for the programs and benchmarks that measure step and
// collective times (TOOLCHAIN.md: report the median and a spread, never one run).
#include <algorithm>
#include <cstddef>
#include <vector>

namespace autoddl::tools {

/// The q-quantile of a sample (0 <= q <= 1), by linear interpolation between order statistics
/// (the definition of R's type 7 and numpy's default). quantile({1,2,3,4}, 0.5) == 2.5.
inline double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double h = q * double(v.size() - 1);
  const std::size_t lo = std::size_t(h);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (h - double(lo)) * (v[hi] - v[lo]);
}

/// The median of a sample: median({3,1,2}) == 2, median({1,2,3,4}) == 2.5.
inline double median(const std::vector<double>& v) { return quantile(v, 0.5); }

/// The inter-quartile range, the spread reported beside a median.
inline double iqr(const std::vector<double>& v) { return quantile(v, 0.75) - quantile(v, 0.25); }

}  // namespace autoddl::tools
