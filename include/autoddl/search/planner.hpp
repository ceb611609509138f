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
// (dual(consumer layout) -> dual(producer layout); DESIGN.md: B and P are dual, S stays S); a
// parameter edge costs gathering storage -> compute layout in forward (the gathered copy is kept
// for backward) and boxing the gradient dual(compute) -> storage (comm_grad, which may overlap
// backward compute). Every boxing is cost/'s cheapest alpha-beta path: the one the executor runs.
// Ops of identical repeated blocks (graph::block_pos) are tied into one decision for the descent.
//
// A step of m micro-batches (plan_options::microbatches; the graph is one micro-batch) is priced
// as the trainer runs it: every op and activation edge m times (time and bytes); parameters
// gathered once per step and kept, their gradient contributions accumulated over the
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
// Memory by purpose: memory_of(pick) (params, grads, optimizer, activations, transient).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "autoddl/cost/boxing_book.hpp"
#include "autoddl/cost/boxing_copies.hpp"
#include "autoddl/sbp/boxing.hpp"
#include "autoddl/cost/collective_cost.hpp"
#include "autoddl/cost/compute.hpp"
#include "autoddl/cost/dtype.hpp"
#include "autoddl/cost/hardware.hpp"
#include "autoddl/cost/memory.hpp"
#include "autoddl/cost/step_time.hpp"
#include "autoddl/error.hpp"
#include "autoddl/index.hpp"
#include "autoddl/mesh/device_mesh.hpp"
#include "autoddl/models/graph.hpp"
#include "autoddl/ops/kernel_key.hpp"
#include "autoddl/ops/signatures.hpp"
#include "autoddl/ops/work.hpp"
#include "autoddl/search/kernel_prices.hpp"
#include "autoddl/search/problem.hpp"

namespace autoddl {

/// A parameter's stored layout, the layout its gradient contributions are summed in before they
/// are synchronised (== update for a parameter with one use: nothing to sum), and the layout of
/// its optimizer state, which the synchronised gradient takes and the optimizer updates (==
/// storage, or under ZeRO stages 1 and 2 storage with its B axes split, zero_shard: the device
/// updates its slice of the stored parameter, then the slices are all-gathered to storage).
/// Example: GPT's wte under data parallelism on mesh 8: storage [B], summed in [P], updated in
/// [B], so the embedding's and the LM head's gradients (both [P]) add locally and one
/// all-reduce follows. ZeRO-2 of a linear weight on mesh 8: storage [B], summed and updated in
/// [S(0)]: each gradient is reduce-scattered as backward makes it.
struct param_choice {
  nd_sbp storage;
  nd_sbp grad_sum;
  nd_sbp update;
  friend constexpr bool operator==(const param_choice&, const param_choice&) = default;
};

/// `st` with each B axis split on the first dim that divides evenly in one step (ZeRO's
/// partitioning over the data-parallel devices); axes that cannot split, or have one device,
/// stay B. zero_shard([B, S(1)], [64, 32], 2x2) == [S(0), S(1)].
inline nd_sbp zero_shard(nd_sbp st, const tensor_shape& shape, const mesh_shape& mesh) {
  for (int a = 0; a < st.size(); ++a) {
    if (!st[a].is_broadcast() || mesh[a] == 1) continue;
    for (int d = 0; d < shape.rank(); ++d) {
      nd_sbp t = st.with(a, S(d));
      if (divides(shape, layout{t, mesh}) && single_axis_step_exact(st, a, S(d))) {
        st = t;
        break;
      }
    }
  }
  return st;
}

/// The layout one synchronisation away from `storage`: P on its B axes (all-reduce to B), the
/// storage's split on its S axes (nothing left to do there). reduce_layout([B,S(0)]) == [P,S(0)].
constexpr nd_sbp reduce_layout(const nd_sbp& storage) {
  nd_sbp r = storage;
  for (int a = 0; a < r.size(); ++a)
    if (r[a].is_broadcast()) r[a] = P;
  return r;
}

struct plan_options {
  hardware hw;
  mesh_shape mesh;
  dtype type = dtype::fp32;
  optimizer opt = optimizer::adam;
  double memory_limit = 0;  ///< bytes per device; 0: the device's memory less a reserve (memory_limit_of)
  /// What the step-time model overlaps; unset: what the hardware's executor overlaps (hw.overlap).
  std::optional<overlap_rule> overlap{};
  /// Optional per-op allow-list: allowed[i] holds the indices into signatures(op i, mesh) the
  /// search may pick for op i (a pinned typed layer lists one). A missing or empty entry allows
  /// every signature. Example: allowed = {{}, {3}} pins op 1 to its signature 3.
  std::vector<std::vector<int>> allowed{};
  /// Micro-batches per step (gradient accumulation). The problem's graph is ONE micro-batch (its
  /// batch is the step's batch / microbatches, build_model(spec, microbatches)): ops and
  /// activation edges run once per micro-batch, parameters are gathered once per step and their
  /// gradients accumulated over the micro-batches and synchronised once.
  int microbatches = 1;
  /// What the repeated blocks recompute in backward (cost/memory.hpp).
  recompute_mode recompute = recompute_mode::none;
  /// Also offer ZeRO-2's parameter layouts (optimizer state and gradient in the storage's
  /// slices; param_choice::update) and ZeRO-1's (each gradient summed whole, then
  /// reduce-scattered once). Off unless a plan asks for them (strategy zero:stage=2 sets the
  /// first, zero:stage=1 both): with them the coordinate descent met worse local optima (the
  /// 2-layer GPT on 2x2x2: 15 % slower, 6.8 % above the exact optimum, against 0.02 % without).
  bool zero2_layouts = false;
  bool zero1_layouts = false;
};

/// The share of a device's memory a plan leaves free unless plan_options::memory_limit says
/// otherwise: a tenth. The plan's peak is the sum of the buffers live at once
/// (search/step_memory.hpp); the device needs more than that. A caching allocator (PyTorch's CUDA
/// caching allocator, the stream-ordered pool of backend/cuda) rounds requests up (512 B, and
/// large ones to 2 MiB) and splits cached segments, so a freed block of one size may not serve a
/// larger request and what it reserves runs above what it hands out; the CUDA context, cuBLAS
/// workspaces and NCCL's buffers live outside it; and what a kernel or a boxing path allocates
/// inside itself is not in the replayed peak. A plan that fills memory to the last megabyte runs
/// out on the device. autoddl-plan and autoddl-train print the limit with the reserve;
/// --memory-limit sets the limit itself.
inline constexpr double memory_reserve_fraction = 0.10;

/// The bytes per device a plan of o is held to: o.memory_limit where set, else the device's
/// memory less memory_reserve_fraction of it. A 80 GiB device: 72 GiB.
inline double memory_limit_of(const plan_options& o) {
  return o.memory_limit > 0 ? o.memory_limit : o.hw.device.memory_bytes * (1 - memory_reserve_fraction);
}

/// The layout-choice problem of one model on one mesh, and everything needed to read a pick.
class plan_problem {
 public:
  plan_problem(const plan_problem&) = delete;  // the pair-cost function refers to this object
  plan_problem& operator=(const plan_problem&) = delete;
  plan_problem(graph g, const plan_options& o)
      : g_(std::move(g)), o_(o), dmesh_(make_device_mesh(o.mesh, o.hw)), elem_(bytes_of(o.type)), prices_(o.hw.measured, o.type),
        book_(&boxing_book_for(dmesh_, o.hw.measured.copy, elem_)) {
    validate(g_);
    if (o.microbatches < 1)
      detail::fail<error>("plan_options::microbatches must be at least 1, got " + detail::itos(o.microbatches));
    build();
  }

