#pragma once
// The 1F1B schedule of a pipeline in closed form: its shape (stages, micro-batches, model
// chunks), bubble, in-flight activations and step time.
// 1F1B (PipeDream-Flush; Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
// on GPU Clusters Using Megatron-LM", SC'21, section 2.2.1), with t the slowest stage's
// per-micro-batch forward + backward and x the slowest cut's activation transfer on the stage
// axis link (alpha + bytes / beta, the same size again for the gradient):
//   step = (m + p - 1) * (t + 2 x) + max over stages of step_s       (nothing overlapped)
//   bubble fraction = (p - 1) / m
//   stage i (0-based) holds min(p - i, m) micro-batches of activations in flight.
// Interleaved (v model chunks per device, section 2.2.2): the bubble shrinks by v,
//   step = (m + (p - 1) / v) * t + (m + p - 1) * 2 v x + max step_s   (v times the transfers)
//   bubble fraction = (p - 1) / (v m),
// and stage 0 holds (1 + (p - 1) / (p v)) times the 1F1B in-flight activations (Korthikanti et
// al. 2022, "Reducing Activation Recomputation in Large Transformer Models", section 4.2.3);
// stage i holds min(m, p + (p - 1 - 2i) / v) micro-batches' worth (Megatron-LM's interleaved
// order, schedules.py, replayed; m a multiple of p, as Megatron-LM requires).
// (A device's v chunks are v ranges of the model in Megatron-LM; here its share is priced as one
// contiguous range of the same size, so the cuts stand for the devices' loads, not the chunks.
// The tests replay both schedules event by event and compare step and memory with these forms.)
#include <algorithm>
#include <cmath>

namespace autoddl {

/// The schedule's shape: p stages, m micro-batches, v model chunks per device (1: plain 1F1B).
struct pipeline_shape {
  int stages = 1;
  int microbatches = 1;
  int chunks = 1;
  friend constexpr bool operator==(const pipeline_shape&, const pipeline_shape&) = default;
};

/// The share of the step the devices idle in fill and drain: (p - 1) / (v m) (Narayanan et al.
/// 2021, sections 2.2.1-2.2.2). pipeline_bubble_fraction({4, 8, 1}) == 0.375.
constexpr double pipeline_bubble_fraction(const pipeline_shape& s) {
  return double(s.stages - 1) / (double(s.chunks) * double(s.microbatches));
}

/// Micro-batches of activations stage i (0-based) holds at once under 1F1B: min(p - i, m) (the
/// first stage runs p forwards before its first backward). Interleaved (v chunks of 1/v of the
/// stage each): min(m, p + (p - 1 - 2i) / v) micro-batches' worth, stage 0's
/// p (1 + (p - 1) / (p v)) as Korthikanti et al. 2022 (section 4.2.3) give it.
constexpr double in_flight_microbatches(const pipeline_shape& s, int stage) {
  if (s.chunks <= 1) return double(std::min(s.stages - stage, s.microbatches));
  const double p = s.stages, v = s.chunks;
  return std::min(double(s.microbatches), p + (p - 1 - 2 * stage) / v);
}

/// The step of a pipeline whose slowest stage takes slot_s per micro-batch (forward + backward),
/// whose slowest cut takes send_s to pass one micro-batch's activations (its gradient as long),
/// and whose slowest once-per-step work (gradient sync, update) takes step_s; see the header.
/// pipeline_step_time({4, 8, 1}, 1.0, 0.0, 0.5) == 11.5.
constexpr double pipeline_step_time(const pipeline_shape& s, double slot_s, double send_s, double step_s) {
  const double p = s.stages, m = s.microbatches, v = s.chunks;
  return (m + (p - 1) / v) * slot_s + (m + p - 1) * 2 * v * send_s + step_s;
}

}  // namespace autoddl
