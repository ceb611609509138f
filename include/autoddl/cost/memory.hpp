#pragma once
// Memory held by one device during a training step.
// Optimizer state follows ZeRO (Rajbhandari, Rasley, Ruwase & He 2020, "ZeRO: Memory
// Optimizations Toward Training Trillion Parameter Models", section 3.1): with mixed precision
// (fp16/bf16 parameters), Adam keeps an fp32 master copy, momentum and variance: K = 12 bytes per
// element; SGD with momentum keeps fp32 master + momentum: 8 bytes. In fp32 training the master
// copy is the parameter itself: Adam 8 bytes (m, v), SGD-momentum 4 bytes; in fp64 the same
// states in 8-byte elements: Adam 16 bytes, SGD-momentum 8.
#include <cstdint>
#include <string>
#include <string_view>

#include "autoddl/cost/dtype.hpp"
#include "autoddl/error.hpp"

namespace autoddl {

enum class optimizer : std::uint8_t { sgd_momentum, adam };

constexpr std::string_view to_string(optimizer o) { return o == optimizer::adam ? "adam" : "sgd-momentum"; }

/// "adam" or "sgd-momentum", also spelled "sgd" (what to_string writes back is the first spelling).
/// Throws parse_error naming the text and the names.
constexpr optimizer parse_optimizer(std::string_view s) {
  if (s == "adam") return optimizer::adam;
  if (s == "sgd-momentum" || s == "sgd") return optimizer::sgd_momentum;
  detail::fail<parse_error>("unknown optimizer '" + std::string(s) + "'; write adam or sgd-momentum (also spelled sgd)");
}

/// What the backward pass recomputes instead of keeping from forward, per repeated block
/// (graph::block; Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
/// Transformer Models", section 4):
///   none       every op keeps what its backward reads;
///   selective  the attention core (scores, softmax, dropout of the scores) keeps only its inputs
///              and reruns its forward in backward;
///   full       a block keeps only its input; its whole forward reruns before its backward.
enum class recompute_mode : std::uint8_t { none, selective, full };

constexpr std::string_view to_string(recompute_mode r) {
  return r == recompute_mode::none ? "none" : r == recompute_mode::selective ? "selective" : "full";
}

constexpr recompute_mode parse_recompute(std::string_view s) {
  if (s == "none") return recompute_mode::none;
  if (s == "selective") return recompute_mode::selective;
  if (s == "full") return recompute_mode::full;
  detail::fail<parse_error>("unknown recomputation '" + std::string(s) + "'; write none, selective or full");
}

/// Bytes of optimizer state for `elements` parameters stored in `param_type` (rule above).
///   optimizer_state_bytes(adam, 1000, fp16) == 12000; (adam, 1000, fp32) == 8000; (adam, 1000, fp64) == 16000.
constexpr std::int64_t optimizer_state_bytes(optimizer o, std::int64_t elements, dtype param_type) {
  const std::int64_t states = o == optimizer::adam ? 2 : 1;  // m, v  /  momentum
  if (param_type == dtype::fp64) return elements * 8 * states;
  const bool mixed = param_type != dtype::fp32;
  return elements * 4 * (states + (mixed ? 1 : 0));
}

/// Bytes of one element of the master weights, optimizer state and (with fp32 sums) gradients of a
/// parameter of `param_type`: fp32 for the 16-bit types, the type itself otherwise.
constexpr std::int64_t master_element_bytes(dtype param_type) {
  return bytes_of(param_type) == 2 ? 4 : bytes_of(param_type);
}

/// Bytes of one element of a gradient sum (the accumulator over micro-batches and the synchronised
/// gradient): fp32 for a 16-bit type where `fp32_sums` (Megatron-LM's
/// --accumulate-allreduce-grads-in-fp32, which its bf16 runs turn on), else the parameter's type.
///   gradient_sum_bytes(bf16, true) == 4; (bf16, false) == 2; (fp32, either) == 4.
constexpr std::int64_t gradient_sum_bytes(dtype param_type, bool fp32_sums) {
  return fp32_sums ? master_element_bytes(param_type) : bytes_of(param_type);
}

/// Bytes the optimizer update reads and writes per element it updates, as
/// runtime/detail/parameter_store.hpp runs it. In the master type (master_element_bytes, w bytes):
/// SGD with momentum reads g, v, w and writes v, w (5 w); Adam reads g, m, v, w and writes m, v, w
/// (7 w). A gradient kept in the 16-bit type is widened first (2 read, w written). A 16-bit type
/// then rounds the master into the parameter (w read, 2 written), and fp16, trained with a loss
/// scale, first multiplies its gradient by the scale's reciprocal (w read and written).
///   fp32: adam 28, sgd-momentum 20; bf16 (fp32 sums): adam 34, sgd-momentum 26; fp16: adam 42.
constexpr std::int64_t optimizer_update_bytes(optimizer o, dtype param_type, bool fp32_sums = true) {
  const std::int64_t w = master_element_bytes(param_type), t = bytes_of(param_type);
  std::int64_t bytes = (o == optimizer::adam ? 7 : 5) * w;
  if (t == w) return bytes;
  if (!fp32_sums) bytes += t + w;  // the 16-bit gradient widened
  bytes += w + t;                   // the master rounded into the parameter
  if (param_type == dtype::fp16) bytes += 2 * w;
  return bytes;
}

/// Bytes one device holds, by what they are for.
struct memory_breakdown {
  std::int64_t params = 0;
  std::int64_t grads = 0;
  std::int64_t optimizer = 0;
  std::int64_t activations = 0;  ///< kept from forward for backward
  std::int64_t transient = 0;    ///< peak of short-lived buffers (boxing, workspaces)
  constexpr std::int64_t total() const { return params + grads + optimizer + activations + transient; }
  constexpr memory_breakdown& operator+=(const memory_breakdown& o) {
    params += o.params;
    grads += o.grads;
    optimizer += o.optimizer;
    activations += o.activations;
    transient = transient > o.transient ? transient : o.transient;  // not live at once
    return *this;
  }
  friend constexpr bool operator==(const memory_breakdown&, const memory_breakdown&) = default;
};

}  // namespace autoddl
