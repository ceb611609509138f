#pragma once
// From a model graph, a mesh and hardware to a priced layout-choice problem, and back to a plan.
//
// Nodes: every op (its candidates are signatures(op, mesh)) and every parameter (its candidates
// are storage layouts over {B, S(d)}: B is data-parallel storage, S is ZeRO/FSDP sharding).
// A parameter with several uses (a tied weight: GPT's wte in the embedding and the LM head) has
// one gradient: each use's contribution is boxed to the parameter's summing layout, the
// contributions are added locally, and the sum is synchronised to storage once, as DDP and
// Megatron-LM do. Its candidates pair a storage layout with a summing layout: the storage's
// reduce layout (P where storage is B; one all-reduce or reduce-scatter per axis for all uses)
// or the storage itself (every use synchronised on its own, then added).
// Edges: an activation from producer to consumer costs the boxing of the forward tensor
// (producer's output layout -> consumer's input layout) plus the backward boxing of its gradient
// (dual(consumer layout) -> dual(producer layout); B and P are dual, S stays S).
// Box once for all consumers: an output read by several ops of its own repeated block keeps that
// edge for its first reader f only; each later reader i takes a chained edge from f's input,
// priced on (f's input layout, i's input layout): forward it boxes f's copy (free, read in place,
// where the layouts agree: q, k and v share one all-gather of the layernorm output), backward its
// gradient is boxed dual(i's layout) -> dual(f's layout) and added into f's input gradient, which
// f's edge boxes back to the producer once (later readers run backward first). A reader whose
// layout differs from f's boxes from f's copy, which may cost more than from the producer: the
// search sees that price. Outside blocks, every reader has its own edge from the producer. A
// parameter edge costs gathering storage -> compute layout in forward (the gathered copy is kept
// for backward) and boxing the gradient dual(compute) -> storage (comm_grad, which may overlap
// backward compute). Every boxing is cost/'s cheapest alpha-beta path: the one the executor runs.
// Ops of identical repeated blocks (graph::block_pos) are tied into one decision for the descent.
//
// A step of m micro-batches (plan_options::microbatches; the graph is one micro-batch) is priced
// as the trainer runs it: every op and activation edge m times (time and bytes); parameters
// gathered once per step and kept (or, resharded after forward, gathered for each micro-batch's
// forward and backward: plan_options::reshard_after_forward), their gradient contributions accumulated over the
// micro-batches in the compute layout and boxed to the summing layout once (a parameter edge
// whose gradient boxes holds that accumulation buffer through the step when m > 1, in place of
// its share of the stored gradient); memory
// holds one micro-batch's activations; with overlap, only the last micro-batch's backward hides
// the gradient synchronisation (step_time(terms, rule, m)). Recomputation
// (plan_options::recompute, repeated blocks):
//   selective  a block's attention core keeps its inputs only; its forward reruns in backward
//              (compute_bwd += compute_fwd).
//   full       a block keeps its inputs: the outputs of ops outside it that it reads, and the
//              boxed copies of those where the edge boxes; every op of the block reruns its
//              forward in backward, and so does the forward boxing of every activation edge
//              inside the block (time in comm_bwd, bytes counted again). While a block is
//              recomputed its activations live: each block op's kept bytes are priced divided by
//              the number of blocks (one block's worth when the blocks are alike).
//   otherwise  an output recomputed for its readers (output_recomputed_for_readers: the SwiGLU
//              product) is not kept for a backward of its block reading it in place over an
//              edge that does not box; that edge prices the producer's forward again (compute_bwd).
// Memory by purpose: memory_of(pick) (params, grads, optimizer, activations, transient).
#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "autoddl/cost/step_time.hpp"
#include "autoddl/error.hpp"
#include "autoddl/index.hpp"
#include "autoddl/models/graph.hpp"
#include "autoddl/search/detail/plan_pricing.hpp"
#include "autoddl/search/plan_options.hpp"
#include "autoddl/search/problem.hpp"

