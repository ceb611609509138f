#pragma once
// What a training step keeps and reruns, op by op (runtime/trainer.hpp executes it, search/step_memory.hpp replays its allocations): which ops
// rerun their forward in backward under the plan's recomputation, and which op outputs must
// outlive their consumers' forwards. It depends only on the graph, the recomputation and which
// input edges box (a boxed input is a copy; an unboxed one is read in place from its producer).
//
// Rules (the planner prices the same, search/planner.hpp):
//   selective  an attention op inside a repeated block reruns its forward before its backward;
//   full       every op of a repeated block reruns, in order, before the block's backward.
// Outside full recomputation, an op whose output is recomputed for its readers
// (output_recomputed_for_readers: the fused SwiGLU's product) is not held for the backwards of
// its block that read it in place: it reruns its forward, from the inputs its own backward keeps,
// just before the first of those backwards (the down projection's), and its output then lives to
// its own backward. Where something else holds the output it is kept and nothing reruns.
// An op output is held from forward to backward by whoever reads it then:
//   hold_all      any reader: its own backward (relu, softmax read their output), a consumer's
//                 backward reading it in place, a fully recomputed consumer in another block
//                 rerunning from it;
//   hold_outside  readers in another block only (what a fully recomputed block keeps);
//   hold_inside   its own backward and readers in its block (after the block's rerun).
// A boxed copy is freed after the forward of the last op that reads it (its own op, or a later
// reader chained from its slot: plan/plan.hpp) unless a backward reads it in place.
// Re-gathering (plan::regather_inputs; Korthikanti et al. 2022, section 4.2.2): a copy that
// gathers (regathers_input) is freed after its last forward reader all the same; its source (the
// producer's output, or the copy of the slot it is chained from) is held instead, and the copy is
// boxed again from it just before the first backward that reads it (its own op's, or a later
// reader's reading it in place; before a selectively recomputed op's rerun), then freed with its
// op's buffers after its own op's backward. Example: a sequence-parallel linear keeps X[S(0)]@2,
// not X[B]@2, and all-gathers it again in backward.
#include <algorithm>
#include <cstddef>
#include <map>
#include <vector>

#include "autoddl/cost/memory.hpp"
#include "autoddl/index.hpp"
#include "autoddl/models/graph.hpp"
#include "autoddl/ops/work.hpp"
#include "autoddl/plan/boxed_slots.hpp"
#include "autoddl/plan/plan.hpp"

namespace autoddl {

/// Whether input j of `consumer` (an op of repeated block `block`, -1: none) is boxed again from
/// its source before the op's backward rather than kept: its backward reads the input, its copy
/// is larger on the device than the source it is boxed from (an all-gather on some axis), and the
/// op does not rerun with a fully recomputed block (whose rerun boxes the copy again anyway).
/// Example: a linear reading X [S(0)]@2 as [B]@2 regathers it; reading [B]@2 as [S(1)]@2 does not.
inline bool regathers_input(const op_node& consumer, int block, std::size_t j, const nd_sbp& source, const nd_sbp& copy,
                            const mesh_shape& mesh, recompute_mode mode) {
  if (!backward_reads_of(consumer).input(j) || (mode == recompute_mode::full && block >= 0)) return false;
  const tensor_shape& s = at(consumer.inputs, j);
  return local_shape(s, layout{copy, mesh}).elements() > local_shape(s, layout{source, mesh}).elements();
}

/// Per op and input slot of a plan of model g: whether the slot's copy is boxed again before
/// backward (plan::regather_inputs `regather`, regathers_input; model inputs and unboxed slots
/// never are). `sig(i)`: op i's signature; `slots`: the plan's boxed slots.
template <class SignatureOf>
std::vector<std::vector<bool>> regathered_inputs(const graph& g, const SignatureOf& sig, const boxed_slots& slots,
                                                 const mesh_shape& mesh, recompute_mode mode, bool regather) {
  std::vector<std::vector<bool>> r(g.ops.size());
  for (int i = 0; i < int(g.ops.size()); ++i)
    for (std::size_t j = 0; j < at(g.op_inputs, i).size(); ++j) {
      const tensor_ref t = at(g.op_inputs, i)[j];
      const input_slot c = at(slots.chained, i)[j];
      const nd_sbp& source = c.op >= 0 ? at(sig(c.op).inputs, c.input) : at(sig(t.op >= 0 ? t.op : i).outputs, t.op >= 0 ? t.index : 0);
      at(r, i).push_back(regather && t.op >= 0 && at(slots.inputs, i)[j] &&
                         regathers_input(at(g.ops, i), at(g.block, i), j, source, at(sig(i).inputs, j), mesh, mode));
    }
  return r;
}

/// The same for plan p.
inline std::vector<std::vector<bool>> regathered_inputs(const plan& p) {
  return regathered_inputs(p.g(), [&p](int i) -> const signature& { return p.sig(i); }, boxed_slots_of(p), p.mesh,
                           p.recompute, p.regather_inputs);
}

class step_schedule {
 public:
  /// `input_boxed[i][j]`: whether input j of op i is boxed (copied) rather than read in place;
  /// `chained[i][j]`: the slot it boxes from instead of its producer (op -1: none).
  /// `regathered[i][j]`: whether that slot's copy is boxed again before backward (empty: none is).
  step_schedule(const graph& g, recompute_mode mode, const std::vector<std::vector<bool>>& input_boxed,
                const std::vector<std::vector<input_slot>>& chained, const std::vector<std::vector<bool>>& regathered = {})
      : g_(g), mode_(mode), boxed_(input_boxed), chained_(chained), regathered_(regathered) {
    regathered_.resize(g.ops.size());
    index_blocks();
    index_reads();
    index_copies();
    index_reboxing();
  }
  /// The schedule plan `p` runs (p's model must outlive it).
  explicit step_schedule(const plan& p) : step_schedule(p.g(), p.recompute, p.boxed_inputs(), p.chains(), regathered_inputs(p)) {}
  /// The schedule of a plan of g whose slots box as `slots` (g must outlive it).
  step_schedule(const graph& g, recompute_mode mode, const boxed_slots& slots, const std::vector<std::vector<bool>>& regathered)
      : step_schedule(g, mode, slots.inputs, slots.chained, regathered) {}

