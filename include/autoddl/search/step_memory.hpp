#pragma once
// The memory one device holds during a training step, over time: the executor's allocations and
// frees (runtime/trainer.hpp) replayed in order with the plan's local sizes, and the high-water
// mark sampled where the executor samples it (after every op's forward, recomputation and
// backward, and every gradient synchronisation).
//
// The planner's breakdown (plan_problem::memory_of) is additive: every kept activation, every
// gradient and the largest transient at once, which is what the search can update locally when a
// coordinate moves. The step never holds all of them at once: backward frees an op's activations
// as its gradients appear, and a convolution net's large weight gradients arrive when most
// activations are gone. The replay finds when the peak happens and what is live then, so
//   replay_step_memory(problem, pick).peak() <= problem.memory_of(pick).total()  (less the transient's
//   excess), and it is the figure to compare with a measured peak (Device::bytes_in_use).
//
// What lives, as the executor holds it:
//   stored      parameter shards and optimizer state, between steps (param_memory);
//   per micro-batch: boxed input copies, model inputs (token ids and labels are int64), op
//               outputs until their last reader (or rerun for a reader's backward: swiglu's
//               product, step_schedule::reruns_before), saved products (attention probabilities) and
//               row statistics (layernorm, cross-entropy: statistic_t), output gradients (dy);
//   per step:   gathered parameters (boxed at micro-batch 0, freed at the last one's backward;
//               where the plan reshards after forward, an op's are gathered for its forward and
//               again for its backward or rerun, and freed after each), gradient accumulators in
//               the compute layout, summed gradients, the synchronised gradients (freed when the
//               next step begins);
//   regathered  a copy the plan boxes again for backward (step_schedule::reboxed_before) lives
//               from then until its op's backward; its source is held in its place.
// What a kernel or a boxing path allocates and frees inside itself is not sampled (nor priced
// here: the breakdown's transient term bounds it).
// A pipeline stage runs its range of ops in the 1F1B order (plan/pipeline_order.hpp): several
// micro-batches' buffers live at once, what crosses from the stage before lives until its
// micro-batch's backward, and the gradients sent back to it until the stage's next backward ends
// (the trainer frees them once their sends complete, which it checks after each backward).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "autoddl/index.hpp"
#include "autoddl/ops/work.hpp"
#include "autoddl/plan/pipeline_order.hpp"
#include "autoddl/plan/step_schedule.hpp"
#include "autoddl/search/plan_of.hpp"
#include "autoddl/search/planner.hpp"

namespace autoddl {

/// One device's memory over a step (bytes).
struct step_memory {
  std::int64_t stored = 0;     ///< parameter shards and optimizer state
  std::int64_t peak_live = 0;  ///< the step's own buffers at their high-water mark
  int peak_op = -1;            ///< the op at whose boundary the mark was reached (-1: synchronisation)
  bool peak_in_backward = false;
  /// Of peak_live, the gradients a pipeline stage sent back whose sends the replay holds open
  /// (0 without a pipeline): the executor may have freed them already, so it peaks between
  /// peak() - peak_sent_back and peak().
  std::int64_t peak_sent_back = 0;
  std::int64_t peak() const { return stored + peak_live; }
};

namespace detail {

class step_memory_replay {
 public:
  /// The device runs ops [first_op, end_op) (a pipeline stage's; end_op < 0: to the last op)
  /// with `warm` forwards before its first backward (warm_up_order; 0 without a pipeline).
  /// `slots`: boxed_slots_of(problem, pick), the slots of the plan the executor runs that box
  /// (shared by a pipeline's stages); `schedule`: step_schedule_of(problem, pick, slots) where
  /// the caller has it (null: made here).
  step_memory_replay(const plan_problem& problem, const std::vector<int>& pick, const boxed_slots& slots,
                     int first_op = 0, int end_op = -1, int warm = 0, const step_schedule* schedule = nullptr)
      : problem_(problem),
        model_(problem.model()),
        pick_(pick),
        mesh_(problem.options().mesh),
        elem_(bytes_of(problem.options().type)),
        sum_elem_(gradient_sum_bytes(problem.options().type, problem.options().fp32_gradient_sums)),
        slots_(slots),
        reshard_(problem.options().reshard_after_forward),
        first_(first_op),
        end_(end_op < 0 ? int(problem.model().ops.size()) : end_op),
        warm_(warm) {
    if (!schedule) schedule = &own_schedule_.emplace(step_schedule_of(problem, pick, slots));
    schedule_ = schedule;
    find_boundaries();
  }

