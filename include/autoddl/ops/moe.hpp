#pragma once
// Per-mesh-axis signature rules of the mixture-of-experts ops (Shazeer et al. 2017; GShard,
// Lepikhin et al. 2020; Switch Transformer, Fedus et al. 2021). A routed MLP is
//   logits = x W_r                                  (a linear without bias, [b, s, E])
//   G      = router(logits)                         top-k of softmax(logits), the rest 0
//   aux    = load_balance(logits)                   Switch's balancing loss, per sequence
//   buf    = dispatch(x, G)                         [b, E, C, h]: each expert's C slots
//   out    = experts(buf; W_gate, W_up, W_down)     E SwiGLU MLPs, [b, E, C, h]
//   y      = combine(out, G)                        [b, s, h] = sum_e G[t, e] out[e, slot(t, e)]
// Slots count per sequence in token order: token t takes slot c of expert e when c earlier
// tokens of its sequence went to e; with c >= C it is dropped for that expert (Switch
// Transformer's drop; Megatron-Core's "position" drop policy). Capacity per sequence keeps the
// drops the same under every split of the batch, so every plan computes what serial training
// does. The slot map is a function of each token's picks alone: the top attrs.topk columns of
// its row of G, ties to the lower column, which for the router's G are the router's own picks
// (a picked gate is never below an unpicked 0, and ties break alike). A picked gate that
// underflows to 0 keeps its slot (its contribution to combine is 0); a non-zero gate outside the
// top k is not routed. dispatch and combine carry the router's topk (validate checks it).
//
//   router        S(0) -> S(0), S(1) -> S(1), B -> B (top-k needs a token's E logits whole)
//   load_balance  S(0) -> P (a sum over sequences), B -> B
//   dispatch      X S(0) G S(0) -> S(0)   batch split, each device routes its sequences
//                 X S(2) G B    -> S(3)   hidden split, the slots of every expert
//                 X B G B -> B,  X P G B -> P   (a copy of rows is linear in X)
//   experts       X S(0) W B -> S(0)      batch split
//                 X S(1) W S(0) -> S(1)   expert parallelism: whole experts per device
//                 X S(2) W B -> S(2)      slots split
//                 X B W_gate S(2) W_up S(2) W_down S(1) -> P   expert tensor parallelism
//                 X B W B -> B
//   combine       X S(0) G S(0) -> S(0),  X S(3) G B -> S(2),  X P G B -> P,  X B G B -> B
// The conversion of the dispatched buffer from S(0) to S(1) on an axis is the all-to-all of
// expert parallelism (the S(d) -> S(e) row of sbp/boxing.hpp's table), and back from S(1) to S(0) before combine.
//
// Dropless routing (capacity factor 0) is one op, routed_experts: y = sum over each token's picks
// e of G[t, e] SwiGLU_e(x_t), the picks being the top attrs.topk of G's row (as dispatch's). Its
// kernel sorts the routed (token, pick) rows by expert and runs one GEMM per expert on exactly
// its rows: no slot, no padding. Signatures per axis:
//   X S(0) G S(0) W B -> S(0),  X S(1) G S(1) W B -> S(1)   tokens split, every expert held
//   X B G B W B -> B
//   X B G B W S(0) -> P        whole experts per device on every token: each device computes its
//                              experts' share (Megatron-Core's all-gather token dispatcher: X is
//                              all-gathered before, the partial output reduce-scattered after)
//   X B G B W_gate S(2) W_up S(2) W_down S(1) -> P   expert tensor parallelism
//
// Qwen2-MoE's shared expert is a SwiGLU MLP every token passes through, its output scaled per
// token by a gate: y = sigmoid(x w) out, w [h, 1] a linear without bias. sigmoid_gate is that
// scaling, out [b, s, h] by Z = x w [b, s, 1]; it is linear in out, never in Z:
//   out S(0) Z S(0) -> S(0),  out S(1) Z S(1) -> S(1),  out S(2) Z B -> S(2)
//   out B Z B -> B,  out P Z B -> P
#include <cstdint>
#include <optional>

#include "autoddl/parse_number.hpp"
#include "autoddl/sbp/nd_sbp.hpp"

