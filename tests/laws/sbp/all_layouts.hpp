#pragma once
// Enumerates every nd-SBP over {B, P, S(0..rank-1)} on a mesh of k axes: the domain of the laws.
#include <vector>

#include "autoddl/sbp.hpp"

namespace autoddl::test {

constexpr std::vector<nd_sbp> all_nd_sbp(int axes, int rank) {
  std::vector<sbp> letters{B, P};
  for (int d = 0; d < rank; ++d) letters.push_back(S(d));
  std::vector<nd_sbp> out{nd_sbp{}};
  for (int i = 0; i < axes; ++i) {
    std::vector<nd_sbp> next;
    for (const auto& p : out)
      for (sbp l : letters) {
        nd_sbp q = p;
        q.push_back(l);
        next.push_back(q);
      }
    out = next;
  }
  return out;
}

}  // namespace autoddl::test