  /// The replay. With `skip_repeats` off, every micro-batch is replayed (the tests' reference).
  step_memory run(bool skip_repeats = true) {
    const int np = int(model_.params.size());
    for (int p = 0; p < np; ++p) {
      if (!at(held_, p)) continue;  // another pipeline stage's
      const memory_breakdown m = problem_.param_memory(p, at(pick_, problem_.param_node(p)));
      result_.stored += m.params + m.optimizer;
    }
    const int nops = int(model_.ops.size());
    assign(gathered_, nops, 0);
    assign(param_acc_, nops, std::vector<std::int64_t>{});
    assign(grad_sums_, np, 0);
    const int m = problem_.options().microbatches;
    const std::vector<pipeline_slot> order = warm_up_order(warm_, m);
    const int warm = std::min(warm_, m);
    // A steady pair (a forward, then a backward) that neither gathers (micro-batch 0's forward)
    // nor frees (the last backward) and leaves the carried state as the pair before it left it
    // does the same again from there, with the same samples, so the rest of the steady pairs
    // change nothing: the replay goes on with the last one (a pipeline stage's 128 micro-batches
    // replay as a few).
    const std::size_t last_pair = std::size_t(warm + 2 * (m - 1 - warm));  // slot of F(m-1), B(m-1-warm)
    std::optional<carried> before;
    std::deque<buffers> waiting;
    for (std::size_t x = 0; x < order.size(); ++x) {
      const pipeline_slot& slot = at(order, x);
      if (slot.forward) {
        waiting.push_back(forward(slot.microbatch));
        continue;
      }
      backward(waiting.front(), slot.microbatch == m - 1);
      spare_.push_back(std::move(waiting.front()));  // its vectors serve a later micro-batch
      waiting.pop_front();
      const bool steady = slot.microbatch + warm < m - 1 && x + 1 < last_pair && at(order, x - 1).forward;
      if (!steady) continue;
      if (skip_repeats && before && *before == carried_state() && at(order, x - 1).microbatch > warm) x = last_pair - 1;
      before = carried_state();
    }
    synchronise();
    return result_;
  }

 private:
  struct buffers {  // one micro-batch's, per op
    std::vector<std::vector<std::int64_t>> inputs;  // boxed copies and model inputs
    std::vector<std::int64_t> outputs, saved, dy;
    std::vector<std::vector<std::int64_t>> chained_sums;  // later readers' gradients, per first slot
    std::vector<int> pending;
  };

