#pragma once
// The prices of a layout-choice problem's candidates: an op's terms (compute, statistic
// all-reduces, activation memory), a parameter's (storage, optimizer, synchronisation), an edge's
// (the boxing paths forward and backward, their copies, what they keep) and the edge's lower bound
// for the search's pruning. Every boxing is cost/'s cheapest alpha-beta path: the one the executor
// runs. The base of plan_problem, over its candidates.
#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "autoddl/cost/boxing_book.hpp"
#include "autoddl/cost/boxing_copies.hpp"
#include "autoddl/cost/collective_cost.hpp"
#include "autoddl/cost/compute.hpp"
#include "autoddl/cost/memory.hpp"
#include "autoddl/cost/step_time.hpp"
#include "autoddl/ops/kernel_key.hpp"
#include "autoddl/plan/step_schedule.hpp"
#include "autoddl/search/detail/plan_candidates.hpp"
#include "autoddl/search/kernel_prices.hpp"
#include "autoddl/search/problem.hpp"

namespace autoddl::detail {

class plan_pricing : public plan_candidates {
 public:
  plan_pricing(graph model, const plan_options& options)
      : plan_candidates(std::move(model), options), prices_(options.hw.measured, options.type),
        book_(&boxing_book_for(mesh_, options.hw.measured.copy, element_bytes_)) {}

  /// An edge of the problem, as added (untied() order): an activation edge from its producer to its
  /// consumer, or a parameter edge from the parameter's node to the op that uses it. A chained
  /// activation edge (from_input >= 0) feeds a later consumer of an output from its first
  /// consumer's input slot: from_node is that first consumer, and the tensor is boxed once for all
  /// (search/planner.hpp).
  struct edge_info {
    int from_node, to_node;
    bool param;          ///< a parameter edge (storage <-> compute) rather than an activation edge
    int tensor_index;    ///< consumer input index, or parameter index within the op
    int producer_output; ///< activation edges: which output of the producer
    int producer = -1;   ///< activation edges: the op that makes the tensor
    int from_input = -1; ///< chained edges: the first consumer's input slot it boxes from
  };
  const std::vector<edge_info>& edge_infos() const { return edges_; }

  /// Parameter p's gradient synchronisation under its candidate c: the summed contributions of its
  /// uses boxed from the summing layout to storage (empty for a parameter with one use).
  boxing_path param_sync_path(int p, int c) const {
    const param_choice& pc = param_candidate(p, c);
    return as_gradient(box(pc.grad_sum, pc.update, at(model_->params, p).shape));
  }
  /// Parameter p's updated slices gathered back to storage after the optimizer (ZeRO stages 1
  /// and 2; empty where the update layout is the storage).
  boxing_path param_gather_path(int p, int c) const {
    const param_choice& pc = param_candidate(p, c);
    return box(pc.update, pc.storage, at(model_->params, p).shape);
  }

  /// The forward and backward boxing paths of edge e under picks cu, cv: for a parameter edge,
  /// storage -> compute layout, and the gradient dual(compute) -> the summing layout.
  std::pair<boxing_path, boxing_path> edge_paths(int e, int cu, int cv) const {
    check_planning_allowed("find an edge's boxing paths");
    auto paths = edge_boxings<boxing_path>(e, cu, cv, [this](const nd_sbp& from, const nd_sbp& to, int shape) {
      return book_->box_locked(from, to, shape);
    });
    if (at(edges_, e).param) paths.second = as_gradient(paths.second);
    return paths;
  }
  /// A parameter gradient's path as the executor runs it: on gradient sums' elements, fp32 under
  /// plan_options::fp32_gradient_sums with a 16-bit type (runtime/detail/gradient_accumulator.hpp;
  /// Megatron-LM's --accumulate-allreduce-grads-in-fp32 reduces in fp32 too), else p itself.
  /// The path is the one searched at the dtype's element size.
  boxing_path as_gradient(const boxing_path& p) const {
    return gradient_sum_bytes_ == element_bytes_ ? p : with_element_bytes(p, gradient_sum_bytes_, mesh_);
  }