  recompute_mode mode() const { return mode_; }
  /// Op i reruns its forward in backward (selectively: just before its own backward; fully: with
  /// its block, before the block's last op's backward).
  bool recomputes(int i) const { return at(recomputes_, i) != 0; }
  bool fully_recomputed(int i) const { return recomputes(i) && mode_ == recompute_mode::full; }
  bool selectively_recomputed(int i) const { return recomputes(i) && mode_ == recompute_mode::selective; }
  /// Op i is the last op of its repeated block.
  bool last_of_block(int i) const { return at(last_of_block_, i) != 0; }
  /// An op outside op i's block reads its output.
  bool read_outside_block(int i) const { return at(read_outside_block_, i) != 0; }
  /// The ops of repeated block `blk`, in order.
  const std::vector<int>& block_ops(int blk) const { return block_ops_.at(blk); }
  /// What op i's backward reads.
  const backward_reads& reads(int i) const { return at(reads_, i); }
  /// The ops whose forward reruns just before op i's backward, in order: producers whose output
  /// is recomputed for their readers (op i the first of those backwards), then op i itself where
  /// it is selectively recomputed. Example: a LLaMA block's mlp.down lists mlp.swiglu.
  const std::vector<int>& reruns_before(int i) const { return at(reruns_before_, i); }
  /// Per op: the input slots that read its output (all, and those of ops in its own block).
  const std::vector<int>& consumer_slots() const { return consumer_slots_; }
  const std::vector<int>& block_consumer_slots() const { return block_consumer_slots_; }

  /// The slot whose boxed copy input j of op i reads in place: its own where it boxes, its
  /// chained slot's where that one boxes, else none (the producer's output or a model input).
  input_slot copy_read(int i, std::size_t j) const {
    if (at(boxed_, i)[j]) return {i, int(j)};
    const input_slot c = at(chained_, i)[j];
    return c.op >= 0 && at(boxed_, c.op)[std::size_t(c.input)] ? c : input_slot{};
  }
  /// The slots (model inputs and boxed copies) no one reads after op i's forward: free unless
  /// reruns_from keeps them for a fully recomputed block's rerun.
  const std::vector<input_slot>& copies_done(int i) const { return at(copies_done_, i); }
  /// Whether input j of op i is a copy boxed again before backward (regathered_inputs).
  bool regathered(int i, std::size_t j) const { return j < at(regathered_, i).size() && at(regathered_, i)[j]; }
  /// The regathered copies to box again, where they are not held, just before op i's backward
  /// (and its rerun), in order: a copy is listed after the regathered copy it is boxed from.
  const std::vector<input_slot>& reboxed_before(int i) const { return at(reboxed_before_, i); }