namespace autoddl {

/// Router over logits [b, s, E]: the batch or sequence may split, E may not, never P.
constexpr std::optional<sbp> router_axis(sbp x) {
  if (x.is_partial() || (x.is_split() && x.dim == 2)) return std::nullopt;
  return x;
}

/// The balancing loss over logits [b, s, E]: per sequence, so a batch split sums (P).
constexpr std::optional<sbp> load_balance_axis(sbp x) {
  if (x.is_broadcast()) return B;
  if (x.is_split() && x.dim == 0) return P;
  return std::nullopt;
}

/// Dispatch of X [b, s, h] by G [b, s, E] into [b, E, C, h].
/// Example: dispatch_axis(S(0), S(0)) == S(0); dispatch_axis(S(2), B) == S(3).
constexpr std::optional<sbp> dispatch_axis(sbp x, sbp g) {
  if (x.is_split() && x.dim == 0 && g.is_split() && g.dim == 0) return S(0);
  if (!g.is_broadcast()) return std::nullopt;
  if (x.is_split() && x.dim == 2) return S(3);
  if (x.is_broadcast() || x.is_partial()) return x;
  return std::nullopt;
}

/// E SwiGLU MLPs over X [b, E, C, h] with W_gate, W_up [E, h, F] and W_down [E, F, h].
/// Example: experts_axis(S(1), S(0), S(0), S(0)) == S(1); experts_axis(B, S(2), S(2), S(1)) == P.
constexpr std::optional<sbp> experts_axis(sbp x, sbp w_gate, sbp w_up, sbp w_down) {
  const bool all_b = w_gate.is_broadcast() && w_up.is_broadcast() && w_down.is_broadcast();
  if (x.is_split() && (x.dim == 0 || x.dim == 2) && all_b) return x;
  if (x.is_split() && x.dim == 1 && w_gate == S(0) && w_up == S(0) && w_down == S(0)) return x;
  if (x.is_broadcast() && all_b) return B;
  if (x.is_broadcast() && w_gate == S(2) && w_up == S(2) && w_down == S(1)) return P;
  return std::nullopt;
}

/// Combine of the experts' output X [b, E, C, h] weighted by G [b, s, E] into [b, s, h].
/// Example: combine_axis(S(3), B) == S(2); combine_axis(P, B) == P; combine_axis(S(1), B) == nullopt.
constexpr std::optional<sbp> combine_axis(sbp x, sbp g) {
  if (x.is_split() && x.dim == 0 && g.is_split() && g.dim == 0) return S(0);
  if (!g.is_broadcast()) return std::nullopt;
  if (x.is_split() && x.dim == 3) return S(2);
  if (x.is_broadcast() || x.is_partial()) return x;
  return std::nullopt;
}

/// Dropless routed experts over X [b, s, h], G [b, s, E], W_gate, W_up [E, h, F], W_down [E, F, h].
/// Example: routed_experts_axis(S(0), S(0), B, B, B) == S(0); routed_experts_axis(B, B, S(0), S(0), S(0)) == P;
/// routed_experts_axis(S(0), S(0), S(0), S(0), S(0)) == nullopt (a token split with an expert split).
constexpr std::optional<sbp> routed_experts_axis(sbp x, sbp g, sbp w_gate, sbp w_up, sbp w_down) {
  const bool all_b = w_gate.is_broadcast() && w_up.is_broadcast() && w_down.is_broadcast();
  const bool whole_experts = w_gate == S(0) && w_up == S(0) && w_down == S(0);
  const bool expert_width = w_gate == S(2) && w_up == S(2) && w_down == S(1);
  if (x.is_split() && (x.dim == 0 || x.dim == 1) && g == x && all_b) return x;
  if (!x.is_broadcast() || !g.is_broadcast()) return std::nullopt;
  if (all_b) return B;
  if (whole_experts || expert_width) return P;
  return std::nullopt;
}

/// The shared expert's gate over out [b, s, h] and Z [b, s, 1].
/// Example: sigmoid_gate_axis(S(2), B) == S(2); sigmoid_gate_axis(P, B) == P; sigmoid_gate_axis(B, P) == nullopt.
constexpr std::optional<sbp> sigmoid_gate_axis(sbp out, sbp z) {
  if (out.is_split() && out.dim < 2 && z == out) return out;
  if (!z.is_broadcast()) return std::nullopt;
  if (out.is_split() && out.dim == 2) return out;
  if (out.is_broadcast() || out.is_partial()) return out;
  return std::nullopt;
}

/// Slots per expert per sequence of `seq` tokens, each routed to `topk` of `experts`, at capacity
/// factor `factor` (GShard, Switch: factor * tokens * k / E, rounded up); 0 is dropless: `seq`
/// slots, as many as a sequence can send one expert. At least 1, never more than seq.
/// The factor is taken as the decimal it was written as (its shortest round-trip decimal,
/// parse_number.hpp) and the ceiling is taken in integers: a product of doubles lands a few ulps
/// above a whole number as often as below (0.07 x 100 x 2 / 2 is 7.000000000000001 in doubles),
/// and the ceiling would then add a slot the written factor does not ask for.
/// Example: capacity_slots(16, 4, 2, 1.25) == 10; capacity_slots(1000, 4, 2, 1.15) == 575;
/// capacity_slots(16, 4, 2, 0) == 16.
inline int capacity_slots(int seq, int experts, int topk, double factor) {
  if (!(factor > 0)) return seq;
  const double approx = factor * double(seq) * double(topk) / double(experts);
  // Rounding moves the product by far less than 1/2: at or above seq the ceiling is capped to
  // seq anyway, below 1/2 it is 1. In between, factor < experts / topk < 2^31 and the integers
  // below stay under 2^121.
  if (!(approx < double(seq))) return seq;
  if (approx < 0.5) return 1;
  __extension__ typedef unsigned __int128 wide;  // g++ and clang; __extension__ tells -Wpedantic it is meant
  const exact_decimal d = shortest_decimal(factor);
  wide num = wide(d.significand) * wide(std::uint64_t(seq)) * wide(std::uint64_t(topk));
  wide den = wide(std::uint64_t(experts));
  for (int k = 0; k < d.exponent; ++k) num *= 10;
  for (int k = 0; k > d.exponent; --k) den *= 10;
  const wide c = (num + den - 1) / den;
  return c < wide(seq) ? (c < 1 ? 1 : int(c)) : seq;
}

}  // namespace autoddl