  /// Whether activation edge e's copy is freed after forward and boxed again from its kept source
  /// for backward under picks cu, cv (plan_options::regather_inputs; plan/step_schedule.hpp).
  bool regathers(int e, int cu, int cv) const {
    const edge_info& ei = at(edges_, e);
    return !ei.param && options_.regather_inputs &&
           regathers_input(at(model_->ops, ei.to_node), at(model_->block, ei.to_node), std::size_t(ei.tensor_index),
                           source_layout(e, cu), at(op_candidate(ei.to_node, cv).inputs, ei.tensor_index), options_.mesh,
                           options_.recompute);
  }

  /// The priced path from -> to for a tensor of shape s (boxing_cost on this problem's mesh).
  /// Memoised by shortest-path tree: the search asks for every target of the same source and
  /// shape across repeated layers and candidate pairs, and one search answers them all. The
  /// trees are the process's for this mesh, its links, copy rate and dtype (boxing_book_for),
  /// shared with the other problems of that context.
  boxing_path box(const nd_sbp& from, const nd_sbp& to, const tensor_shape& s) const {
    check_planning_allowed("find a boxing path");
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
    const op_work w = device_work(at(model_->ops, op), op_candidate(op, c), options_.mesh, element_bytes_);
    cost_terms t;
    if (const kernel_price k = kernel_price_of(op, c, w); k.source != price_source::analytical) {
      t.compute_fwd = k.forward_s;
      t.compute_bwd = k.backward_s;
    } else {
      std::tie(t.compute_fwd, t.compute_bwd) = analytical_compute(w);
    }
    if (w.fwd_copy_bytes + w.bwd_copy_bytes > 0) {  // copies besides the kernel, memory-bound
      t.compute_fwd += memory_time(w.fwd_copy_bytes, options_.hw.device);
      t.compute_bwd += memory_time(w.bwd_copy_bytes, options_.hw.device);
    }
    // the routed counts, exchanged while the host waits (ops/expert_work.hpp): their time only, since
    // t.bytes is what autoddl's executor sends, and it reads each token's picks on the host instead
    for (const count_exchange& c : w.count_exchanges)
      t.comm_fwd += step_time(boxing_step{c.axis, S(0), B, collective::all_gather, options_.mesh[c.axis], c.bytes,
                                          std::int64_t(sizeof(std::int64_t))}, mesh_);
    for (const auto& s : w.stat_all_reduces) {  // the trainer pads and copies each (runtime/detail/step_loss.hpp, wire_statistics)
      boxing_step st{s.axis, P, B, collective::all_reduce, options_.mesh[s.axis], s.bytes, element_bytes_};
      t.comm_fwd += step_time(st, mesh_) + 2 * options_.hw.measured.copy.time(double(executed_group_bytes(st)));
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

  /// The analytical forward and backward seconds of work w (cost/compute.hpp): element-wise work
  /// by its roofline, other work at its kind's efficiency; the expert GEMMs (w.gemms) each priced
  /// on its own by its roofline, backward twice forward, and the rest of the op's FLOPs at the
  /// kind's rate.
  std::pair<double, double> analytical_compute(const op_work& w) const {
    const device_spec& dev = options_.hw.device;
    if (w.kind == work_kind::elementwise)
      return {elementwise_time(w.fwd_flops, double(w.fwd_bytes_moved), options_.type, dev),
              elementwise_time(w.bwd_flops, 2.0 * double(w.fwd_bytes_moved), options_.type, dev)};
    const expert_gemms& g = w.gemms;
    const double gemms = g.experts > 0 ? expert_gemms_time(g.experts, g.rows, g.hidden, g.width, element_bytes_, options_.type, dev) : 0;
    const double flops = g.experts > 0 ? g.forward_flops() : 0;
    return {gemms + compute_time(std::max(w.fwd_flops - flops, 0.0), w.kind, options_.type, dev),
            2.0 * gemms + compute_time(std::max(w.bwd_flops - 2.0 * flops, 0.0), w.kind, options_.type, dev)};
  }

  /// Bytes op `op` keeps under candidate c (activations): what its backward reads, less what
  /// recomputation drops, plus its outputs that a recomputed block reads from outside; and what
  /// its backward holds for a moment (transient): its output's gradient beside the gradients it
  /// makes for its inputs and parameters (the logits' gradient of a language model's head is
  /// the largest buffer of many plans).
  memory_breakdown op_memory(int op, int c, const op_work& w) const {
    memory_breakdown m;
    const op_node& n = at(model_->ops, op);
    const signature& sig = op_candidate(op, c);
    auto bytes = [&](const tensor_shape& t, const nd_sbp& l) {
      return double(local_shape(t, layout{l, options_.mesh}).elements()) * element_bytes_;
    };
    double backward_set = bytes(n.outputs[0], sig.outputs[0]);
    for (std::size_t j = 0; j < n.inputs.size(); ++j)
      if (at(model_->op_inputs, op)[j].op >= 0) backward_set += bytes(n.inputs[j], sig.inputs[j]);
    for (std::size_t j = 0; j < n.params.size(); ++j) backward_set += bytes(n.params[j], sig.params[j]);
    m.transient = std::int64_t(backward_set);
    auto input_readers = [&](std::size_t j) {  // backwards reading input j's buffer (1: a model input)
      const tensor_ref r = at(at(model_->op_inputs, op), j);
      return r.op < 0 ? 1 : at(at(readers_, r.op), r.index);
    };
    // a buffer several backwards read (the layernorm output read in place by q, k and v; relu's
    // output read by relu and the next linear) is one buffer: each reader pays its share
    double kept = double(w.activation_bytes);
    const backward_reads reads = backward_reads_of(n);
    for (std::size_t j = 0; j < n.inputs.size(); ++j)
      if (reads.input(j)) kept -= (1 - 1.0 / input_readers(j)) * bytes(n.inputs[j], sig.inputs[j]);
    if (reads.output) kept -= (1 - 1.0 / at(at(readers_, op), 0)) * bytes(n.outputs[0], sig.outputs[0]);
    if (recomputed(op) && options_.recompute == recompute_mode::selective) {  // the core's inputs only
      kept = 0;
      for (std::size_t j = 0; j < n.inputs.size(); ++j) kept += bytes(n.inputs[j], sig.inputs[j]) / input_readers(j);
      // and its share of an output its backward reads (the fused attention's): the executor
      // holds it (step_schedule), and the other readers pay only theirs
      if (reads.output) kept += bytes(n.outputs[0], sig.outputs[0]) / at(at(readers_, op), 0);
    } else if (recomputed(op)) {
      kept /= double(blocks_);
    }
    if (options_.recompute == recompute_mode::full)
      for (int k = 0; k < int(n.outputs.size()); ++k)
        if (at(at(read_by_other_block_, op), k)) kept += bytes(at(n.outputs, k), at(sig.outputs, k));
    m.activations = std::int64_t(kept);
    for (std::size_t j = 0; j < n.inputs.size(); ++j) m.activations -= kept_input_bytes(op, j, sig.inputs[j]);  // its edge's
    return m;
  }

  /// Of what op `op` keeps for its backward, its share of input j's buffer laid out `l`: the
  /// input read by its backward (or by a selectively recomputed op's rerun), shared by the
  /// backwards that read the tensor, a block's worth under full recomputation. Priced on the
  /// input's edge (edge_memory), which knows whether the step keeps that copy or, regathering,
  /// its smaller source; 0 for a model input (op_memory keeps it).
  std::int64_t kept_input_bytes(int op, std::size_t j, const nd_sbp& l) const {
    const tensor_ref r = at(model_->op_inputs, op)[j];
    const op_node& n = at(model_->ops, op);
    const bool selective = recomputed(op) && options_.recompute == recompute_mode::selective;
    if (r.op < 0 || (!selective && !backward_reads_of(n).input(j))) return 0;
    double share = double(local_shape(at(n.inputs, j), layout{l, options_.mesh}).elements()) * element_bytes_ /
                   double(at(at(readers_, r.op), r.index));
    if (recomputed(op) && options_.recompute == recompute_mode::full) share /= double(blocks_);
    return std::int64_t(share);
  }

  /// The measured or fitted price of op `op`'s kernel under candidate c, or source analytical.
  kernel_price kernel_price_of(int op, int c, const op_work& w) const {
    if (prices_.empty()) return {};
    const op_node& n = at(model_->ops, op);
    std::vector<bool> input_grads;  // the trainer skips the gradients of the model's own inputs
    for (const tensor_ref& r : at(model_->op_inputs, op)) input_grads.push_back(r.op >= 0);
    const std::string key = kernel_key(n, op_candidate(op, c), options_.mesh, input_grads);
    return prices_.price(std::string(to_string(n.kind)), key, w);
  }

  /// How many op candidates were priced from measurements, from the per-kind fit, analytically.
  kernel_price_counts kernel_price_counts_of() const {
    kernel_price_counts k;
    if (prices_.empty()) {  // kernel_price_of's answer for every candidate, without its work
      for (int i = 0; i < int(model_->ops.size()); ++i) k.analytical += int(op_candidates(i).size());
      return k;
    }
    for (int i = 0; i < int(model_->ops.size()); ++i)
      for (int c = 0; c < int(op_candidates(i).size()); ++c) {
        const op_work w = device_work(at(model_->ops, i), op_candidate(i, c), options_.mesh, element_bytes_);
        const price_source s = kernel_price_of(i, c, w).source;
        ++(s == price_source::measured ? k.measured : s == price_source::fitted ? k.fitted : k.analytical);
      }
    return k;
  }

  /// Storage terms of parameter p under candidate c: params, grads and optimizer state, and for a
  /// tied parameter the one synchronisation of its summed gradient.
  cost_terms param_terms(int p, int c) const {
    const param_choice& pc = param_candidate(p, c);
    const tensor_shape& shape = at(model_->params, p).shape;
    const double elems = double(local_shape(shape, layout{pc.update, options_.mesh}).elements());
    cost_terms t;
    t.memory = double(param_memory(p, c).total());
    const boxing_path sync = param_sync_path(p, c);
    t.comm_grad = sync.cost + path_copy_time(sync, options_.hw.measured.copy);
    t.compute_bwd = optimizer_time(elems);
    t.bytes = double(sync.bytes_per_device());
    t.transient = path_buffer(sync);
    if (!(pc.grad_sum == pc.update))  // the sum's buffer, held from the last use to the sync
      t.transient = std::max(t.transient, double(local_shape(shape, layout{pc.grad_sum, options_.mesh}).elements()) * gradient_sum_bytes_);
    const boxing_path gather = param_gather_path(p, c);
    if (gather.size() > 0) {  // after the optimizer, before the next forward: nothing hides it
      t.comm_fwd = gather.cost + path_copy_time(gather, options_.hw.measured.copy);
      t.bytes += double(gather.bytes_per_device());
      t.transient = std::max({t.transient, path_buffer(gather), elems * element_bytes_});  // the updated slice
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
    const tensor_shape& shape = at(model_->params, p).shape;
    auto elems = [&](const nd_sbp& l) { return local_shape(shape, layout{l, options_.mesh}).elements(); };
    memory_breakdown m;
    m.params = elems(pc.storage) * element_bytes_;
    m.grads = std::max(elems(pc.update), at(uses_, p) > 1 ? 0 : elems(pc.grad_sum)) * gradient_sum_bytes_;
    m.optimizer = optimizer_state_bytes(options_.opt, elems(pc.update), options_.type);
    return m;
  }

  /// Seconds of the optimizer update of a storage shard of `elems` elements
  /// (runtime/detail/parameter_store.hpp, update): the bytes it reads and writes
  /// (optimizer_update_bytes: fp32 Adam 28 an element, bf16 Adam with its fp32 master 34) at the
  /// memory's rate (roofline, cost/compute.hpp), or at the profile's measured rate for the plan's
  /// optimizer, which autoddl-calibrate measures in fp32 and which scales with the bytes.
  double optimizer_time(double elems) const {
    const optimizer_rate& r = options_.opt == optimizer::adam ? options_.hw.measured.adam : options_.hw.measured.sgd_momentum;
    const double touched = double(optimizer_update_bytes(options_.opt, options_.type, options_.fp32_gradient_sums));
    if (r.measured()) return r.time(elems * touched / double(optimizer_update_bytes(options_.opt, dtype::fp32)));
    return memory_time(touched * elems, options_.hw.device);
  }

  /// What edge e keeps through the step: a gathered parameter (params) and, with micro-batches,
  /// its gradient accumulated in the compute layout, less the share of the stored gradient it
  /// turns into (grads); the boxed copy of a fully recomputed block's input (activations).
  /// (The pipeline's per-stage memory reads it.)
  memory_breakdown edge_memory(int e, int cu, int cv) const {
    auto [fwd, bwd] = edge_paths(e, cu, cv);
    return edge_memory(e, cu, cv, fwd.size() > 0, bwd.size() > 0);
  }

 protected:
  // The terms of edge e under picks cu (its source) and cv (its consumer): the pair cost.
  cost_terms edge_terms(int e, int cu, int cv) const {
    const auto [fwd, bwd] = edge_summaries(e, cu, cv);
    cost_terms t = edge_time_terms(e, cu, cv, fwd, bwd);
    t.memory = double(edge_memory(e, cu, cv, fwd.steps > 0, bwd.steps > 0).total());
    return t;
  }
  // edge_terms but memory, from the paths' summaries.
  cost_terms edge_time_terms(int e, int cu, int cv, const path_summary& fwd, const path_summary& bwd) const {
    const edge_info& ei = at(edges_, e);
    cost_terms t;
    // Copies beside the collectives (cost/boxing_copies.hpp), on the step's own comm term; the
    // forward boxing starts from a copy of the source shard (the trainer passes the producer's
    // output or the stored parameter by value), the backward one moves its gradient.
    const copy_rate& copy = options_.hw.measured.copy;
    t.comm_fwd = fwd.seconds + fwd.copy_seconds;
    if (fwd.steps > 0 && copy.measured()) t.comm_fwd += copy.time(source_bytes(e, cu));
    const double bwd_s = bwd.seconds + bwd.copy_seconds;
    if (ei.param) t.comm_grad = bwd_s;
    else t.comm_bwd = bwd_s;
    t.bytes = double(fwd.bytes + bwd.bytes);
    // buffers: a path's largest intermediate is a transient; what edge_memory keeps lives on
    t.transient = std::max(fwd.buffer, bwd.buffer);
    if (ei.param) {
      if (options_.reshard_after_forward && fwd.steps > 0) {  // gathered for each forward and each backward
        const double m = double(options_.microbatches);
        t.comm_bwd = m * t.comm_fwd;
        t.comm_fwd *= m;
        t.bytes += double(2 * options_.microbatches - 1) * double(fwd.bytes);
        t.transient = std::max(t.transient, double(compute_bytes(e, cv)));  // the op in flight's gathered copy
      }
      return t;
    }
    // the forward boxing runs again: with the block's rerun, or before the backward that reads
    // its copy (regathered; its copy is then a transient)
    if (recomputed_inside(e) || regathers(e, cu, cv)) {
      t.comm_bwd += t.comm_fwd;
      t.bytes += double(fwd.bytes);
    }
    if (regathers(e, cu, cv)) t.transient = std::max(t.transient, double(compute_bytes(e, cv)));
    scale_per_micro_batch(t);
    // the producer's forward again before the consumer's backward (op_terms: already per step)
    if (recomputed_for_reader(e, fwd.steps > 0)) t.compute_bwd += op_terms(ei.producer, cu).compute_fwd;
    return t;
  }

  // Whether the step recomputes activation edge e's tensor for its consumer's backward instead of
  // keeping it (plan/step_schedule.hpp, output_recomputed_for_readers: the SwiGLU product read in
  // place by the down projection): the producer's first reader over an edge that does not box,
  // inside one block, outside full recomputation, its backward reading the input.
  bool recomputed_for_reader(int e, bool fwd_boxes) const {
    const edge_info& ei = at(edges_, e);
    if (ei.param || fwd_boxes || ei.from_input >= 0 || options_.recompute == recompute_mode::full) return false;
    const int block = at(model_->block, ei.to_node);
    return output_recomputed_for_readers(at(model_->ops, ei.producer)) && block >= 0 && at(model_->block, ei.producer) == block &&
           backward_reads_of(at(model_->ops, ei.to_node)).input(std::size_t(ei.tensor_index));
  }

  // Bytes of edge e's tensor on one device in its consumer's layout under pick cv (the copy, or
  // for a parameter edge the gathered parameter).
  std::int64_t compute_bytes(int e, int cv) const {
    const edge_info& ei = at(edges_, e);
    const signature& sig = op_candidate(ei.to_node, cv);
    const tensor_shape& s = ei.param ? at(model_->params, ei.from_node - int(model_->ops.size())).shape
                                     : at(at(model_->ops, ei.producer).outputs, ei.producer_output);
    return local_shape(s, layout{ei.param ? at(sig.params, ei.tensor_index) : at(sig.inputs, ei.tensor_index), options_.mesh})
               .elements() *
           element_bytes_;
  }

  // Whether activation edge e runs inside one block that recomputes its whole forward.
  bool recomputed_inside(int e) const {
    const edge_info& ei = at(edges_, e);
    return !ei.param && options_.recompute == recompute_mode::full && at(model_->block, ei.to_node) >= 0 &&
           at(model_->block, ei.from_node) == at(model_->block, ei.to_node);
  }

  // edge_memory given whether the forward and the backward path box at all.
  memory_breakdown edge_memory(int e, int cu, int cv, bool fwd_boxes, bool bwd_boxes) const {
    const edge_info& ei = at(edges_, e);
    memory_breakdown m;
    if (ei.param) {
      const std::int64_t bytes = compute_bytes(e, cv);
      if (fwd_boxes && !options_.reshard_after_forward) m.params = bytes;  // else a transient (edge_time_terms)
      if (bwd_boxes && options_.microbatches > 1) {
        // the accumulator becomes the summed, then the stored gradient (moved, not copied): it
        // replaces this use's share of the storage gradient param_memory counts
        const int p = ei.from_node - int(model_->ops.size());
        const std::int64_t stored = param_memory(p, cu).grads / at(uses_, p);
        const std::int64_t sum = bytes / element_bytes_ * gradient_sum_bytes_;  // kept as gradient sums are
        m.grads = sum - std::min(sum, stored);
      }
      return m;
    }
    const int consumer_block = at(model_->block, ei.to_node);
    if (options_.recompute == recompute_mode::full && consumer_block >= 0 && at(model_->block, ei.from_node) != consumer_block &&
        fwd_boxes) {
      const nd_sbp& in = at(op_candidate(ei.to_node, cv).inputs, ei.tensor_index);
      m.activations = local_shape(at(at(model_->ops, ei.from_node).outputs, ei.producer_output), layout{in, options_.mesh}).elements() * element_bytes_;
    }
    // the consumer's share of what it keeps of this input: the copy, or where it regathers its source
    // (none where the step recomputes it for the consumer's backward)
    const nd_sbp& kept = regathers(e, cu, cv) ? source_layout(e, cu) : at(op_candidate(ei.to_node, cv).inputs, ei.tensor_index);
    if (!recomputed_for_reader(e, fwd_boxes)) m.activations += kept_input_bytes(ei.to_node, std::size_t(ei.tensor_index), kept);
    return m;
  }

  // Time and bytes of something that runs once per micro-batch, for the whole step.
  void scale_per_micro_batch(cost_terms& t) const {
    const double m = double(options_.microbatches);
    cost_terms::per_micro_batch::for_each([&](auto f) { t.*f *= m; });
  }

  // Bytes of edge e's forward source shard on one device under the producer's pick cu.
  double source_bytes(int e, int cu) const {
    const edge_info& ei = at(edges_, e);
    if (ei.param) {
      const int p = ei.from_node - int(model_->ops.size());
      const nd_sbp& st = param_candidate(p, cu).storage;
      return double(local_shape(at(model_->params, p).shape, layout{st, options_.mesh}).elements()) * element_bytes_;
    }
    const tensor_shape& s = at(at(model_->ops, ei.producer).outputs, ei.producer_output);
    return double(local_shape(s, layout{source_layout(e, cu), options_.mesh}).elements()) * element_bytes_;
  }

  // The forward and backward summaries of edge e under picks cu, cv (edge_paths' paths).
  std::pair<path_summary, path_summary> edge_summaries(int e, int cu, int cv) const {
    auto s = edge_boxings<path_summary>(e, cu, cv, [this](const nd_sbp& from, const nd_sbp& to, int shape) {
      return book_->summary_locked(from, to, shape);
    });
    if (at(edges_, e).param && s.second.steps > 0 && gradient_sum_bytes_ != element_bytes_) {  // as_gradient's
      const boxing_path p = edge_paths(e, cu, cv).second;
      s.second = {p.cost, path_copy_time(p, options_.hw.measured.copy), p.bytes_per_device(), path_buffer(p), p.size()};
    }
    return s;
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
      const param_choice& store = param_candidate(ei.from_node - int(model_->ops.size()), cu);
      const nd_sbp& comp = at(op_candidate(ei.to_node, cv).params, ei.tensor_index);
      return {store.storage, comp, dual(comp), store.grad_sum};
    }
    const nd_sbp& out = source_layout(e, cu);
    const nd_sbp& in = at(op_candidate(ei.to_node, cv).inputs, ei.tensor_index);
    return {out, in, dual(in), dual(out)};
  }
  // Where activation edge e's forward boxing starts under its source's pick cu: the producer's
  // output layout, or for a chained edge the first consumer's input layout.
  const nd_sbp& source_layout(int e, int cu) const {
    const edge_info& ei = at(edges_, e);
    if (ei.from_input >= 0) return at(op_candidate(ei.from_node, cu).inputs, ei.from_input);
    return at(op_candidate(ei.from_node, cu).outputs, ei.producer_output);
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
      const param_choice& store = param_candidate(ei.from_node - int(model_->ops.size()), cu);
      const nd_sbp& comp = at(op_candidate(ei.to_node, cv).params, ei.tensor_index);
      t.comm_fwd = slack * lb(store.storage, comp);
      t.comm_grad = slack * lb.between(comp, true, store.grad_sum, false);
      return t;
    }
    const nd_sbp& out = source_layout(e, cu);
    const nd_sbp& in = at(op_candidate(ei.to_node, cv).inputs, ei.tensor_index);
    t.comm_fwd = slack * lb(out, in);
    t.comm_bwd = slack * lb.between(in, true, out, true);
    if (recomputed_inside(e) || regathers(e, cu, cv)) t.comm_bwd += t.comm_fwd;
    scale_per_micro_batch(t);
    return t;
  }

  kernel_prices prices_;  ///< the profile's measured kernels for this dtype
  boxing_book* book_;     ///< this context's searched paths (boxing_book_for), shared by problems
  std::vector<edge_info> edges_;
  std::vector<int> edge_shape_;                 ///< per edge: its tensor's id in book_
  std::vector<boxing_lower_bound> box_bounds_;  ///< per shape id of an edge (build): read without the lock
};

}  // namespace autoddl::detail
