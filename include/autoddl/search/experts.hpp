#pragma once
// Expert baseline plans, written as layout rules per mesh axis and completed greedily:
//   dp        every axis data parallel: activations S(0) (batch), parameters B, stored B
//   megatron  the innermost axis tensor parallel (Megatron-LM, Shoeybi 2019: a block's linears
//             column-parallel, then row-parallel where their input comes split, as Megatron-LM
//             pairs them: megatron_weight_split), others data
//   zero      data parallel with parameters, gradients and optimizer state stored sharded
//             (ZeRO, Rajbhandari 2020), gathered before use
//   owt       "one weird trick" (Krizhevsky 2014, section 3): convolutions data parallel;
//             fully-connected layers model parallel: each device computes 1/n of a linear's
//             outputs for the whole batch (W split on out on every axis; where out does not divide,
//             on in), the ops after them keep that split where cheapest; the last data-parallel
//             activation is gathered
//   2d        weights split on both axes of a 2-D mesh (2-D tensor parallelism): each device
//             holds one block of a linear's W [in, out]; consecutive linears alternate W [S(0),
//             S(1)] (input [S(-1), B], output [P, S(-1)]) and W [S(1), S(0)] (input [B, S(-1)],
//             output [S(-1), P]), the ops between them keep their producer's layout, a partial
//             sum all-reduced: one all-reduce over one axis forward and one over the other
//             backward per linear, Megatron-LM's column/row pairing on both axes at once
// Ops are visited in topological order; among the candidates that obey the rules, each op takes
// the one cheapest with its already-placed producers (compute + boxing on those edges). An op
// with no candidate obeying the rules takes the cheapest of all, and the plan says so.
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "autoddl/index.hpp"
#include "autoddl/search/planner.hpp"
#include "autoddl/search/strategy.hpp"