  const signature& sig(int i) const { return problem_.op_candidate(i, at(pick_, i)); }
  std::int64_t local(const tensor_shape& s, const nd_sbp& l) const { return local_shape(s, layout{l, mesh_}).elements(); }
  std::int64_t input_bytes(int i, std::size_t j) const {
    const std::int64_t e = local(at(model_.ops, i).inputs[j], sig(i).inputs[j]);
    return e * (is_index_input(at(model_.ops, i).kind, j) ? 8 : elem_);
  }
  // Op i's output bytes, found once (every micro-batch's are alike).
  std::int64_t output_bytes(int i) {
    if (outputs_memo_.empty()) assign(outputs_memo_, int(model_.ops.size()), std::int64_t(-1));
    std::int64_t& b = at(outputs_memo_, i);
    if (b < 0) b = compute_output_bytes(i);
    return b;
  }
  // The local bytes of op i's input j (its input gradient's), found once.
  std::int64_t input_local_bytes(int i, std::size_t j) {
    if (inputs_memo_.empty()) resize(inputs_memo_, int(model_.ops.size()));
    std::vector<std::int64_t>& m = at(inputs_memo_, i);
    if (m.empty()) {
      const op_node& n = at(model_.ops, i);
      m.resize(n.inputs.size());
      for (std::size_t x = 0; x < n.inputs.size(); ++x) m[x] = local(n.inputs[x], sig(i).inputs[x]) * elem_;
    }
    return m[j];
  }
  std::int64_t compute_output_bytes(int i) const {
    std::int64_t b = 0;
    for (std::size_t k = 0; k < at(model_.ops, i).outputs.size(); ++k) b += local(at(model_.ops, i).outputs[k], sig(i).outputs[k]);
    return b * elem_;
  }
  std::int64_t param_compute_bytes(int i, std::size_t j) const {
    const op_node& n = at(model_.ops, i);
    return local(at(model_.params, n.param_ids[j]).shape, sig(i).params[j]) * elem_;
  }
  // Gradient sums and synchronised gradients are kept in sum_elem_ bytes (fp32 for bf16 and fp16
  // under plan_options::fp32_gradient_sums, as the executor keeps them).
  std::int64_t param_sum_bytes(int i, std::size_t j) const { return param_compute_bytes(i, j) / elem_ * sum_elem_; }
  std::int64_t grad_sum_bytes(int p) const {
    const param_choice& pc = problem_.param_candidate(p, at(pick_, problem_.param_node(p)));
    return local(at(model_.params, p).shape, pc.grad_sum) * sum_elem_;
  }
  std::int64_t update_bytes(int p) const {
    const param_choice& pc = problem_.param_candidate(p, at(pick_, problem_.param_node(p)));
    return local(at(model_.params, p).shape, pc.update) * sum_elem_;
  }
  // Saved products and row statistics of op i's forward (runtime/kernels: the fused attention
  // one log-sum-exp per row [b, heads, sq] (its output is held as the backward's read), the
  // unfused one its probabilities [b, heads, sq, sk]; layernorm mean and rstd; rmsnorm 1/rms per
  // group; cross-entropy max, sum, target, and for a 16-bit type the loss; experts their gate and up products).
  std::int64_t saved_bytes(int i) {  // found once, as output_bytes
    if (saved_memo_.empty()) assign(saved_memo_, int(model_.ops.size()), std::int64_t(-1));
    std::int64_t& b = at(saved_memo_, i);
    if (b < 0) b = compute_saved_bytes(i);
    return b;
  }
  std::int64_t compute_saved_bytes(int i) const {
    const op_node& n = at(model_.ops, i);
    const std::int64_t stat = statistic_bytes(int(elem_));
    if (n.kind == op_kind::attention) {
      const tensor_shape q = local_shape(n.inputs[0], layout{sig(i).inputs[0], mesh_});
      const tensor_shape k = local_shape(n.inputs[1], layout{sig(i).inputs[1], mesh_});
      const std::int64_t heads = n.attrs.heads * q[2] / n.inputs[0][2];
      return n.attrs.unfused_attention ? q[0] * heads * q[1] * k[1] * elem_ : q[0] * heads * q[1] * stat;
    }
    const tensor_shape x = local_shape(n.inputs[0], layout{sig(i).inputs[0], mesh_});
    const std::int64_t rows = x.rank() > 0 && x[x.rank() - 1] ? x.elements() / x[x.rank() - 1] : 0;
    if (n.kind == op_kind::layernorm) return 2 * rows * stat;
    if (n.kind == op_kind::rmsnorm) {  // 1/rms per normed group: the device's share of the heads
      const int last = n.inputs[0].rank() - 1;
      return rows * (n.attrs.heads / split_factor(sig(i).inputs[0], mesh_, last)) * stat;
    }
    if (n.kind == op_kind::cross_entropy) return 3 * rows * stat + (elem_ < stat ? stat : 0);  // a 16-bit loss's fp32 value
    if (n.kind == op_kind::experts)  // the gate and up products [slot rows, F] of the local experts
      return 2 * rows * local_shape(n.params[0], layout{sig(i).params[0], mesh_})[2] * elem_;
    if (n.kind == op_kind::routed_experts) {  // gate and up [rows, F] and outputs [rows, h] of the expected routed rows
      const op_node l = detail::localize(n, sig(i), mesh_);
      return std::int64_t(std::llround(detail::routed_rows(l) * double(2 * l.params[0][2] + l.inputs[0][2]))) * elem_;
    }
    return 0;
  }

  // What a micro-batch finds and leaves for the next (its own buffers start empty).
  struct carried {
    std::int64_t live = 0, sent_back = 0;
    std::vector<std::int64_t> gathered, grad_sums;
    std::vector<std::vector<std::int64_t>> param_acc;
    friend bool operator==(const carried&, const carried&) = default;
  };
  carried carried_state() const { return {live_, sent_back_, gathered_, grad_sums_, param_acc_}; }

  void add(std::int64_t b) { live_ += b; }
  void drop(std::int64_t& b) {
    live_ -= b;
    b = 0;
  }
  void sample(int op, bool backward) {
    if (live_ <= result_.peak_live) return;
    result_.peak_live = live_;
    result_.peak_sent_back = sent_back_;
    result_.peak_op = op;
    result_.peak_in_backward = backward;
  }

