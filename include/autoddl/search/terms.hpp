#pragma once
// What one choice costs per device: time terms of the step and memory, added over the ops and
// edges of a plan (transient buffers combine by max: only one boxing buffer lives at a time).
#include <algorithm>
#include <cstdint>

namespace autoddl {

struct cost_terms {
  double compute_fwd = 0;   ///< seconds
  double compute_bwd = 0;   ///< seconds
  double comm_fwd = 0;      ///< seconds of forward boxing
  double comm_bwd = 0;      ///< seconds of backward boxing (gradients of activations)
  double comm_grad = 0;     ///< seconds of parameter-gradient synchronisation (may overlap backward)
  double memory = 0;        ///< bytes that live through the step (params, grads, optimizer, activations)
  double transient = 0;     ///< bytes of the largest temporary buffer (max, not sum)
  double bytes = 0;         ///< bytes this device sends

  constexpr cost_terms& operator+=(const cost_terms& o) {
    compute_fwd += o.compute_fwd;
    compute_bwd += o.compute_bwd;
    comm_fwd += o.comm_fwd;
    comm_bwd += o.comm_bwd;
    comm_grad += o.comm_grad;
    memory += o.memory;
    transient = std::max(transient, o.transient);
    bytes += o.bytes;
    return *this;
  }
  friend constexpr cost_terms operator+(cost_terms a, const cost_terms& b) { return a += b; }
  /// `count` items of terms o: the additive terms times count, the transient once (a max).
  constexpr cost_terms& add_times(const cost_terms& o, int count) {
    if (count == 1) return *this += o;
    const double c = double(count);
    compute_fwd += c * o.compute_fwd;
    compute_bwd += c * o.compute_bwd;
    comm_fwd += c * o.comm_fwd;
    comm_bwd += c * o.comm_bwd;
    comm_grad += c * o.comm_grad;
    memory += c * o.memory;
    transient = std::max(transient, o.transient);
    bytes += c * o.bytes;
    return *this;
  }
  /// Everything but `transient` subtracts; the caller owns the max of transients.
  constexpr cost_terms& subtract_additive(const cost_terms& o) {
    compute_fwd -= o.compute_fwd;
    compute_bwd -= o.compute_bwd;
    comm_fwd -= o.comm_fwd;
    comm_bwd -= o.comm_bwd;
    comm_grad -= o.comm_grad;
    memory -= o.memory;
    bytes -= o.bytes;
    return *this;
  }
  constexpr double compute() const { return compute_fwd + compute_bwd; }
  constexpr double comm() const { return comm_fwd + comm_bwd + comm_grad; }
  /// Step time with nothing overlapped: the additive objective the exact references minimise.
  constexpr double serial_time() const { return compute() + comm(); }
  constexpr double peak_memory() const { return memory + transient; }
};

}  // namespace autoddl