namespace autoddl {

/// The layout-choice problem of one model on one mesh, and everything needed to read a pick: the
/// candidates and their prices (detail::plan_candidates, detail::plan_pricing), built into the
/// tied and the untied choice_problem the searches solve.
class plan_problem : public detail::plan_pricing {
 public:
  plan_problem(const plan_problem&) = delete;  // the pair-cost function refers to this object
  plan_problem& operator=(const plan_problem&) = delete;
  plan_problem(graph model, const plan_options& options) : plan_pricing(std::move(model), options) {
    validate(*model_);
    if (options.microbatches < 1)
      detail::fail<error>("plan_options::microbatches must be at least 1, got " + detail::itos(options.microbatches));
    build();
  }

  const choice_problem& tied() const { return tied_; }
  const choice_problem& untied() const { return untied_; }

  /// The overlap rule this problem is priced under.
  overlap_rule overlap() const { return options_.overlap.value_or(options_.hw.overlap); }

  objective make_objective() const {
    const overlap_rule r = overlap();
    const int m = options_.microbatches;
    return objective{[r, m](const cost_terms& t) { return step_time(t, r, m); }, memory_limit_of(options_),
                     /*monotone=*/true};
  }
  /// The additive objective of the exact references (nothing overlapped), same memory limit.
  objective serial_objective() const {
    objective ob = make_objective();
    ob.time = [](const cost_terms& t) { return t.serial_time(); };
    return ob;
  }

  /// A tied pick (per group of tied()) as a per-node pick.
  std::vector<int> untie(const std::vector<int>& tied_pick) const {
    std::vector<int> r(std::size_t(tied_.nodes()));
    for (int n = 0; n < tied_.nodes(); ++n) at(r, n) = at(tied_pick, tied_.group_of(n));
    return r;
  }

  /// The forward and backward boxing paths of edge e under picks cu, cv (plan_pricing's),
  /// memoised by the edge's class and the picks' ports, as the pair costs are (edges of one class
  /// box the same tensor between the layouts their ports name): the memory replay reads every
  /// edge of a plan once per setting and pipeline stage, and repeated blocks ask alike. The
  /// reference stays valid while the problem lives (a replay may keep it instead of a copy).
  const std::pair<boxing_path, boxing_path>& edge_paths(int e, int cu, int cv) const {
    detail::check_planning_allowed("find an edge's boxing paths");
    const choice_edge& ed = at(untied_.edges(), e);
    const std::uint64_t pu = std::uint64_t(untied_.port(e, 0, cu)), pv = std::uint64_t(untied_.port(e, 1, cv));
    constexpr std::uint64_t bits = 21, below = std::uint64_t(1) << bits;
    if (pu >= below || pv >= below || std::uint64_t(ed.cls) >= below) {  // beyond the packed key: by edge and picks
      auto [it, fresh] = unpacked_paths_memo_.try_emplace({e, cu, cv});
      if (fresh) it->second = plan_pricing::edge_paths(e, cu, cv);
      return it->second;
    }
    auto [it, fresh] = paths_memo_.try_emplace((std::uint64_t(ed.cls) << (2 * bits)) | (pu << bits) | pv);
    if (fresh) it->second = plan_pricing::edge_paths(e, cu, cv);
    return it->second;
  }

  /// Per-device memory of a plan by purpose; total() == evaluate(pick).peak_memory().
  memory_breakdown memory_of(const std::vector<int>& pick) const {
    memory_breakdown m;
    const int nops = int(model_->ops.size());
    for (int i = 0; i < nops; ++i) {
      const int c = at(pick, i);
      m += op_memory(i, c, device_work(at(model_->ops, i), op_candidate(i, c), options_.mesh, element_bytes_));
    }
    for (int p = 0; p < int(model_->params.size()); ++p) {
      m += param_memory(p, at(pick, param_node(p)));
      m.transient = std::max<std::int64_t>(m.transient, std::int64_t(param_terms(p, at(pick, param_node(p))).transient));
    }
    const auto& edges = untied_.edges();
    for (std::size_t e = 0; e < edges.size(); ++e) {
      const int cu = at(pick, edges[e].u), cv = at(pick, edges[e].v);
      m += edge_memory(int(e), cu, cv);
      m.transient = std::max<std::int64_t>(m.transient, std::int64_t(edge_terms(int(e), cu, cv).transient));
    }
    return m;
  }