  // Micro-batch k's forward through ops [first_, end_): what earlier stages made arrives first
  // (each as its producer made it, held until this micro-batch's backward is done).
  buffers forward(int k) {
    const int nops = int(model_.ops.size());
    buffers b;
    if (!spare_.empty()) {  // a finished micro-batch's, emptied in place
      b = std::move(spare_.back());
      spare_.pop_back();
      for (auto* slots : {&b.inputs, &b.chained_sums})
        for (std::vector<std::int64_t>& v : *slots) std::fill(v.begin(), v.end(), 0);
    }
    resize(b.inputs, nops);
    assign(b.outputs, nops, 0);
    assign(b.saved, nops, 0);
    assign(b.dy, nops, 0);
    resize(b.chained_sums, nops);
    b.pending = schedule_->consumer_slots();
    for (int o : received_) add(at(b.outputs, o) = first_output_bytes(o));
    for (int i = first_; i < end_; ++i) {
      forward_op(b, i, k);
      release_after_forward(b, i, b.pending, false);
      drop_recomputed(b, i);
      if (reshard_) drop(at(gathered_, i));
      sample(i, false);
    }
    return b;
  }

  void forward_op(buffers& b, int i, int k) {
    const op_node& n = at(model_.ops, i);
    auto& in = at(b.inputs, i);
    in.assign(n.inputs.size(), 0);
    for (std::size_t j = 0; j < n.inputs.size(); ++j) {
      const bool model_input = at(model_.op_inputs, i)[j].op < 0;
      if (model_input || at(slots_.inputs, i)[j]) add(in[j] = input_bytes(i, j));
    }
    if (k == 0 || reshard_) gather_params(i);
    run_forward(b, i);
  }
  // Op i's gathered parameters (the slots whose forward path boxes), unless held already.
  void gather_params(int i) {
    if (at(gathered_, i) != 0) return;
    for (std::size_t j = 0; j < at(model_.ops, i).param_ids.size(); ++j)
      if (at(slots_.param_forward, i)[j]) at(gathered_, i) += param_compute_bytes(i, j);
    add(at(gathered_, i));
  }
  // op_forward: new outputs and saved products replace what op i held.
  void run_forward(buffers& b, int i) {
    drop(at(b.outputs, i));
    drop(at(b.saved, i));
    add(at(b.outputs, i) = output_bytes(i));
    add(at(b.saved, i) = saved_bytes(i));
  }

  // As the executor's release_after_forward: unread copies, then producers nobody holds.
  void release_after_forward(buffers& b, int i, std::vector<int>& pending, bool rerun) {
    const step_schedule& sc = *schedule_;
    for (const input_slot c : sc.copies_done(i))
      if (rerun || !sc.reruns_from(c.op, std::size_t(c.input))) drop(at(b.inputs, c.op)[std::size_t(c.input)]);
    auto free_unheld = [&](int p) {
      if (!sc.held(p, rerun)) drop(at(b.outputs, p));
    };
    for (std::size_t j = 0; j < at(model_.op_inputs, i).size(); ++j) {
      const int p = at(model_.op_inputs, i)[j].op;
      if (p < 0 || (rerun && !sc.inside_block(i, j))) continue;
      if (--at(pending, p) == 0) free_unheld(p);
    }
    if (at(pending, i) == 0 && i != model_.loss_op) free_unheld(i);
  }

  void drop_recomputed(buffers& b, int i) {
    const step_schedule& sc = *schedule_;
    if (!sc.recomputes(i)) return;
    if (sc.selectively_recomputed(i)) {
      drop(at(b.saved, i));
      return;
    }
    if (!sc.last_of_block(i)) return;
    for (int o : sc.block_ops(at(model_.block, i))) {
      drop(at(b.saved, o));
      if (!sc.read_outside_block(o)) drop(at(b.outputs, o));
      for (std::size_t j = 0; j < at(b.inputs, o).size(); ++j)
        if (sc.inside_block(o, j)) drop(at(b.inputs, o)[j]);
    }
  }

  void recompute_block(buffers& b, int blk) {
    std::vector<int> pending = schedule_->block_consumer_slots();
    for (int o : schedule_->block_ops(blk)) {
      for (std::size_t j = 0; j < at(b.inputs, o).size(); ++j)
        if (schedule_->inside_block(o, j) && at(slots_.inputs, o)[j]) {
          drop(at(b.inputs, o)[j]);
          add(at(b.inputs, o)[j] = input_bytes(o, j));
        }
      gather_params(o);
      run_forward(b, o);
      release_after_forward(b, o, pending, true);
      sample(o, true);
    }
  }

