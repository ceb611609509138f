#pragma once
// Time of one training step from its parts, under an overlap rule.
//   overlap_rule::grad_sync_with_backward (default): gradient synchronisation is issued layer by
//   layer as gradients become ready during backward, as PyTorch DDP's bucketed all-reduce does
//   (Li et al. 2020, "PyTorch Distributed", VLDB 13(12)), so it hides behind backward compute:
//     step = compute_fwd + comm_fwd + comm_bwd + max(compute_bwd, comm_grad)
//   Boxing of activations (comm_fwd, comm_bwd) sits on the critical path and is not hidden.
//   overlap_rule::none: step = the plain sum of the five terms.
#include <cstdint>
#include <string>
#include <string_view>

#include "autoddl/error.hpp"
#include "autoddl/member_list.hpp"

namespace autoddl {

struct step_terms {
  double compute_fwd = 0;
  double compute_bwd = 0;
  double comm_fwd = 0;   ///< boxing of activations in forward
  double comm_bwd = 0;   ///< boxing of activation gradients in backward
  double comm_grad = 0;  ///< parameter gradients boxed to their storage layout
  /// The five terms, in the order above: code that adds or scales every term goes through this list.
  using terms = member_list<&step_terms::compute_fwd, &step_terms::compute_bwd, &step_terms::comm_fwd,
                            &step_terms::comm_bwd, &step_terms::comm_grad>;
  constexpr step_terms& operator+=(const step_terms& o) {
    terms::for_each([&](auto m) { this->*m += o.*m; });
    return *this;
  }
  friend constexpr bool operator==(const step_terms&, const step_terms&) = default;
};

enum class overlap_rule : std::uint8_t { none, grad_sync_with_backward };

constexpr std::string_view to_string(overlap_rule r) {
  return r == overlap_rule::none ? "none" : "grad_sync_with_backward";
}

constexpr overlap_rule parse_overlap_rule(std::string_view s) {
  if (s == "none") return overlap_rule::none;
  if (s == "grad_sync_with_backward") return overlap_rule::grad_sync_with_backward;
  detail::fail<parse_error>("unknown overlap rule '" + std::string(s) + "'; write none or grad_sync_with_backward");
}

/// With m micro-batches (t holds the whole step: m backwards), the executor issues the gradient
/// synchronisation during the last micro-batch's backward only (the earlier ones accumulate), so
/// only that backward, compute_bwd / m, can hide it:
///   step = compute_fwd + comm_fwd + comm_bwd + (m - 1) / m compute_bwd + max(compute_bwd / m, comm_grad)
constexpr double step_time(const step_terms& t, overlap_rule rule = overlap_rule::grad_sync_with_backward,
                           int microbatches = 1) {
  const double exposed = t.compute_fwd + t.comm_fwd + t.comm_bwd;
  if (rule == overlap_rule::none) return exposed + t.compute_bwd + t.comm_grad;
  const double window = microbatches > 1 ? t.compute_bwd / double(microbatches) : t.compute_bwd;
  return exposed + (t.compute_bwd - window) + (window > t.comm_grad ? window : t.comm_grad);
}

}  // namespace autoddl