  /// Whether input j of op i comes over an edge inside one repeated block (reboxed under full).
  bool inside_block(int i, std::size_t j) const {
    const tensor_ref r = at(g_.op_inputs, i)[j];
    return r.op >= 0 && at(g_.block, i) >= 0 && at(g_.block, r.op) == at(g_.block, i);
  }
  /// Whether op i's input j must live until a fully recomputed block reruns op i (it enters the
  /// block from outside; the copies and outputs inside the block are rebuilt by the rerun).
  bool reruns_from(int i, std::size_t j) const { return fully_recomputed(i) && !inside_block(i, j); }
  /// Whether op p's output stays once its last pending consumer has run forward (`rerun`: during
  /// a fully recomputed block's rerun).
  bool held(int p, bool rerun) const {
    if (rerun) return at(hold_inside_, p) != 0;
    return (fully_recomputed(p) ? at(hold_outside_, p) : at(hold_all_, p)) != 0;
  }

 private:
  void index_blocks() {
    const int nops = int(g_.ops.size());
    assign(recomputes_, nops, 0);
    assign(read_outside_block_, nops, 0);
    assign(last_of_block_, nops, 0);
    for (int i = 0; i < nops; ++i) {
      const int blk = at(g_.block, i);
      if (blk < 0) continue;
      at(recomputes_, i) = mode_ == recompute_mode::full ||
                           (mode_ == recompute_mode::selective && at(g_.ops, i).kind == op_kind::attention);
      block_ops_[blk].push_back(i);
    }
    for (const auto& [blk, ops] : block_ops_) at(last_of_block_, ops.back()) = 1;
    for (int i = 0; i < nops; ++i)
      for (const tensor_ref& r : at(g_.op_inputs, i))
        if (r.op >= 0 && at(g_.block, r.op) != at(g_.block, i)) at(read_outside_block_, r.op) = 1;
  }

  // Whether op p's output, read in place by op i's backward over slot j, is recomputed for it.
  bool recomputed_for(int p, int i, std::size_t j) const {
    return output_recomputed_for_readers(at(g_.ops, p)) && mode_ != recompute_mode::full && inside_block(i, j);
  }

  void index_reads() {
    const int nops = int(g_.ops.size());
    std::vector<int> first_reader(static_cast<std::size_t>(nops), -1);  // of a recomputed output, in backward order
    for (int i = 0; i < nops; ++i) reads_.push_back(backward_reads_of(at(g_.ops, i)));
    assign(consumer_slots_, nops, 0);
    assign(block_consumer_slots_, nops, 0);
    assign(hold_all_, nops, 0);
    assign(hold_outside_, nops, 0);
    assign(hold_inside_, nops, 0);
    for (int i = 0; i < nops; ++i) {
      if (at(reads_, i).output) at(hold_all_, i) = at(hold_inside_, i) = 1;
      for (std::size_t j = 0; j < at(g_.op_inputs, i).size(); ++j) {
        const int p = at(g_.op_inputs, i)[j].op;
        if (p < 0) continue;
        ++at(consumer_slots_, p);
        const bool same_block = inside_block(i, j);
        if (same_block) ++at(block_consumer_slots_, p);
        const bool direct = copy_read(i, j).op < 0;
        const bool bwd_reads = direct && at(reads_, i).input(j);
        const bool recomputed = bwd_reads && recomputed_for(p, i, j);
        if (recomputed) at(first_reader, p) = std::max(at(first_reader, p), i);
        const bool rerun_reads = direct && reruns_from(i, j);
        const bool regathers_from = regathered(i, j) && source_copy(i, j).op < 0;  // boxed from p's output again
        if ((!bwd_reads || recomputed) && !rerun_reads && !regathers_from) continue;
        at(hold_all_, p) = 1;
        (same_block ? at(hold_inside_, p) : at(hold_outside_, p)) = 1;
      }
    }
    index_reruns(first_reader);
  }

  // reruns_before: each output recomputed for its readers (first_reader[p] >= 0) that no one holds
  // before the first backward reading it, then each selectively recomputed op before its own.
  void index_reruns(const std::vector<int>& first_reader) {
    const int nops = int(g_.ops.size());
    reruns_before_.resize(static_cast<std::size_t>(nops));
    for (int p = 0; p < nops; ++p)
      if (at(first_reader, p) >= 0 && !at(hold_all_, p)) at(reruns_before_, at(first_reader, p)).push_back(p);
    for (int i = 0; i < nops; ++i)
      if (selectively_recomputed(i)) at(reruns_before_, i).push_back(i);
  }