namespace autoddl {

/// The layout rules of the expert plans (strategy::dp, megatron, zero, owt, two_d).
enum class expert { dp, megatron, zero, owt, two_d };

constexpr std::string_view to_string(expert e) {
  switch (e) {
    case expert::dp: return "dp";
    case expert::megatron: return "megatron";
    case expert::zero: return "zero";
    case expert::owt: return "owt";
    case expert::two_d: return "2d";
  }
  return "?";
}

/// The rule set of an expert strategy. @pre is_expert(s)
constexpr expert expert_of(const plan_strategy& s) {
  if (std::holds_alternative<strategy::megatron>(s)) return expert::megatron;
  if (std::holds_alternative<strategy::zero>(s)) return expert::zero;
  if (std::holds_alternative<strategy::owt>(s)) return expert::owt;
  if (std::holds_alternative<strategy::two_d>(s)) return expert::two_d;
  return expert::dp;
}

struct expert_plan {
  std::vector<int> pick;              ///< per node of plan_problem::untied()
  std::vector<std::string> relaxed;   ///< ops where no candidate obeyed the rules
};

namespace detail {

inline bool is_weighted(const op_node& n) {
  return n.kind == op_kind::linear || n.kind == op_kind::conv2d || n.kind == op_kind::embedding ||
         n.kind == op_kind::matmul;
}

// The ops between the tensor-parallel regions (layernorm or RMSNorm, dropout, residual add):
// replicated on the tensor-parallel axis (Megatron-LM), or with sequence parallelism (Korthikanti
// et al. 2022, section 4.2.2) split on the sequence dim (dim 1 of [batch, seq, hidden]).
inline bool sequence_parallel_op(const op_node& n) {
  return (n.kind == op_kind::layernorm || n.kind == op_kind::rmsnorm || n.kind == op_kind::dropout ||
          n.kind == op_kind::add) &&
         !n.inputs.empty() && n.inputs[0].rank() == 3;
}

// Context parallelism on axis a (megatron's cp): every activation split on its sequence (dim 1),
// the attention core's keys and values whole (gathered), weights replicated.
inline bool obeys_context_parallel(const op_node& n, const signature& sig, int a) {
  for (const auto& p : sig.params)
    if (!p[a].is_broadcast()) return false;
  for (std::size_t i = 0; i < sig.inputs.size(); ++i) {
    if (at(n.inputs, i).rank() < 2) continue;
    const sbp want = n.kind == op_kind::attention && i > 0 ? B : S(1);
    if (!(sig.inputs[i][a] == want)) return false;
  }
  return true;
}

/// Megatron's expert knobs as layout rules (strategy::megatron ep and etp): the axes whose
/// devices hold whole experts (a bit mask, 0: none), and whether the tensor-parallel axis splits
/// each expert's width (etp = tp) or its slots (etp = 1).
struct moe_rules {
  unsigned ep_axes = 0;
  bool etp_split = true;
  constexpr bool expert_axis(int a) const { return ((ep_axes >> a) & 1u) != 0; }
};

}  // namespace detail

/// The knobs of an expert plan beyond the expert itself (make_expert_plan); each default is the
/// knob off. Example: make_expert_plan(problem, expert::zero, {.zero_stage = 2}).
struct expert_knobs {
  bool sequence_parallel = false;  ///< megatron's sp: the sequence split on its tensor-parallel axis
  int zero_stage = 3;              ///< ZeRO's stage: 1 optimizer state sharded, 2 and gradients, 3 and parameters
  int cp_axis = -1;                ///< megatron's context-parallel axis, -1: none
  bool sharded_optimizer = false;  ///< megatron's dopt=1: each parameter updated in slices (zero_stage is then 1)
  bool sharded_params = false;     ///< megatron's fsdp=1: each parameter stored sharded on its replicas (ZeRO-3's)
  detail::moe_rules moe{};         ///< megatron's ep and etp as layout rules
};

namespace detail {

/// Where an op sits for the expert rules, beyond its signature (expert_pick_op works it out).
struct op_region {
  bool router_linear = false;  ///< it computes router logits or a shared expert's gate logit, replicated on the tensor-parallel axis
  bool fc_region = false;      ///< it is a linear or reads, directly or through other ops, a linear's output
};

inline bool is_moe_op(op_kind k) {
  return k == op_kind::router || k == op_kind::load_balance || k == op_kind::dispatch || k == op_kind::experts ||
         k == op_kind::combine || k == op_kind::routed_experts;
}

/// Whether op kind k holds the experts' weights: the capacity-bound experts or the dropless routed_experts.
inline bool is_experts_op(op_kind k) { return k == op_kind::experts || k == op_kind::routed_experts; }

// An experts op on the expert-parallel axis: whole experts (X S(1), every weight S(0)); on the
// tensor-parallel axis: each expert's width split (X B; W_gate, W_up S(2); W_down S(1)) or its
// slots (X S(2), weights B).
// A routed_experts op (dropless) on the expert-parallel axis: whole experts over every token (X B,
// weights S(0): Megatron-Core's all-gather dispatcher); on the tensor-parallel axis each expert's
// width as above, or the tokens' sequence split or whole with every expert held.
inline bool obeys_routed_experts(const signature& sig, int a, bool expert_axis, bool etp_split) {
  const sbp x = sig.inputs[0][a];
  const auto all = [&](sbp v) { return sig.params[0][a] == v && sig.params[1][a] == v && sig.params[2][a] == v; };
  if (expert_axis) return x.is_broadcast() && all(S(0));
  if (etp_split) return x.is_broadcast() && sig.params[0][a] == S(2) && sig.params[1][a] == S(2) && sig.params[2][a] == S(1);
  return (x == S(1) || x.is_broadcast()) && all(B);
}

inline bool obeys_experts(const signature& sig, int a, bool expert_axis, bool etp_split) {
  const sbp x = sig.inputs[0][a];
  if (expert_axis) return x == S(1) && sig.params[0][a] == S(0) && sig.params[1][a] == S(0) && sig.params[2][a] == S(0);
  if (etp_split) return x.is_broadcast() && sig.params[0][a] == S(2) && sig.params[1][a] == S(2) && sig.params[2][a] == S(1);
  return x == S(2) && sig.params[0][a].is_broadcast() && sig.params[1][a].is_broadcast() && sig.params[2][a].is_broadcast();
}

// Whether candidate sig of op n obeys expert e, with knobs k, on every mesh axis (a router
// linear is replicated on the tensor-parallel axis, as Megatron-Core keeps its router).
inline bool obeys(expert e, const op_node& n, const signature& sig, int axes, const expert_knobs& k = {}, op_region f = {}) {
  const bool sp = k.sequence_parallel, router_linear = f.router_linear, fc_region = f.fc_region;
  const int cp_axis = k.cp_axis;
  const moe_rules& moe = k.moe;
  const bool matrix = n.kind == op_kind::linear && !n.params.empty() && n.params[0].rank() == 2;
  if (e == expert::owt && matrix) {  // model parallel on every axis (prefers: on the outputs)
    for (int a = 0; a < axes; ++a)
      if (!sig.params[0][a].is_split()) return false;
    return true;
  }
  if (e == expert::owt && fc_region) return true;  // after the linears: where cheapest
  if (e == expert::two_d && matrix && axes == 2)
    return (sig.params[0][0] == S(0) && sig.params[0][1] == S(1)) || (sig.params[0][0] == S(1) && sig.params[0][1] == S(0));
  for (int a = 0; a < axes; ++a) {
    const bool tensor = e == expert::megatron && (a == axes - 1 || axes == 1);
    if (is_experts_op(n.kind) && (moe.expert_axis(a) || tensor)) {
      const bool ok = n.kind == op_kind::experts ? obeys_experts(sig, a, moe.expert_axis(a), moe.etp_split)
                                                 : obeys_routed_experts(sig, a, moe.expert_axis(a), moe.etp_split);
      if (!ok) return false;
      continue;
    }
    if (a == cp_axis && is_moe_op(n.kind)) continue;  // routing whole sequences: gathered where cheapest
    if (a == cp_axis) {
      if (!obeys_context_parallel(n, sig, a)) return false;
      continue;
    }
    // routing and the shared expert's gate: where the greedy finds it cheapest
    if (tensor && (is_moe_op(n.kind) || n.kind == op_kind::sigmoid_gate || router_linear)) {
      if (router_linear && !sig.params[0][a].is_broadcast()) return false;
      continue;
    }
    bool tensor_axis = false;
    switch (e) {
      case expert::dp:
      case expert::zero: tensor_axis = false; break;
      case expert::megatron: tensor_axis = a == axes - 1 && axes >= 1; break;
      case expert::owt: tensor_axis = false; break;  // before the linears: data parallel
      case expert::two_d: tensor_axis = true; break;
    }
    if (!tensor_axis) {
      if (e == expert::megatron && axes == 1) tensor_axis = true;  // a 1-D mesh is all tensor axis
    }
    if (tensor_axis && e == expert::megatron && sequence_parallel_op(n)) {
      // with sp the sequence split (Korthikanti 2022); without, replicated on the tensor-parallel
      // devices, as Megatron-LM runs them (Shoeybi 2019, figure 3: the g operator all-reduces
      // the row-parallel output before dropout and the residual add)
      for (const auto& in : sig.inputs)
        if (!(in[a] == (sp ? S(1) : B))) return false;
    }
    if (tensor_axis) {
      if (is_weighted(n) && !n.params.empty() && n.params[0].rank() >= 2 && !sig.params[0][a].is_split()) return false;
    } else {
      for (const auto& p : sig.params)
        if (!p[a].is_broadcast()) return false;
      for (std::size_t i = 0; i < sig.inputs.size(); ++i)  // a scalar (a loss term) sums over the batch: P
        if (sig.inputs[i].size() > a && at(n.inputs, i).rank() > 0 && !(sig.inputs[i][a] == S(0))) return false;
    }
  }
  return true;
}

// Per op of g: whether it is a linear or reads a linear's output, directly or through other ops
// (owt's fully-connected layers and what follows them, where 2d's activations split).
inline std::vector<char> fc_region_of(const graph& g) {
  std::vector<char> in(g.ops.size(), 0);
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    in[i] = g.ops[i].kind == op_kind::linear;
    for (const tensor_ref& t : at(g.op_inputs, i))
      if (t.op >= 0 && at(in, t.op)) in[i] = 1;
  }
  return in;
}

// Where candidates allow: owt's linears split W [in, out] on out over every axis (each device
// computes 1/n of the outputs; a layer whose outputs do not divide takes another split); in 2d's
// fully-connected region an op other than a linear takes each input as its producer made it, a
// partial sum all-reduced (P -> B).
inline bool prefers(expert e, const plan_problem& problem, const std::vector<int>& pick, int op, const signature& sig,
                    bool fc_region) {
  const graph& g = problem.model();
  if (e == expert::owt && at(g.ops, op).kind == op_kind::linear && !sig.params.empty()) {
    for (int a = 0; a < sig.params[0].size(); ++a)
      if (!(sig.params[0][a] == S(1))) return false;
    return true;
  }
  if (e != expert::two_d || problem.options().mesh.size() != 2 || !fc_region || at(g.ops, op).kind == op_kind::linear) return true;
  for (std::size_t i = 0; i < sig.inputs.size(); ++i) {
    const tensor_ref in = at(at(g.op_inputs, op), i);
    if (in.op < 0) continue;
    const nd_sbp& made = at(problem.op_candidate(in.op, at(pick, in.op)).outputs, in.index);
    for (int a = 0; a < made.size(); ++a)
      if (!(sig.inputs[i][a] == (made[a].is_partial() ? B : made[a]))) return false;
  }
  return true;
}

// 2d's alternation: a linear whose input arrives split on its last dim over axis 1 alone takes
// W [S(1), S(0)], every other linear W [S(0), S(1)]; nullopt off a 2-D mesh or for other ops.
inline std::optional<nd_sbp> two_d_weight(const plan_problem& problem, const std::vector<int>& pick, int op) {
  const graph& g = problem.model();
  const op_node& n = at(g.ops, op);
  if (problem.options().mesh.size() != 2 || n.kind != op_kind::linear || n.params.empty() || n.params[0].rank() != 2)
    return std::nullopt;
  const tensor_ref in = at(g.op_inputs, op)[0];
  if (in.op >= 0) {
    const nd_sbp& got = at(problem.op_candidate(in.op, at(pick, in.op)).outputs, in.index);
    const sbp last = S(at(at(g.ops, in.op).outputs, in.index).rank() - 1);
    if (got[1] == last && !(got[0] == last)) return nd_sbp{S(1), S(0)};
  }
  return nd_sbp{S(0), S(1)};
}

// The storage an expert gives a parameter whose compute layout is `comp`.
inline nd_sbp expert_storage(expert e, const nd_sbp& comp, const tensor_shape& shape, const mesh_shape& mesh) {
  nd_sbp st = comp;
  for (int a = 0; a < st.size(); ++a)
    if (st[a].is_partial()) st[a] = B;
  if (e == expert::zero) st = zero_shard(st, shape, mesh);
  return st;
}

}  // namespace detail

