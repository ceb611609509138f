#pragma once
// The oracle tests' own sum of cost terms, written out rather than taken from cost_terms'
// operator+= (the code under test): additive terms summed, transient the max.
#include <algorithm>

#include "autoddl/search/terms.hpp"

namespace autoddl::test {

static_assert(cost_terms::all::size == 8, "cost_terms has a new term: add it to the oracle's sum below");

inline void add_terms(cost_terms& s, const cost_terms& x) {
  s.compute_fwd += x.compute_fwd;
  s.compute_bwd += x.compute_bwd;
  s.comm_fwd += x.comm_fwd;
  s.comm_bwd += x.comm_bwd;
  s.comm_grad += x.comm_grad;
  s.memory += x.memory;
  s.bytes += x.bytes;
  s.transient = std::max(s.transient, x.transient);
}

}  // namespace autoddl::test