 private:
  void build();
  // Whether op_terms(a, c) == op_terms(b, c) for every candidate c: the same node and candidates,
  // and alike in everything else op_terms reads (which inputs are the model's, how many
  // backwards read each input and output, recomputation, outputs read by other blocks). The
  // ops of identical repeated blocks are: a 96-layer GPT prices one layer's ops.
  bool ops_priced_alike(int a, int b) const {
    if (!same_node(a, b) || at(op_sig_index_, a) != at(op_sig_index_, b) || recomputed(a) != recomputed(b) ||
        at(readers_, a) != at(readers_, b) || at(read_by_other_block_, a) != at(read_by_other_block_, b))
      return false;
    const auto &ia = at(model_->op_inputs, a), &ib = at(model_->op_inputs, b);
    if (ia.size() != ib.size()) return false;
    for (std::size_t j = 0; j < ia.size(); ++j) {
      const tensor_ref ra = at(ia, j), rb = at(ib, j);
      if ((ra.op < 0) != (rb.op < 0)) return false;
      if (ra.op >= 0 && at(at(readers_, ra.op), ra.index) != at(at(readers_, rb.op), rb.index)) return false;
    }
    return true;
  }
  // Whether param_terms(a, c) == param_terms(b, c) for every c: same shape, same candidates,
  // both with one use or both with several.
  bool params_priced_alike(int a, int b) const {
    return at(model_->params, a).shape == at(model_->params, b).shape && (at(uses_, a) > 1) == (at(uses_, b) > 1) &&
           at(param_sigs_, a) == at(param_sigs_, b);
  }
  int op_key(int i) const;
  // Whether consumer i of op p's output takes it from the output's first consumer f instead: all
  // three in one repeated block (one pipeline unit, rerun together under full recomputation),
  // and i another op than f (an op reading one tensor twice boxes each slot).
  bool chains(int p, int f, int i) const {
    const int blk = at(model_->block, p);
    return blk >= 0 && at(model_->block, f) == blk && at(model_->block, i) == blk && f != i;
  }
  std::vector<std::vector<std::pair<int, int>>> chained_slots() const;
  std::vector<int> param_tie_keys() const;
  void add_nodes(choice_problem& cp, const std::vector<int>* param_key);
  void add_edges(const std::vector<int>& param_key);

