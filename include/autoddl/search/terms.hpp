#pragma once
// What one choice costs per device: time terms of the step and memory, added over the ops and
// edges of a plan (transient buffers combine by max: only one boxing buffer lives at a time).
// The five time terms are step_terms' own (cost/step_time.hpp), so a cost_terms is priced by
// step_time as it stands; the lists below name every term once for the sums.
#include <algorithm>
#include <cstdint>

#include "autoddl/cost/step_time.hpp"
#include "autoddl/member_list.hpp"

namespace autoddl {

struct cost_terms : step_terms {
  double memory = 0;        ///< bytes that live through the step (params, grads, optimizer, activations)
  double transient = 0;     ///< bytes of the largest temporary buffer (max, not sum)
  double bytes = 0;         ///< bytes this device sends

  /// The terms that add over ops and edges: the time terms, memory and bytes.
  using additive = step_terms::terms::append<&cost_terms::memory, &cost_terms::bytes>;
  /// The terms counted once per micro-batch (the executor runs them m times a step): time and bytes.
  using per_micro_batch = step_terms::terms::append<&cost_terms::bytes>;
  /// Every term: the additive ones and the transient.
  using all = additive::append<&cost_terms::transient>;

  constexpr cost_terms& operator+=(const cost_terms& o) {
    additive::for_each([&](auto m) { this->*m += o.*m; });
    transient = std::max(transient, o.transient);
    return *this;
  }
  friend constexpr cost_terms operator+(cost_terms a, const cost_terms& b) { return a += b; }
  /// `count` items of terms o: the additive terms times count, the transient once (a max).
  constexpr cost_terms& add_times(const cost_terms& o, int count) {
    if (count == 1) return *this += o;
    const double c = double(count);
    additive::for_each([&](auto m) { this->*m += c * o.*m; });
    transient = std::max(transient, o.transient);
    return *this;
  }
  /// Everything but `transient` subtracts; the caller owns the max of transients.
  constexpr cost_terms& subtract_additive(const cost_terms& o) {
    additive::for_each([&](auto m) { this->*m -= o.*m; });
    return *this;
  }
  /// Every term equal (the time terms, then memory, transient, bytes).
  friend constexpr bool operator==(const cost_terms&, const cost_terms&) = default;

  constexpr double compute() const { return compute_fwd + compute_bwd; }
  constexpr double comm() const { return comm_fwd + comm_bwd + comm_grad; }
  /// Step time with nothing overlapped: the additive objective the exact references minimise.
  constexpr double serial_time() const { return compute() + comm(); }
  constexpr double peak_memory() const { return memory + transient; }
};

}  // namespace autoddl