namespace detail {

// The storage pick an expert gives each parameter for a compute layout (see make_expert_plan).
struct expert_storage_rule {
  const plan_problem& problem;
  expert e;
  int zero_stage;
  bool sharded_optimizer = false;  ///< megatron dopt=1: ZeRO-1's updates on megatron's storage
  bool sharded_params = false;     ///< megatron fsdp=1: ZeRO-3's storage on megatron's compute layouts
  bool zero_12() const { return (e == expert::zero && zero_stage < 3) || sharded_optimizer; }
  // memo per parameter: (compute layout, pick); a parameter meets few distinct compute layouts,
  // while its op's candidates and edges ask for them many times
  mutable std::vector<std::vector<std::pair<nd_sbp, int>>> memo{};
  int operator()(int p, const nd_sbp& comp) const {
    if (memo.empty()) memo.resize(problem.model().params.size());
    auto& seen = at(memo, p);
    for (const auto& [c, pick] : seen)
      if (c == comp) return pick;
    const int pick = compute(p, comp);
    seen.emplace_back(comp, pick);
    return pick;
  }
  int compute(int p, const nd_sbp& comp) const {
    const tensor_shape& shape = at(problem.model().params, p).shape;
    const expert kind = sharded_params ? expert::zero : e == expert::zero && zero_12() ? expert::dp : e;
    const nd_sbp want = expert_storage(kind, comp, shape, problem.options().mesh);
    const nd_sbp update = zero_12() ? zero_shard(want, shape, problem.options().mesh) : want;
    // a tied weight's gradient contributions are summed, then synchronised once (DDP, Megatron-LM);
    // ZeRO-1 sums every gradient whole, then reduce-scatters it; ZeRO-2 as backward makes it, but
    // a tied weight's whole (DeepSpeed's reduce hook runs once autograd has added its uses)
    const auto& cands = problem.param_candidates(p);
    nd_sbp sum = problem.tied_param(p) ? reduce_layout(update) : update;
    if (zero_12() && (zero_stage == 1 || problem.tied_param(p)) && !(update == want)) sum = reduce_layout(want);
    for (int c = 0; c < int(cands.size()); ++c)
      if (at(cands, c) == param_choice{want, sum, update}) return c;
    const nd_sbp all_b = nd_sbp::filled(problem.options().mesh.size(), B);
    for (int c = 0; c < int(cands.size()); ++c)
      if (at(cands, c) == param_choice{all_b, problem.tied_param(p) ? reduce_layout(all_b) : all_b, all_b}) return c;
    return 0;
  }
};

// Whether op i is a linear whose output a cross-entropy reads as its logits (the output layer).
inline bool feeds_loss(const graph& g, int i) {
  if (at(g.ops, i).kind != op_kind::linear) return false;
  for (std::size_t j = 0; j < g.ops.size(); ++j)
    if (g.ops[j].kind == op_kind::cross_entropy && !g.op_inputs[j].empty() && g.op_inputs[j][0].op == i) return true;
  return false;
}

// Megatron-LM's pairing (Shoeybi et al. 2019, section 3): a linear of a repeated block whose
// input arrives split on its last dim on the tensor-parallel axis (the output of a
// column-parallel linear, through the attention core or GeLU) is row-parallel (W [in, out]
// split on in, S(0)); every other linear of a block is column-parallel (split on out, S(1)).
// GPT: q, k, v and mlp.fc column-parallel, attn.proj and mlp.proj row-parallel. The output
// layer whose logits a cross-entropy reads is column-parallel too (split on the vocabulary; W
// [vocab, hidden] of a tied head on dim 0), its loss vocab-parallel (Shoeybi 2019, section 3:
// "parallelize the input embedding and the output layer along the vocabulary dimension"), where
// the tensor-parallel devices divide the vocabulary (Megatron-LM pads it to a multiple of them,
// --make-vocab-size-divisible-by; a model here keeps its own, GPT-2's 50257 included, and its
// head takes the cheapest split the candidates offer).
// Returns the split W needs on the innermost axis, or nullopt where the rule says nothing.
inline std::optional<sbp> megatron_weight_split(const plan_problem& problem, const std::vector<int>& pick, int op) {
  const graph& g = problem.model();
  const op_node& n = at(g.ops, op);
  if (n.kind != op_kind::linear || n.params.empty() || n.params[0].rank() != 2) return std::nullopt;
  if (at(g.block, op) < 0) {  // the output layer; a vocabulary the tensor-parallel devices do not divide: unsplit there
    const int vocab_dim = n.attrs.transpose_w ? 0 : 1;
    const int tensor_devices = problem.options().mesh[problem.options().mesh.size() - 1];
    if (!feeds_loss(g, op) || n.params[0][vocab_dim] % tensor_devices != 0) return std::nullopt;
    return S(vocab_dim);
  }
  const tensor_ref in = at(g.op_inputs, op)[0];
  if (in.op < 0) return S(1);
  const nd_sbp& got = at(problem.op_candidate(in.op, at(pick, in.op)).outputs, in.index);
  const int tensor_axis = problem.options().mesh.size() - 1;
  return got[tensor_axis] == S(at(at(g.ops, in.op).outputs, in.index).rank() - 1) ? S(0) : S(1);
}

// Megatron-LM's cross-entropy reads the logits as the column-parallel output layer made them,
// split on the vocabulary (its vocab-parallel loss): that split on the tensor-parallel axis where
// the producer made it, nullopt for any other op.
inline std::optional<sbp> megatron_loss_split(const plan_problem& problem, const std::vector<int>& pick, int op) {
  const graph& g = problem.model();
  if (at(g.ops, op).kind != op_kind::cross_entropy) return std::nullopt;
  const tensor_ref in = at(g.op_inputs, op)[0];
  if (in.op < 0) return std::nullopt;
  const sbp vocab = S(at(at(g.ops, in.op).outputs, in.index).rank() - 1);
  const nd_sbp& got = at(problem.op_candidate(in.op, at(pick, in.op)).outputs, in.index);
  return got[problem.options().mesh.size() - 1] == vocab ? std::optional<sbp>(vocab) : std::nullopt;
}

// Whether op i is a linear whose output a router reads (its logits), or a shared expert's
// sigmoid gate (its logit, input 1): Megatron-Core keeps both weights whole on the
// tensor-parallel devices (its router, and SharedExpertMLP's gate_weight [1, h]).
inline bool feeds_router(const graph& g, int i) {
  if (at(g.ops, i).kind != op_kind::linear) return false;
  for (std::size_t j = 0; j < g.ops.size(); ++j) {
    const auto& in = g.op_inputs[j];
    if (g.ops[j].kind == op_kind::router && !in.empty() && in[0].op == i) return true;
    if (g.ops[j].kind == op_kind::sigmoid_gate && in.size() > 1 && in[1].op == i) return true;
  }
  return false;
}

// The greedy completion of op i: among its candidates that obey e (and, for megatron, the
// column/row pairing, for 2d the alternation; among those, the ones it prefers where there are
// any), the one cheapest with its placed producers; none obeys: the cheapest of all (pass 2),
// and the op is named in relaxed. fc_region: fc_region_of the model.
inline void expert_pick_op(const plan_problem& problem, expert e, const expert_knobs& knobs, const expert_storage_rule& storage, const std::vector<char>& fc_region,
                           const std::vector<int>& in_edges, int i, expert_plan& r) {
  const graph& g = problem.model();
  const choice_problem& cp = problem.untied();
  const int nops = int(g.ops.size()), axes = problem.options().mesh.size();
  const auto& sigs = problem.op_candidates(i);
  const bool router_linear = feeds_router(g, i);
  const std::optional<sbp> split =
      e == expert::megatron && !router_linear ? megatron_weight_split(problem, r.pick, i) : std::nullopt;
  const std::optional<nd_sbp> block = e == expert::two_d ? two_d_weight(problem, r.pick, i) : std::nullopt;
  const std::optional<sbp> logits = e == expert::megatron ? megatron_loss_split(problem, r.pick, i) : std::nullopt;
  const bool fc = at(fc_region, i) != 0;
  const op_region region{router_linear, fc};
  for (int pass = 0; pass < 3 && at(r.pick, i) < 0; ++pass) {
    double best = std::numeric_limits<double>::infinity();
    for (int c = 0; c < int(sigs.size()); ++c) {
      if (pass < 2 && !obeys(e, at(g.ops, i), at(sigs, c), axes, knobs, region)) continue;
      if (pass < 2 && split && !(at(sigs, c).params[0][axes - 1] == *split)) continue;
      if (pass < 2 && block && !(at(sigs, c).params[0] == *block)) continue;
      if (pass < 2 && logits && !(at(sigs, c).inputs[0][axes - 1] == *logits)) continue;
      if (pass == 0 && !prefers(e, problem, r.pick, i, at(sigs, c), fc)) continue;
      double score = cp.unary(i, c).serial_time();
      for (int k : in_edges) {
        const auto& info = at(problem.edge_infos(), k);
        const int u = at(cp.edges(), k).u;
        const int cu = info.param ? storage(u - nops, at(at(sigs, c).params, info.tensor_index)) : at(r.pick, u);
        score += cp.pair(k, cu, c).serial_time();
      }
      if (score < best) {
        best = score;
        at(r.pick, i) = c;
      }
    }
    if (pass == 2) r.relaxed.push_back(at(g.ops, i).name);
  }
}

// Each parameter stored as its first user wants (its first parameter edge; 0 where it has none).
inline void expert_store_params(const plan_problem& problem, const expert_storage_rule& storage, expert_plan& r) {
  const int nparams = int(problem.model().params.size()), nops = int(problem.model().ops.size());
  std::vector<char> placed(std::size_t(nparams), 0);
  for (int p = 0; p < nparams; ++p) at(r.pick, problem.param_node(p)) = 0;
  for (const auto& info : problem.edge_infos()) {  // one pass: a parameter's first edge places it
    if (!info.param || at(placed, info.from_node - nops)) continue;
    const int p = info.from_node - nops;
    at(placed, p) = 1;
    const auto& sig = at(problem.op_candidates(info.to_node), at(r.pick, info.to_node));
    at(r.pick, problem.param_node(p)) = storage(p, at(sig.params, info.tensor_index));
  }
}

}  // namespace detail