  /// the distinct candidate terms (add_nodes): nodes priced alike and both problems share them
  std::deque<std::vector<cost_terms>> unary_;  ///< a deque: its elements never move (the problems point at them)
  std::vector<int> unary_of_;                  ///< per node: its terms in unary_
  choice_problem tied_, untied_;
  mutable std::unordered_map<std::uint64_t, std::pair<boxing_path, boxing_path>> paths_memo_;  ///< edge_paths
  mutable std::map<std::tuple<int, int, int>, std::pair<boxing_path, boxing_path>> unpacked_paths_memo_;
};

// The problem's nodes, edges, pair costs and bounds, from the candidates.
inline void plan_problem::build() {
  find_readers();
  build_op_candidates();
  build_param_candidates();
  const std::vector<int> param_key = param_tie_keys();
  for (int tied = 1; tied >= 0; --tied) add_nodes(tied ? tied_ : untied_, tied ? &param_key : nullptr);
  add_edges(param_key);
  auto pair = [this](int e, int cu, int cv) { return edge_terms(e, cu, cv); };
  tied_.set_pair_cost(pair);
  untied_.set_pair_cost(pair);
  {
    const auto lock = book_->lock();
    for (int sh : edge_shape_) {
      if (std::ssize(box_bounds_) <= sh) resize(box_bounds_, sh + 1);
      if (at(box_bounds_, sh).axes == 0) at(box_bounds_, sh) = make_boxing_lower_bound(book_->graph_locked(sh));
    }
  }
  auto bound = [this](int e, int cu, int cv) { return edge_lower_bound(e, cu, cv); };
  tied_.set_pair_lower_bound(bound);
  untied_.set_pair_lower_bound(bound);
  tied_.finalize();
  untied_.finalize();
  untied_.share_pair_memo(tied_);  // same edges, classes and ports: price each pair once
}

// Tie keys: an op of a repeated block by its position in the block (op_key); a parameter by its
// first user's position and slot, or -1 (its own decision) when users sit at several positions.
inline int plan_problem::op_key(int i) const { return at(model_->block, i) >= 0 ? at(model_->block_pos, i) : -1; }

inline std::vector<int> plan_problem::param_tie_keys() const {
  std::vector<int> key(model_->params.size(), -1);
  std::vector<char> seen(model_->params.size(), 0);
  for (int i = 0; i < int(model_->ops.size()); ++i)
    for (std::size_t j = 0; j < at(model_->ops, i).param_ids.size(); ++j) {
      const int p = at(model_->ops, i).param_ids[j];
      if (at(seen, p)) {
        at(key, p) = -1;  // shared across positions (tied weights): its own decision
        continue;
      }
      at(seen, p) = 1;
      if (op_key(i) >= 0) at(key, p) = 1'000'000 + op_key(i) * 64 + int(j);
    }
  return key;
}

// One node per op and per parameter, with its candidates' own terms; tied by key when param_key
// is given (the tied problem), each its own group otherwise.
inline void plan_problem::add_nodes(choice_problem& cp, const std::vector<int>* param_key) {
  if (unary_.empty()) {  // priced once, for both problems; a node priced like an earlier one shares its terms
    std::vector<int> priced;  // nodes priced so far, each unlike the others
    auto alike = [&](int n) {
      return std::find_if(priced.begin(), priced.end(), [&](int m) { return n < nops() ? ops_priced_alike(m, n) : m >= nops() && params_priced_alike(m - nops(), n - nops()); });
    };
    for (int n = 0; n < nops() + int(model_->params.size()); ++n) {
      if (const auto f = alike(n); f != priced.end()) {
        unary_of_.push_back(at(unary_of_, *f));
        continue;
      }
      priced.push_back(n);
      std::vector<cost_terms> u;
      if (n < nops())
        for (int c = 0; c < int(op_candidates(n).size()); ++c) u.push_back(op_terms(n, c));
      else
        for (int c = 0; c < int(at(param_sigs_, n - nops()).size()); ++c) u.push_back(param_terms(n - nops(), c));
      unary_of_.push_back(int(unary_.size()));
      unary_.push_back(std::move(u));
    }
  }
  for (int i = 0; i < int(model_->ops.size()); ++i) cp.add_node(&at(unary_, at(unary_of_, i)), param_key ? op_key(i) : -1);
  for (int p = 0; p < int(model_->params.size()); ++p)
    cp.add_node(&at(unary_, at(unary_of_, param_node(p))), param_key ? at(*param_key, p) : -1);
}

// Per op input slot: the (op, input slot) of the output's first reader that it chains from, or
// (-1, -1) where it boxes from the producer (chains).
inline std::vector<std::vector<std::pair<int, int>>> plan_problem::chained_slots() const {
  std::map<std::pair<int, int>, std::pair<int, int>> first_reader;  // (producer, output) -> (op, input slot)
  std::vector<std::vector<std::pair<int, int>>> from(model_->ops.size());
  for (int i = 0; i < nops(); ++i)
    for (std::size_t j = 0; j < at(model_->op_inputs, i).size(); ++j) {
      const tensor_ref r = at(model_->op_inputs, i)[j];
      at(from, i).emplace_back(-1, -1);
      if (r.op < 0) continue;
      const auto [first, fresh] = first_reader.try_emplace({r.op, r.index}, i, int(j));
      if (!fresh && chains(r.op, first->second.first, i)) at(from, i).back() = first->second;
    }
  return from;
}

// Activation edges (producer -> consumer) and parameter edges (parameter -> user), with edge
// classes shared by corresponding edges of identical blocks (their pair costs are equal).
inline void plan_problem::add_edges(const std::vector<int>& param_key) {
  std::map<std::tuple<int, int, int, int, int, int>, int> classes;
  int next_class = 0;
  auto cls = [&](std::tuple<int, int, int, int, int, int> key, bool shareable) {
    if (!shareable) return next_class++;
    auto [it, fresh] = classes.try_emplace(key, next_class);
    if (fresh) ++next_class;
    return it->second;
  };
  // Ports: an activation edge's price depends on the producer's output layout and the
  // consumer's input layout only, a parameter edge's on the parameter's candidate and the user's
  // compute layout; signatures that agree there share one price (edge_terms). One map per
  // (op, role, tensor index), registered in both problems under the same id.
  std::map<std::tuple<int, int, int>, int> port_ids;
  auto ports = [&](int op, int role, int index) {  // role 0: output, 1: input, 2: parameter
    op = at(candidates_like_, op);  // ops with the same candidates share their maps
    auto [it, fresh] = port_ids.try_emplace({op, role, index}, 0);
    if (!fresh) return it->second;
    std::vector<nd_sbp> seen;
    std::vector<int> port_of;
    for (const signature& sig : op_candidates(op)) {
      const nd_sbp& l = at(role == 0 ? sig.outputs : role == 1 ? sig.inputs : sig.params, index);
      const auto f = std::find(seen.begin(), seen.end(), l);
      port_of.push_back(int(f - seen.begin()));
      if (f == seen.end()) seen.push_back(l);
    }
    it->second = tied_.add_ports(port_of);
    if (untied_.add_ports(std::move(port_of)) != it->second) detail::fail("port maps out of step");
    return it->second;
  };
  auto add = [&](edge_info ei, int c, int u_ports) {
    edges_.push_back(ei);
    const auto lock = book_->lock();
    edge_shape_.push_back(book_->shape_id_locked(ei.param ? at(model_->params, ei.from_node - int(model_->ops.size())).shape
                                                          : at(at(model_->ops, ei.producer).outputs, ei.producer_output)));
    const int v_ports = ports(ei.to_node, ei.param ? 2 : 1, ei.tensor_index);
    tied_.add_edge(ei.from_node, ei.to_node, c, u_ports, v_ports);
    untied_.add_edge(ei.from_node, ei.to_node, c, u_ports, v_ports);
  };
  const std::vector<std::vector<std::pair<int, int>>> chained = chained_slots();
  for (int i = 0; i < int(model_->ops.size()); ++i) {
    for (std::size_t j = 0; j < at(model_->op_inputs, i).size(); ++j) {
      const tensor_ref r = at(model_->op_inputs, i)[j];
      if (r.op < 0) continue;  // model inputs are loaded in whatever layout the consumer takes
      if (const auto [f, jf] = at(chained, i)[j]; f >= 0) {  // boxed from the first reader's input (box once for all)
        add({f, i, false, int(j), r.index, r.op, jf}, cls({2, op_key(f), op_key(i), int(j), jf, r.index}, true), ports(f, 1, jf));
        continue;
      }
      const bool share = op_key(r.op) >= 0 && op_key(i) >= 0;
      add({r.op, i, false, int(j), r.index, r.op},
          cls({0, op_key(r.op), op_key(i), int(j), r.index, at(model_->block, i) - at(model_->block, r.op)}, share),
          ports(r.op, 0, r.index));
    }
    for (std::size_t j = 0; j < at(model_->ops, i).param_ids.size(); ++j) {
      const int p = at(model_->ops, i).param_ids[j];
      add({param_node(p), i, true, int(j), 0}, cls({1, at(param_key, p), op_key(i), int(j), 0, 0}, at(param_key, p) >= 0 && op_key(i) >= 0), -1);
    }
  }
}

}  // namespace autoddl