  const graph& model() const { return g_; }
  const plan_options& options() const { return o_; }
  const device_mesh& mesh() const { return dmesh_; }
  const choice_problem& tied() const { return tied_; }
  const choice_problem& untied() const { return untied_; }
  int param_node(int p) const { return int(g_.ops.size()) + p; }
  const std::vector<signature>& op_candidates(int op) const { return at(sig_lists_, at(op_sig_list_, op)); }
  /// Op `op`'s candidate c.
  const signature& op_candidate(int op, int c) const { return at(op_candidates(op), c); }
  /// The index into signatures(op, mesh) of op's candidate c (c itself without an allow-list).
  int signature_index(int op, int c) const { return at(at(op_sig_index_, op), c); }
  const std::vector<param_choice>& param_candidates(int p) const { return at(param_sigs_, p); }
  /// Parameter p's candidate c (storage and gradient-summing layouts).
  const param_choice& param_candidate(int p, int c) const { return at(at(param_sigs_, p), c); }
  /// Whether parameter p has several uses (its gradient contributions are summed, then synced).
  bool tied_param(int p) const { return at(uses_, p) > 1; }

  /// The overlap rule this problem is priced under.
  overlap_rule overlap() const { return o_.overlap.value_or(o_.hw.overlap); }

  objective make_objective() const {
    const overlap_rule r = overlap();
    const int m = o_.microbatches;
    return objective{[r, m](const cost_terms& t) {
                       return step_time(step_terms{t.compute_fwd, t.compute_bwd, t.comm_fwd, t.comm_bwd, t.comm_grad}, r, m);
                     },
                     memory_limit_of(o_), /*monotone=*/true};
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

  /// The boxing path of activation edge e (as added, in untied() order) for a pick, forward.
  struct edge_info {
    int from_node, to_node;
    bool param;          ///< a parameter edge (storage <-> compute) rather than an activation edge
    int tensor_index;    ///< consumer input index, or parameter index within the op
    int producer_output; ///< activation edges: which output of the producer
  };
  const std::vector<edge_info>& edge_infos() const { return edges_; }

  /// Parameter p's gradient synchronisation under its candidate c: the summed contributions of its
  /// uses boxed from the summing layout to storage (empty for a parameter with one use).
  boxing_path param_sync_path(int p, int c) const {
    const param_choice& pc = param_candidate(p, c);
    return box(pc.grad_sum, pc.update, at(g_.params, p).shape);
  }
  /// Parameter p's updated slices gathered back to storage after the optimizer (ZeRO stages 1
  /// and 2; empty where the update layout is the storage).
  boxing_path param_gather_path(int p, int c) const {
    const param_choice& pc = param_candidate(p, c);
    return box(pc.update, pc.storage, at(g_.params, p).shape);
  }

  /// The forward and backward boxing paths of edge e under picks cu, cv: for a parameter edge,
  /// storage -> compute layout, and the gradient dual(compute) -> the summing layout.
  std::pair<boxing_path, boxing_path> edge_paths(int e, int cu, int cv) const {
    return edge_boxings<boxing_path>(e, cu, cv, [this](const nd_sbp& from, const nd_sbp& to, int shape) {
      return book_->box_locked(from, to, shape);
    });
  }

  /// The priced path from -> to for a tensor of shape s (boxing_cost on this problem's mesh).
  /// Memoised by shortest-path tree: the search asks for every target of the same source and
  /// shape across repeated layers and candidate pairs, and one search answers them all. The
  /// trees are the process's for this mesh, its links, copy rate and dtype (boxing_book_for),
  /// shared with the other problems of that context.
  boxing_path box(const nd_sbp& from, const nd_sbp& to, const tensor_shape& s) const {
    const auto lock = book_->lock();
    return book_->box_locked(from, to, book_->shape_id_locked(s));
  }
  /// Shortest-path trees held now for this problem's context (one per source, target P axes and
  /// shape; boxing_book_for).
  std::size_t boxing_trees() const {
    const auto lock = book_->lock();
    return book_->trees_locked();
  }
  /// The terms of op `op` alone under candidate c (compute, activations, statistic all-reduces).
  /// Compute is the profile's measured kernel time where its table has this kernel, the
  /// per-op-kind fit of the table where it has that kind, else the analytical formula
  /// (search/kernel_prices.hpp); kernel_price_of says which.
  cost_terms op_terms(int op, int c) const {
    const op_work w = device_work(at(g_.ops, op), op_candidate(op, c), o_.mesh, elem_);
    cost_terms t;
    if (const kernel_price k = kernel_price_of(op, c, w); k.source != price_source::analytical) {
      t.compute_fwd = k.forward_s;
      t.compute_bwd = k.backward_s;
    } else if (w.kind == work_kind::elementwise) {
      t.compute_fwd = elementwise_time(w.fwd_flops, double(w.fwd_bytes_moved), o_.type, o_.hw.device);
      t.compute_bwd = elementwise_time(w.bwd_flops, 2.0 * double(w.fwd_bytes_moved), o_.type, o_.hw.device);
    } else {
      t.compute_fwd = compute_time(w.fwd_flops, w.kind, o_.type, o_.hw.device);
      t.compute_bwd = compute_time(w.bwd_flops, w.kind, o_.type, o_.hw.device);
    }
    for (const auto& s : w.stat_all_reduces) {  // the trainer pads and copies each (trainer.hpp, wire_statistics)
      boxing_step st{s.axis, P, B, collective::all_reduce, o_.mesh[s.axis], s.bytes, elem_};
      t.comm_fwd += step_time(st, dmesh_) + 2 * o_.hw.measured.copy.time(double(executed_group_bytes(st)));
      t.bytes += double(st.bytes_per_device());
    }
    if (recomputed(op)) {  // the forward again, during backward
      t.compute_bwd += t.compute_fwd;
      t.comm_bwd += t.comm_fwd;
      t.bytes *= 2;
    }
    scale_per_micro_batch(t);
    const memory_breakdown m = op_memory(op, c, w);
    t.memory = double(m.total() - m.transient);
    t.transient = double(m.transient);
    return t;
  }

  /// Whether op `op` reruns its forward in backward under the plan's recomputation.
  bool recomputed(int op) const {
    if (at(g_.block, op) < 0) return false;
    if (o_.recompute == recompute_mode::full) return true;
    return o_.recompute == recompute_mode::selective && at(g_.ops, op).kind == op_kind::attention;
  }

  /// Bytes op `op` keeps under candidate c (activations): what its backward reads, less what
  /// recomputation drops, plus its outputs that a recomputed block reads from outside; and what
  /// its backward holds for a moment (transient): its output's gradient beside the gradients it
  /// makes for its inputs and parameters (the logits' gradient of a language model's head is
  /// the largest buffer of many plans).
  memory_breakdown op_memory(int op, int c, const op_work& w) const {
    memory_breakdown m;
    const op_node& n = at(g_.ops, op);
    const signature& sig = op_candidate(op, c);
    auto bytes = [&](const tensor_shape& t, const nd_sbp& l) {
      return double(local_shape(t, layout{l, o_.mesh}).elements()) * elem_;
    };
    double backward_set = bytes(n.outputs[0], sig.outputs[0]);
    for (std::size_t j = 0; j < n.inputs.size(); ++j)
      if (at(g_.op_inputs, op)[j].op >= 0) backward_set += bytes(n.inputs[j], sig.inputs[j]);
    for (std::size_t j = 0; j < n.params.size(); ++j) backward_set += bytes(n.params[j], sig.params[j]);
    m.transient = std::int64_t(backward_set);
    auto input_readers = [&](std::size_t j) {  // backwards reading input j's buffer (1: a model input)
      const tensor_ref r = at(at(g_.op_inputs, op), j);
      return r.op < 0 ? 1 : at(at(readers_, r.op), r.index);
    };
    // a buffer several backwards read (the layernorm output read in place by q, k and v; relu's
    // output read by relu and the next linear) is one buffer: each reader pays its share
    double kept = double(w.activation_bytes);
    const backward_reads reads = backward_reads_of(n.kind);
    for (std::size_t j = 0; j < n.inputs.size(); ++j)
      if (reads.input(j)) kept -= (1 - 1.0 / input_readers(j)) * bytes(n.inputs[j], sig.inputs[j]);
    if (reads.output) kept -= (1 - 1.0 / at(at(readers_, op), 0)) * bytes(n.outputs[0], sig.outputs[0]);
    if (recomputed(op) && o_.recompute == recompute_mode::selective) {  // the core's inputs only
      kept = 0;
      for (std::size_t j = 0; j < n.inputs.size(); ++j) kept += bytes(n.inputs[j], sig.inputs[j]) / input_readers(j);
    } else if (recomputed(op)) {
      kept /= double(blocks_);
    }
    if (o_.recompute == recompute_mode::full)
      for (int k = 0; k < int(n.outputs.size()); ++k)
        if (at(at(read_by_other_block_, op), k)) kept += bytes(at(n.outputs, k), at(sig.outputs, k));
    m.activations = std::int64_t(kept);
    return m;
  }

  /// Per-device memory of a plan by purpose; total() == evaluate(pick).peak_memory().
  memory_breakdown memory_of(const std::vector<int>& pick) const {
    memory_breakdown m;
    const int nops = int(g_.ops.size());
    for (int i = 0; i < nops; ++i) {
      const int c = at(pick, i);
      m += op_memory(i, c, device_work(at(g_.ops, i), op_candidate(i, c), o_.mesh, elem_));
    }
    for (int p = 0; p < int(g_.params.size()); ++p) {
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

  /// The measured or fitted price of op `op`'s kernel under candidate c, or source analytical.
  kernel_price kernel_price_of(int op, int c, const op_work& w) const {
    if (prices_.empty()) return {};
    const op_node& n = at(g_.ops, op);
    std::vector<bool> input_grads;  // the trainer skips the gradients of the model's own inputs
    for (const tensor_ref& r : at(g_.op_inputs, op)) input_grads.push_back(r.op >= 0);
    const std::string key = kernel_key(n, op_candidate(op, c), o_.mesh, input_grads);
    return prices_.price(std::string(to_string(n.kind)), key, w);
  }

  /// How many op candidates were priced from measurements, from the per-kind fit, analytically.
  kernel_price_counts kernel_price_counts_of() const {
    kernel_price_counts k;
    if (prices_.empty()) {  // kernel_price_of's answer for every candidate, without its work
      for (int i = 0; i < int(g_.ops.size()); ++i) k.analytical += int(op_candidates(i).size());
      return k;
    }
    for (int i = 0; i < int(g_.ops.size()); ++i)
      for (int c = 0; c < int(op_candidates(i).size()); ++c) {
        const op_work w = device_work(at(g_.ops, i), op_candidate(i, c), o_.mesh, elem_);
        const price_source s = kernel_price_of(i, c, w).source;
        ++(s == price_source::measured ? k.measured : s == price_source::fitted ? k.fitted : k.analytical);
      }
    return k;
  }

  /// Storage terms of parameter p under candidate c: params, grads and optimizer state, and for a
  /// tied parameter the one synchronisation of its summed gradient.
  cost_terms param_terms(int p, int c) const {
    const param_choice& pc = param_candidate(p, c);
    const tensor_shape& shape = at(g_.params, p).shape;
    const double elems = double(local_shape(shape, layout{pc.update, o_.mesh}).elements());
    cost_terms t;
    t.memory = double(param_memory(p, c).total());
    const boxing_path sync = param_sync_path(p, c);
    t.comm_grad = sync.cost + path_copy_time(sync, o_.hw.measured.copy);
    t.compute_bwd = optimizer_time(elems);
    t.bytes = double(sync.bytes_per_device());
    t.transient = path_buffer(sync);
    if (!(pc.grad_sum == pc.update))  // the sum's buffer, held from the last use to the sync
      t.transient = std::max(t.transient, double(local_shape(shape, layout{pc.grad_sum, o_.mesh}).elements()) * elem_);
    const boxing_path gather = param_gather_path(p, c);
    if (gather.size() > 0) {  // after the optimizer, before the next forward: nothing hides it
      t.comm_fwd = gather.cost + path_copy_time(gather, o_.hw.measured.copy);
      t.bytes += double(gather.bytes_per_device());
      t.transient = std::max({t.transient, path_buffer(gather), elems * elem_});  // the updated slice
    }
    return t;
  }

  /// Parameter p's stored shard, its gradient and its optimizer state under candidate c.
  /// ZeRO (Rajbhandari et al. 2020, section 5.1) per device for Psi parameters on N_d devices
  /// with K bytes of optimizer state per element: stage 1 (2 + 2) Psi + K Psi / N_d, stage 2
  /// 2 Psi + (2 + K) Psi / N_d, stage 3 (2 + 2 + K) Psi / N_d (2-byte parameters and gradients).
  /// A gradient summed whole before one reduce-scatter (stage 1) is held whole through backward.
  memory_breakdown param_memory(int p, int c) const {
    const param_choice& pc = param_candidate(p, c);
    const tensor_shape& shape = at(g_.params, p).shape;
    auto elems = [&](const nd_sbp& l) { return local_shape(shape, layout{l, o_.mesh}).elements(); };
    memory_breakdown m;
    m.params = elems(pc.storage) * elem_;
    m.grads = std::max(elems(pc.update), at(uses_, p) > 1 ? 0 : elems(pc.grad_sum)) * elem_;
    m.optimizer = optimizer_state_bytes(o_.opt, elems(pc.update), o_.type);
    return m;
  }

  /// Seconds of the optimizer update of a storage shard of `elems` elements (trainer.hpp,
  /// optimizer_update): the profile's measured rate for the plan's optimizer, else element-wise
  /// memory traffic (roofline, cost/compute.hpp): SGD-momentum reads g, v, p and writes v, p (5
  /// elements), Adam reads g, m, v, p and writes m, v, p (7).
  double optimizer_time(double elems) const {
    const optimizer_rate& r = o_.opt == optimizer::adam ? o_.hw.measured.adam : o_.hw.measured.sgd_momentum;
    if (r.measured()) return r.time(elems);
    const double touched = o_.opt == optimizer::adam ? 7 : 5;
    return memory_time(touched * elems * elem_, o_.hw.device);
  }

 private:
  cost_terms edge_terms(int e, int cu, int cv) const {
    const auto [fwd, bwd] = edge_summaries(e, cu, cv);
    cost_terms t = edge_time_terms(e, cu, fwd, bwd);
    t.memory = double(edge_memory(e, cu, cv, fwd.steps > 0, bwd.steps > 0).total());
    return t;
  }
  // edge_terms but memory, from the paths' summaries.
  cost_terms edge_time_terms(int e, int cu, const path_summary& fwd, const path_summary& bwd) const {
    const edge_info& ei = at(edges_, e);
    cost_terms t;
    // Copies beside the collectives (cost/boxing_copies.hpp), on the step's own comm term; the
    // forward boxing starts from a copy of the source shard (the trainer passes the producer's
    // output or the stored parameter by value), the backward one moves its gradient.
    const copy_rate& copy = o_.hw.measured.copy;
    t.comm_fwd = fwd.seconds + fwd.copy_seconds;
    if (fwd.steps > 0 && copy.measured()) t.comm_fwd += copy.time(source_bytes(e, cu));
    const double bwd_s = bwd.seconds + bwd.copy_seconds;
    if (ei.param) t.comm_grad = bwd_s;
    else t.comm_bwd = bwd_s;
    t.bytes = double(fwd.bytes + bwd.bytes);
    if (!ei.param) {
      if (recomputed_inside(e)) {  // the forward boxing reruns with the block's forward
        t.comm_bwd += t.comm_fwd;
        t.bytes += double(fwd.bytes);
      }
      scale_per_micro_batch(t);
    }
    // buffers: a path's largest intermediate is a transient; what edge_memory keeps lives on
    t.transient = std::max(fwd.buffer, bwd.buffer);
    return t;
  }

  // Whether activation edge e runs inside one block that recomputes its whole forward.
  bool recomputed_inside(int e) const {
    const edge_info& ei = at(edges_, e);
    return !ei.param && o_.recompute == recompute_mode::full && at(g_.block, ei.to_node) >= 0 &&
           at(g_.block, ei.from_node) == at(g_.block, ei.to_node);
  }


 public:
  /// What edge e keeps through the step: a gathered parameter (params) and, with micro-batches,
  /// its gradient accumulated in the compute layout, less the share of the stored gradient it
  /// turns into (grads); the boxed copy of a fully recomputed block's input (activations).
  /// (Public for the pipeline's per-stage memory, search/pipeline.hpp.)
  memory_breakdown edge_memory(int e, int cu, int cv) const {
    auto [fwd, bwd] = edge_paths(e, cu, cv);
    return edge_memory(e, cu, cv, fwd.size() > 0, bwd.size() > 0);
  }

 private:
  // edge_memory given whether the forward and the backward path box at all.
  memory_breakdown edge_memory(int e, int cu, int cv, bool fwd_boxes, bool bwd_boxes) const {
    const edge_info& ei = at(edges_, e);
    memory_breakdown m;
    if (ei.param) {
      const tensor_shape& s = at(g_.params, ei.from_node - int(g_.ops.size())).shape;
      const nd_sbp comp = at(op_candidate(ei.to_node, cv).params, ei.tensor_index);
      const std::int64_t bytes = local_shape(s, layout{comp, o_.mesh}).elements() * elem_;
      if (fwd_boxes) m.params = bytes;
      if (bwd_boxes && o_.microbatches > 1) {
        // the accumulator becomes the summed, then the stored gradient (moved, not copied): it
        // replaces this use's share of the storage gradient param_memory counts
        const int p = ei.from_node - int(g_.ops.size());
        const std::int64_t stored = param_memory(p, cu).grads / at(uses_, p);
        m.grads = bytes - std::min(bytes, stored);
      }
      return m;
    }
    const int consumer_block = at(g_.block, ei.to_node);
    if (o_.recompute == recompute_mode::full && consumer_block >= 0 && at(g_.block, ei.from_node) != consumer_block &&
        fwd_boxes) {
      const nd_sbp& in = at(op_candidate(ei.to_node, cv).inputs, ei.tensor_index);
      m.activations = local_shape(at(at(g_.ops, ei.from_node).outputs, ei.producer_output), layout{in, o_.mesh}).elements() * elem_;
    }
    return m;
  }

  // Time and bytes of something that runs once per micro-batch, for the whole step.
  void scale_per_micro_batch(cost_terms& t) const {
    const double m = double(o_.microbatches);
    t.compute_fwd *= m;
    t.compute_bwd *= m;
    t.comm_fwd *= m;
    t.comm_bwd *= m;
    t.comm_grad *= m;
    t.bytes *= m;
  }

  // Bytes of edge e's forward source shard on one device under the producer's pick cu.
  double source_bytes(int e, int cu) const {
    const edge_info& ei = at(edges_, e);
    if (ei.param) {
      const int p = ei.from_node - int(g_.ops.size());
      const nd_sbp& st = param_candidate(p, cu).storage;
      return double(local_shape(at(g_.params, p).shape, layout{st, o_.mesh}).elements()) * elem_;
    }
    const nd_sbp& out = at(op_candidate(ei.from_node, cu).outputs, ei.producer_output);
    const tensor_shape& s = at(at(g_.ops, ei.from_node).outputs, ei.producer_output);
    return double(local_shape(s, layout{out, o_.mesh}).elements()) * elem_;
  }

  // The forward and backward summaries of edge e under picks cu, cv (edge_paths' paths).
  std::pair<path_summary, path_summary> edge_summaries(int e, int cu, int cv) const {
    return edge_boxings<path_summary>(e, cu, cv, [this](const nd_sbp& from, const nd_sbp& to, int shape) {
      return book_->summary_locked(from, to, shape);
    });
  }
  // f(from, to, shape id) for edge e's forward and then backward boxing under picks cu, cv, under
  // the memo's lock: a parameter edge boxes storage -> compute layout and its gradient
  // dual(compute) -> the summing layout; an activation edge output -> input and dual(input) ->
  // dual(output).
  template <class R, class F>
  std::pair<R, R> edge_boxings(int e, int cu, int cv, F&& f) const {
    const edge_layout_pairs l = edge_layouts(e, cu, cv);
    const int shape = at(edge_shape_, e);
    const auto lock = book_->lock();
    R fwd = f(l.fwd_from, l.fwd_to, shape);
    return {std::move(fwd), f(l.bwd_from, l.bwd_to, shape)};
  }
  // What edge e boxes under picks cu, cv: a parameter edge storage -> compute layout and its
  // gradient dual(compute) -> the summing layout; an activation edge output -> input and
  // dual(input) -> dual(output).
  struct edge_layout_pairs {
    nd_sbp fwd_from, fwd_to, bwd_from, bwd_to;
  };
  edge_layout_pairs edge_layouts(int e, int cu, int cv) const {
    const edge_info& ei = at(edges_, e);
    if (ei.param) {
      const param_choice& store = param_candidate(ei.from_node - int(g_.ops.size()), cu);
      const nd_sbp& comp = at(op_candidate(ei.to_node, cv).params, ei.tensor_index);
      return {store.storage, comp, dual(comp), store.grad_sum};
    }
    const nd_sbp& out = at(op_candidate(ei.from_node, cu).outputs, ei.producer_output);
    const nd_sbp& in = at(op_candidate(ei.to_node, cv).inputs, ei.tensor_index);
    return {out, in, dual(in), dual(out)};
  }
  // Each term of edge_terms(e, cu, cv) or less, without a search: both paths' boxing_lower_bound
  // on the comm terms as edge_terms places them (less a relative 1e-9: the path's cost sums its
  // steps in another order), zero elsewhere (copies, bytes and memory are never negative).
  cost_terms edge_lower_bound(int e, int cu, int cv) const {
    const edge_info& ei = at(edges_, e);
    const boxing_lower_bound& lb = at(box_bounds_, at(edge_shape_, e));
    constexpr double slack = 1 - 1e-9;
    cost_terms t;
    if (ei.param) {  // the layouts of edge_layouts, read in place
      const param_choice& store = param_candidate(ei.from_node - int(g_.ops.size()), cu);
      const nd_sbp& comp = at(op_candidate(ei.to_node, cv).params, ei.tensor_index);
      t.comm_fwd = slack * lb(store.storage, comp);
      t.comm_grad = slack * lb.between(comp, true, store.grad_sum, false);
      return t;
    }
    const nd_sbp& out = at(op_candidate(ei.from_node, cu).outputs, ei.producer_output);
    const nd_sbp& in = at(op_candidate(ei.to_node, cv).inputs, ei.tensor_index);
    t.comm_fwd = slack * lb(out, in);
    t.comm_bwd = slack * lb.between(in, true, out, true);
    if (recomputed_inside(e)) t.comm_bwd += t.comm_fwd;
    scale_per_micro_batch(t);
    return t;
  }

  void build();
  void build_op_candidates();
  void build_param_candidates();
  int nops() const { return int(g_.ops.size()); }
  // Whether ops a and b are the same computation on the same shapes (names and parameter ids
  // aside): the same signatures on any mesh.
  bool same_node(int a, int b) const {
    const op_node &x = at(g_.ops, a), &y = at(g_.ops, b);
    const op_attrs &p = x.attrs, &q = y.attrs;
    return x.kind == y.kind && x.inputs == y.inputs && x.params == y.params && x.outputs == y.outputs &&
           p.kernel == q.kernel && p.stride == q.stride && p.padding == q.padding && p.heads == q.heads &&
           p.causal == q.causal && p.dropout == q.dropout && p.bias == q.bias && p.transpose_w == q.transpose_w &&
           p.positions == q.positions && p.target == q.target;
  }
  // Whether op_terms(a, c) == op_terms(b, c) for every candidate c: the same node and candidates,
  // and alike in everything else op_terms reads (which inputs are the model's, how many
  // backwards read each input and output, recomputation, outputs read by other blocks). The
  // ops of identical repeated blocks are: a 96-layer GPT prices one layer's ops.
  bool ops_priced_alike(int a, int b) const {
    if (!same_node(a, b) || at(op_sig_index_, a) != at(op_sig_index_, b) || recomputed(a) != recomputed(b) ||
        at(readers_, a) != at(readers_, b) || at(read_by_other_block_, a) != at(read_by_other_block_, b))
      return false;
    const auto &ia = at(g_.op_inputs, a), &ib = at(g_.op_inputs, b);
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
    return at(g_.params, a).shape == at(g_.params, b).shape && (at(uses_, a) > 1) == (at(uses_, b) > 1) &&
           at(param_sigs_, a) == at(param_sigs_, b);
  }
  int op_key(int i) const;
  std::vector<int> param_tie_keys() const;
  void add_nodes(choice_problem& cp, const std::vector<int>* param_key);
  void add_edges(const std::vector<int>& param_key);

  graph g_;
  plan_options o_;
  device_mesh dmesh_;
  int elem_;
  kernel_prices prices_;  ///< the profile's measured kernels for this dtype
  std::vector<std::vector<signature>> sig_lists_;  ///< the distinct candidate lists of the ops
  std::vector<int> op_sig_list_;                    ///< per op: its list in sig_lists_
  std::vector<std::vector<int>> op_sig_index_;
  std::vector<int> candidates_like_;  ///< per op: the first op with the same candidates, in order
  std::vector<std::vector<param_choice>> param_sigs_;
  std::vector<int> uses_;  ///< per parameter: how many op slots use it
  int blocks_ = 1;         ///< repeated blocks in the graph (at least 1)
  std::vector<std::vector<char>> read_by_other_block_;  ///< per op output: read by an op of another block
  std::vector<std::vector<int>> readers_;  ///< per op output: backwards that read it (at least 1)
  std::vector<edge_info> edges_;
  /// the distinct candidate terms (add_nodes): nodes priced alike and both problems share them
  std::deque<std::vector<cost_terms>> unary_;  ///< a deque: its elements never move (the problems point at them)
  std::vector<int> unary_of_;                  ///< per node: its terms in unary_
  choice_problem tied_, untied_;
  boxing_book* book_;  ///< this context's searched paths (boxing_book_for), shared by problems
  std::vector<int> edge_shape_;  ///< per edge: its tensor's id in book_
  std::vector<boxing_lower_bound> box_bounds_;  ///< per shape id of an edge (build): read without the lock
};

inline void plan_problem::build() {
  std::vector<int> seen;
  read_by_other_block_.resize(g_.ops.size());
  for (std::size_t i = 0; i < g_.ops.size(); ++i) {
    at(read_by_other_block_, i).assign(at(g_.ops, i).outputs.size(), 0);
    if (at(g_.block, i) >= 0 && std::find(seen.begin(), seen.end(), at(g_.block, i)) == seen.end())
      seen.push_back(at(g_.block, i));
  }
  blocks_ = std::max<int>(1, int(seen.size()));
  readers_.resize(g_.ops.size());
  for (std::size_t i = 0; i < g_.ops.size(); ++i)
    at(readers_, i).assign(at(g_.ops, i).outputs.size(), backward_reads_of(at(g_.ops, i).kind).output ? 1 : 0);
  for (std::size_t i = 0; i < g_.ops.size(); ++i)
    for (std::size_t j = 0; j < at(g_.op_inputs, i).size(); ++j) {
      const tensor_ref r = at(at(g_.op_inputs, i), j);
      if (r.op >= 0 && backward_reads_of(at(g_.ops, i).kind).input(j)) ++at(at(readers_, r.op), r.index);
    }
  for (auto& v : readers_)
    for (int& k : v) k = std::max(k, 1);
  for (std::size_t i = 0; i < g_.ops.size(); ++i)
    for (const tensor_ref& r : at(g_.op_inputs, i))
      if (r.op >= 0 && at(g_.block, i) >= 0 && at(g_.block, r.op) != at(g_.block, i))
        at(at(read_by_other_block_, r.op), r.index) = 1;
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

// Every op's candidates: signatures(op, mesh), or the ones its allow-list names.
inline void plan_problem::build_op_candidates() {
  const int nops = int(g_.ops.size());
  op_sig_list_.clear();
  sig_lists_.clear();
  resize(op_sig_index_, nops);
  if (std::ssize(o_.allowed) > nops)
    detail::fail<layout_error>("plan_options::allowed has " + detail::itos(std::int64_t(o_.allowed.size())) +
                               " entries but graph '" + g_.name + "' has " + detail::itos(nops) +
                               " ops; give at most one allow-list per op");
  std::vector<std::pair<int, std::vector<signature>>> seen;  // an op of each distinct node, its signatures
  for (int i = 0; i < nops; ++i) {
    auto f = std::find_if(seen.begin(), seen.end(), [&](const auto& s) { return same_node(s.first, i); });
    if (f == seen.end()) f = seen.insert(seen.end(), {i, signatures(at(g_.ops, i), o_.mesh)});
    const std::vector<signature>& all = f->second;
    std::vector<int>& index = at(op_sig_index_, i);
    const bool listed = i < std::ssize(o_.allowed) && !at(o_.allowed, i).empty();
    for (int k = 0; k < int(all.size()); ++k) index.push_back(k);
    if (listed) index = at(o_.allowed, i);
    candidates_like_.push_back(i);
    for (int j = 0; j < i; ++j)
      if (at(candidates_like_, j) == j && same_node(j, i) && at(op_sig_index_, j) == index) {
        candidates_like_.back() = j;
        break;
      }
    if (candidates_like_.back() != i) {  // the same list as an earlier op: shared (a GPT's blocks)
      op_sig_list_.push_back(at(op_sig_list_, candidates_like_.back()));
      continue;
    }
    std::vector<signature> mine;
    for (int k : index) {
      if (k < 0 || k >= std::ssize(all))
        detail::fail<layout_error>("op '" + at(g_.ops, i).name + "' allows signature " + detail::itos(k) + " but has " +
                                   detail::itos(std::int64_t(all.size())) + " on mesh " + to_string(o_.mesh) +
                                   "; list indices into signatures(op, mesh)");
      mine.push_back(at(all, k));
    }
    op_sig_list_.push_back(int(sig_lists_.size()));
    sig_lists_.push_back(std::move(mine));
    if (op_candidates(i).empty())
      detail::fail<layout_error>("op '" + at(g_.ops, i).name + "' has no signature whose tensors divide evenly on mesh " +
                                 to_string(o_.mesh) + "; choose sizes divisible by the mesh axes or a smaller mesh");
  }
}

// Every parameter's candidates: each nd-SBP over {B, S(d)} that divides it, as storage; a tied
// parameter also pairs each storage with its reduce layout for summing (param_choice).
inline void plan_problem::build_param_candidates() {
  const int nparams = int(g_.params.size());
  assign(uses_, nparams, 0);
  for (const op_node& n : g_.ops)
    for (int p : n.param_ids) ++at(uses_, p);
  resize(param_sigs_, nparams);
  for (int p = 0; p < nparams; ++p) {
    const tensor_shape& s = at(g_.params, p).shape;
    std::vector<nd_sbp> all{nd_sbp{}};
    for (int a = 0; a < o_.mesh.size(); ++a) {
      std::vector<nd_sbp> next;
      for (const auto& v : all)
        for (int d = -1; d < s.rank(); ++d) {  // -1: B
          nd_sbp w = v;
          w.push_back(d < 0 ? B : S(d));
          next.push_back(w);
        }
      all = std::move(next);
    }
    const bool tied = at(uses_, p) > 1;
    for (const auto& v : all) {
      if (!divides(s, layout{v, o_.mesh})) continue;
      at(param_sigs_, p).push_back({v, v, v});
      if (tied && !(reduce_layout(v) == v)) at(param_sigs_, p).push_back({v, reduce_layout(v), v});
      const nd_sbp z = zero_shard(v, s, o_.mesh);
      if (z == v) continue;
      if (o_.zero2_layouts) at(param_sigs_, p).push_back({v, tied ? reduce_layout(z) : z, z});  // ZeRO-2
      if (o_.zero1_layouts) at(param_sigs_, p).push_back({v, reduce_layout(v), z});  // ZeRO-1
    }
  }
}

// Tie keys: an op of a repeated block by its position in the block (op_key); a parameter by its
// first user's position and slot, or -1 (its own decision) when users sit at several positions.
inline int plan_problem::op_key(int i) const { return at(g_.block, i) >= 0 ? at(g_.block_pos, i) : -1; }

inline std::vector<int> plan_problem::param_tie_keys() const {
  std::vector<int> key(g_.params.size(), -1);
  std::vector<char> seen(g_.params.size(), 0);
  for (int i = 0; i < int(g_.ops.size()); ++i)
    for (std::size_t j = 0; j < at(g_.ops, i).param_ids.size(); ++j) {
      const int p = at(g_.ops, i).param_ids[j];
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
    for (int n = 0; n < nops() + int(g_.params.size()); ++n) {
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
  for (int i = 0; i < int(g_.ops.size()); ++i) cp.add_node(&at(unary_, at(unary_of_, i)), param_key ? op_key(i) : -1);
  for (int p = 0; p < int(g_.params.size()); ++p)
    cp.add_node(&at(unary_, at(unary_of_, param_node(p))), param_key ? at(*param_key, p) : -1);
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
    edge_shape_.push_back(book_->shape_id_locked(ei.param ? at(g_.params, ei.from_node - int(g_.ops.size())).shape
                                                          : at(at(g_.ops, ei.from_node).outputs, ei.producer_output)));
    const int v_ports = ports(ei.to_node, ei.param ? 2 : 1, ei.tensor_index);
    tied_.add_edge(ei.from_node, ei.to_node, c, u_ports, v_ports);
    untied_.add_edge(ei.from_node, ei.to_node, c, u_ports, v_ports);
  };
  for (int i = 0; i < int(g_.ops.size()); ++i) {
    for (std::size_t j = 0; j < at(g_.op_inputs, i).size(); ++j) {
      const tensor_ref r = at(g_.op_inputs, i)[j];
      if (r.op < 0) continue;  // model inputs are loaded in whatever layout the consumer takes
      const bool share = op_key(r.op) >= 0 && op_key(i) >= 0;
      add({r.op, i, false, int(j), r.index},
          cls({0, op_key(r.op), op_key(i), int(j), r.index, at(g_.block, i) - at(g_.block, r.op)}, share),
          ports(r.op, 0, r.index));
    }
    for (std::size_t j = 0; j < at(g_.ops, i).param_ids.size(); ++j) {
      const int p = at(g_.ops, i).param_ids[j];
      const bool share = at(param_key, p) >= 0 && op_key(i) >= 0;
      add({param_node(p), i, true, int(j), 0}, cls({1, at(param_key, p), op_key(i), int(j), 0, 0}, share), -1);
    }
  }
}

}  // namespace autoddl