/// The expert plan e of problem with its knobs (expert_knobs: megatron's sp, cp, dopt, ep and
/// etp; ZeRO's stage). Example: make_expert_plan(problem, expert::megatron, {.sequence_parallel = true}).
inline expert_plan make_expert_plan(const plan_problem& problem, expert e, const expert_knobs& knobs = {}) {
  const choice_problem& cp = problem.untied();
  const int zero_stage = knobs.sharded_optimizer ? 1 : knobs.zero_stage;
  const detail::expert_storage_rule storage{problem, e, zero_stage, knobs.sharded_optimizer, knobs.sharded_params};
  if (storage.zero_12() && !(zero_stage == 1 ? problem.options().zero1_layouts : problem.options().zero2_layouts))
    detail::fail<layout_error>("zero:stage=" + detail::itos(zero_stage) + " needs ZeRO-" + detail::itos(zero_stage) +
                               "'s layouts in the problem (plan_options::zero" + detail::itos(zero_stage) +
                               "_layouts; plan_micro_batched sets it for that strategy)");
  expert_plan r;
  r.pick.assign(std::size_t(cp.nodes()), -1);
  std::vector<std::vector<int>> in_edges(std::size_t(cp.nodes()));  // incoming edges per op node
  for (std::size_t k = 0; k < cp.edges().size(); ++k) at(in_edges, cp.edges()[k].v).push_back(int(k));
  // An op whose pick depends on exactly what an earlier op's did takes that op's pick: the
  // blocks of a GPT after the first (computed one by one, the expert starts were a quarter
  // of planning GPT-3 on 16x8x8). The key is everything expert_pick_op reads: the op's candidates and own
  // terms (shared lists: same address, same content), its kind, whether it is in a block, and
  // per incoming edge its class, its tensor and the producer's pick, or for a parameter edge
  // the parameter's terms (parameters priced alike store alike).
  std::map<std::vector<std::uintptr_t>, std::pair<int, bool>> done;  // key -> pick, relaxed
  const int nops = int(problem.model().ops.size());
  const std::vector<char> fc_region = detail::fc_region_of(problem.model());
  for (int i = 0; i < nops; ++i) {
    std::vector<std::uintptr_t> key{reinterpret_cast<std::uintptr_t>(&problem.op_candidates(i)),
                                    reinterpret_cast<std::uintptr_t>(&cp.unary(i, 0)),
                                    std::uintptr_t(at(problem.model().ops, i).kind), std::uintptr_t(at(problem.model().block, i) >= 0),
                                    std::uintptr_t(at(fc_region, i))};
    for (int k : at(in_edges, i)) {
      const auto& info = at(problem.edge_infos(), k);
      const int u = at(cp.edges(), k).u;
      key.insert(key.end(), {std::uintptr_t(at(cp.edges(), k).cls), std::uintptr_t(info.param), std::uintptr_t(info.tensor_index),
                             info.param ? reinterpret_cast<std::uintptr_t>(&cp.unary(u, 0)) : std::uintptr_t(at(r.pick, u))});
    }
    if (const auto f = done.find(key); f != done.end()) {
      at(r.pick, i) = f->second.first;
      if (f->second.second) r.relaxed.push_back(at(problem.model().ops, i).name);
      continue;
    }
    const std::size_t relaxed = r.relaxed.size();
    detail::expert_pick_op(problem, e, knobs, storage, fc_region, at(in_edges, i), i, r);
    done.emplace(std::move(key), std::pair<int, bool>{at(r.pick, i), r.relaxed.size() > relaxed});
  }
  detail::expert_store_params(problem, storage, r);
  return r;
}

}  // namespace autoddl
