#pragma once
// What a training step keeps and reruns, op by op (runtime/trainer.hpp executes it, search/step_memory.hpp replays its allocations): which ops
// rerun their forward in backward under the plan's recomputation, and which op outputs must
// outlive their consumers' forwards. It depends only on the graph, the recomputation and which
// input edges box (a boxed input is a copy; an unboxed one is read in place from its producer).
//
// Rules (the planner prices the same, search/planner.hpp):
//   selective  an attention op inside a repeated block reruns its forward before its backward;
//   full       every op of a repeated block reruns, in order, before the block's backward.
// An op output is held from forward to backward by whoever reads it then:
//   hold_all      any reader: its own backward (relu, softmax read their output), a consumer's
//                 backward reading it in place, a fully recomputed consumer in another block
//                 rerunning from it;
//   hold_outside  readers in another block only (what a fully recomputed block keeps);
//   hold_inside   its own backward and readers in its block (after the block's rerun).
// A boxed copy is freed after the forward of the last op that reads it (its own op, or a later
// reader chained from its slot: plan/plan.hpp) unless a backward reads it in place.
#include <cstddef>
#include <map>
#include <vector>

#include "autoddl/cost/memory.hpp"
#include "autoddl/index.hpp"
#include "autoddl/models/graph.hpp"
#include "autoddl/ops/work.hpp"
#include "autoddl/plan/plan.hpp"

namespace autoddl {

class step_schedule {
 public:
  /// `input_boxed[i][j]`: whether input j of op i is boxed (copied) rather than read in place;
  /// `chained[i][j]`: the slot it boxes from instead of its producer (op -1: none).
  step_schedule(const graph& g, recompute_mode mode, const std::vector<std::vector<bool>>& input_boxed,
                const std::vector<std::vector<input_slot>>& chained)
      : g_(g), mode_(mode), boxed_(input_boxed), chained_(chained) {
    index_blocks();
    index_reads();
    index_copies();
  }
  /// The schedule plan `p` runs (p's model must outlive it).
  explicit step_schedule(const plan& p) : step_schedule(p.g(), p.recompute, p.boxed_inputs(), p.chains()) {}

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

  void index_reads() {
    const int nops = int(g_.ops.size());
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
        const bool rerun_reads = direct && reruns_from(i, j);
        if (!bwd_reads && !rerun_reads) continue;
        at(hold_all_, p) = 1;
        (same_block ? at(hold_inside_, p) : at(hold_outside_, p)) = 1;
      }
    }
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
        if (at(reads_, i).input(j)) at(kept, i)[j] = 1;
        if (const input_slot c = at(chained_, i)[j]; c.op >= 0) at(last, c.op)[std::size_t(c.input)] = i;
        if (const input_slot c = copy_read(i, j); c.op >= 0 && at(reads_, i).input(j)) at(kept, c.op)[std::size_t(c.input)] = 1;
      }
    }
    copies_done_.resize(static_cast<std::size_t>(nops));
    for (int i = 0; i < nops; ++i)
      for (std::size_t j = 0; j < at(last, i).size(); ++j)
        if (!at(kept, i)[j]) at(copies_done_, at(last, i)[j]).push_back({i, int(j)});
  }

  const graph& g_;
  recompute_mode mode_;
  std::vector<std::vector<bool>> boxed_;
  std::vector<std::vector<input_slot>> chained_;
  std::vector<std::vector<input_slot>> copies_done_;
  std::vector<char> recomputes_, last_of_block_, read_outside_block_;
  std::map<int, std::vector<int>> block_ops_;
  std::vector<backward_reads> reads_;
  std::vector<int> consumer_slots_, block_consumer_slots_;
  std::vector<char> hold_all_, hold_outside_, hold_inside_;
};

}  // namespace autoddl