  // The backward of the micro-batch whose buffers are b: the loss's seed on the last stage, the
  // gradients of what went to the next stage, then ops [first_, end_) in reverse; what came from
  // the stage before (its outputs and their gradients, sent back) goes at the end.
  void backward(buffers& b, bool last) {
    if (end_ == int(model_.ops.size())) add(at(b.dy, model_.loss_op) = output_bytes(model_.loss_op));
    for (int o : sent_)
      if (at(b.dy, o) == 0) add(at(b.dy, o) = first_output_bytes(o));
    for (int i = end_ - 1; i >= first_; --i) {
      if (schedule_->fully_recomputed(i) && schedule_->last_of_block(i)) recompute_block(b, at(model_.block, i));
      if (at(b.dy, i) == 0) add(at(b.dy, i) = output_bytes(i));
      for (const input_slot s : schedule_->reboxed_before(i))
        if (std::int64_t& copy = at(b.inputs, s.op)[std::size_t(s.input)]; copy == 0) add(copy = input_bytes(s.op, std::size_t(s.input)));
      if (reshard_) gather_params(i);
      for (const int o : schedule_->reruns_before(i)) run_forward(b, o);  // as the trainer's reruns
      backward_op(b, i, last);
    }
    // The gradients sent back live until their sends complete, which the trainer checks after each
    // backward: they are held until this stage's next backward ends (the last ones: the step's
    // sends are finished after its last backward). An upper bound by at most one micro-batch's.
    drop(sent_back_);
    for (int o : received_) {
      sent_back_ += at(b.dy, o);
      at(b.dy, o) = 0;
      drop(at(b.outputs, o));
    }
    if (last) drop(sent_back_);
  }

  // Op i's backward: its input gradients (dual of the input layout: the input's local size) go
  // to their producers' dy (a chained slot's to its first reader's input gradient, which that
  // reader adds to its own), its parameter gradients to the accumulators; then its buffers go.
  void backward_op(buffers& b, int i, bool last) {
    const op_node& n = at(model_.ops, i);
    std::int64_t grads = 0;
    for (std::size_t j = 0; j < n.inputs.size(); ++j)
      if (at(model_.op_inputs, i)[j].op >= 0) grads += input_local_bytes(i, j);
    for (std::size_t j = 0; j < n.param_ids.size(); ++j) grads += param_compute_bytes(i, j);
    add(grads);
    sample(i, true);
    for (std::size_t j = 0; j < n.inputs.size(); ++j) {
      const int p = at(model_.op_inputs, i)[j].op;
      if (p < 0) continue;
      if (auto& sums = at(b.chained_sums, i); j < sums.size()) drop(sums[j]);
      live_ -= input_local_bytes(i, j);
      if (const input_slot c = at(slots_.chained, i)[j]; c.op >= 0) {
        auto& sums = at(b.chained_sums, c.op);
        if (sums.size() <= std::size_t(c.input)) sums.resize(std::size_t(c.input) + 1, 0);
        std::int64_t& sum = sums[std::size_t(c.input)];
        if (sum == 0) add(sum = local(at(model_.ops, c.op).inputs[std::size_t(c.input)], sig(c.op).inputs[std::size_t(c.input)]) * elem_);
        continue;
      }
      // the boxed gradient becomes p's dy (of its first output where p is another stage's)
      if (at(b.dy, p) == 0) add(at(b.dy, p) = p < first_ ? first_output_bytes(p) : output_bytes(p));
    }
    for (std::size_t j = 0; j < n.param_ids.size(); ++j) {
      live_ -= param_compute_bytes(i, j);
      add_param_gradient(i, j, last);
    }
    drop(at(b.dy, i));
    drop(at(b.outputs, i));
    drop(at(b.saved, i));
    for (std::int64_t& x : at(b.inputs, i)) drop(x);
    if (last || reshard_) drop(at(gathered_, i));
    sample(i, true);
  }

  void add_param_gradient(int i, std::size_t j, bool last) {
    const int p = at(model_.ops, i).param_ids[j];
    if (!at(slots_.param_backward, i)[j]) {
      if (at(grad_sums_, p) == 0) add(at(grad_sums_, p) = grad_sum_bytes(p));
      return;
    }
    auto& acc = at(param_acc_, i);
    if (acc.size() <= j) acc.resize(j + 1, 0);
    if (acc[j] == 0) add(acc[j] = param_sum_bytes(i, j));
    if (!last) return;
    drop(acc[j]);
    if (at(grad_sums_, p) == 0) add(at(grad_sums_, p) = grad_sum_bytes(p));
  }