  // copies_done: each slot's copy goes after its last forward reader unless a backward reads it.
  void index_copies() {
    const int nops = int(g_.ops.size());
    std::vector<std::vector<int>> last(static_cast<std::size_t>(nops));
    std::vector<std::vector<char>> kept(static_cast<std::size_t>(nops));
    for (int i = 0; i < nops; ++i) {
      const std::size_t n = at(g_.op_inputs, i).size();
      at(last, i).assign(n, i);
      at(kept, i).assign(n, 0);
      for (std::size_t j = 0; j < n; ++j) {
        if (const input_slot c = at(chained_, i)[j]; c.op >= 0) at(last, c.op)[std::size_t(c.input)] = i;
        if (at(reads_, i).input(j) && !regathered(i, j)) at(kept, i)[j] = 1;
        const input_slot c = copy_read(i, j);  // read in place by this backward, unless boxed again for it
        if (c.op >= 0 && at(reads_, i).input(j) && !regathered(c.op, std::size_t(c.input))) at(kept, c.op)[std::size_t(c.input)] = 1;
        // a regathered copy's source, where it is another slot's copy that is not regathered itself
        const input_slot s = regathered(i, j) ? source_copy(i, j) : input_slot{};
        if (s.op >= 0 && !regathered(s.op, std::size_t(s.input))) at(kept, s.op)[std::size_t(s.input)] = 1;
      }
    }
    copies_done_.resize(static_cast<std::size_t>(nops));
    for (int i = 0; i < nops; ++i)
      for (std::size_t j = 0; j < at(last, i).size(); ++j)
        if (!at(kept, i)[j]) at(copies_done_, at(last, i)[j]).push_back({i, int(j)});
  }

  // The copy a regathered slot i, j is boxed from where it is another slot's (op -1: its
  // producer's output).
  input_slot source_copy(int i, std::size_t j) const {
    const input_slot c = at(chained_, i)[j];
    return c.op >= 0 ? copy_read(c.op, std::size_t(c.input)) : input_slot{};
  }

  // reboxed_before: each regathered copy before the first backward that reads it (the latest of
  // its own op and the ops reading it in place), after its source where that is regathered too.
  void index_reboxing() {
    const int nops = int(g_.ops.size());
    std::vector<std::vector<int>> first(static_cast<std::size_t>(nops));
    for (int i = 0; i < nops; ++i) at(first, i).assign(at(g_.op_inputs, i).size(), i);
    for (int i = 0; i < nops; ++i)
      for (std::size_t j = 0; j < at(g_.op_inputs, i).size(); ++j)
        if (const input_slot c = copy_read(i, j); c.op >= 0 && at(reads_, i).input(j) && regathered(c.op, std::size_t(c.input)))
          at(first, c.op)[std::size_t(c.input)] = std::max(at(first, c.op)[std::size_t(c.input)], i);
    for (int r = 0; r < nops; ++r)  // a rerun before op r's backward reads its op's copies then
      for (const int p : at(reruns_before_, r))
        for (std::size_t j = 0; j < at(g_.op_inputs, p).size(); ++j)
          if (const input_slot c = copy_read(p, j); c.op >= 0 && regathered(c.op, std::size_t(c.input)))
            at(first, c.op)[std::size_t(c.input)] = std::max(at(first, c.op)[std::size_t(c.input)], r);
    reboxed_before_.resize(static_cast<std::size_t>(nops));
    for (int i = 0; i < nops; ++i)
      for (std::size_t j = 0; j < at(g_.op_inputs, i).size(); ++j) {
        if (!regathered(i, j)) continue;
        auto& before = at(reboxed_before_, at(first, i)[j]);
        if (const input_slot s = source_copy(i, j); s.op >= 0 && regathered(s.op, std::size_t(s.input))) before.push_back(s);
        before.push_back({i, int(j)});
      }
  }

  const graph& g_;
  recompute_mode mode_;
  std::vector<std::vector<bool>> boxed_;
  std::vector<std::vector<input_slot>> chained_;
  std::vector<std::vector<bool>> regathered_;
  std::vector<std::vector<input_slot>> copies_done_, reboxed_before_;
  std::vector<std::vector<int>> reruns_before_;
  std::vector<char> recomputes_, last_of_block_, read_outside_block_;
  std::map<int, std::vector<int>> block_ops_;
  std::vector<backward_reads> reads_;
  std::vector<int> consumer_slots_, block_consumer_slots_;
  std::vector<char> hold_all_, hold_outside_, hold_inside_;
};

}  // namespace autoddl