  // Each summed gradient synchronised to the update layout replaces the sum. (The optimizer's
  // slices of ZeRO stages 1 and 2 are freed before the next sample.)
  void synchronise() {
    for (int p = 0; p < int(model_.params.size()); ++p) {
      if (!at(held_, p)) continue;
      drop(at(grad_sums_, p));
      add(update_bytes(p));
      sample(-1, true);
    }
  }

  // As the trainer's stage boundaries: the first outputs made before first_ that ops from first_
  // on read (received_), those made before end_ read after it (sent_), and the parameters the
  // stage's ops use (held_).
  void find_boundaries() {
    const int nops = int(model_.ops.size());
    std::vector<int> furthest(static_cast<std::size_t>(nops), -1);
    for (int i = 0; i < nops; ++i)
      for (const tensor_ref& r : at(model_.op_inputs, i))
        if (r.op >= 0) at(furthest, r.op) = std::max(at(furthest, r.op), i);
    for (int o = 0; o < nops; ++o) {
      if (o < first_ && at(furthest, o) >= first_) received_.push_back(o);
      if (o >= first_ && o < end_ && at(furthest, o) >= end_) sent_.push_back(o);
    }
    assign(held_, int(model_.params.size()), char(0));
    for (int i = first_; i < end_; ++i)
      for (int p : at(model_.ops, i).param_ids) at(held_, p) = 1;
  }
  std::int64_t first_output_bytes(int o) const {
    return local(at(at(model_.ops, o).outputs, 0), at(sig(o).outputs, 0)) * elem_;
  }

  const plan_problem& problem_;
  const graph& model_;
  const std::vector<int>& pick_;
  mesh_shape mesh_;
  std::int64_t elem_;
  std::int64_t sum_elem_;  ///< bytes of a gradient sum's element
  const boxed_slots& slots_;  ///< which slots of pick's plan box (the paths the executor runs)
  bool reshard_;              ///< plan::reshard_after_forward
  std::optional<step_schedule> own_schedule_;
  const step_schedule* schedule_ = nullptr;  ///< own_schedule_'s or the caller's
  std::vector<std::int64_t> outputs_memo_, saved_memo_;  ///< output_bytes, saved_bytes per op (-1: not yet)
  std::vector<std::vector<std::int64_t>> inputs_memo_;  ///< input_local_bytes per op and input
  std::vector<buffers> spare_;  ///< finished micro-batches' buffers, for the next forwards
  int first_, end_, warm_;
  std::vector<int> received_, sent_;
  std::vector<char> held_;
  std::vector<std::int64_t> gathered_, grad_sums_;
  std::vector<std::vector<std::int64_t>> param_acc_;
  std::int64_t live_ = 0;
  std::int64_t sent_back_ = 0;  ///< gradients sent to the stage before, their sends not yet completed
  step_memory result_;
};

}  // namespace detail

/// The step's memory on one device under `pick` (per node of problem.untied()), replayed in the
/// executor's order. Example: a data-parallel MLP's peak is its stored state plus the first
/// micro-batch's activations at the loss, plus the output gradients then.
inline step_memory replay_step_memory(const plan_problem& problem, const std::vector<int>& pick) {
  const boxed_slots slots = boxed_slots_of(problem, pick);
  return detail::step_memory_replay(problem, pick, slots).run();
}

/// The same for a device that runs ops [first_op, end_op) only, `warm` forwards ahead of its
/// first backward (warm_up_order): a pipeline stage (search/pipeline.hpp, replay_stage_memory).
/// It keeps the parameters its ops use and, per micro-batch in flight, what arrives from the
/// stage before until that micro-batch's backward is done.
/// `slots` is boxed_slots_of(problem, pick) and `schedule` step_schedule_of(problem, pick, slots)
/// (null: made here): the stages of one pipeline replay one plan's slots and one schedule.
inline step_memory replay_step_memory(const plan_problem& problem, const std::vector<int>& pick, const boxed_slots& slots,
                                      int first_op, int end_op, int warm, const step_schedule* schedule = nullptr) {
  return detail::step_memory_replay(problem, pick, slots, first_op, end_op, warm, schedule).run();
}

}  // namespace autoddl
