#pragma once
// A training step of any valid plan on one device of the mesh: forward, loss, backward,
// gradient boxing to the parameters' storage layouts, optimizer step (DESIGN.md).
//
// Every tensor that crosses an edge of the model is boxed by exactly the path the planner
// priced (plan_problem::edge_paths): activations from the producer's output layout to the
// consumer's input layout, their gradients from dual(input) back to dual(output), parameters
// from storage to compute layout, their gradients from dual(compute) to the parameter's summing
// layout. Gradients reaching an activation from several consumers (residuals) are added in the
// common layout; a parameter's gradient contributions are summed in its summing layout and boxed to
// storage once (plan_problem::param_sync_path). Bytes sent on the mesh axes per step therefore
// equal the plan's predicted bytes.
//
// The step's schedule is the plan's (plan_options::microbatches, ::recompute). The graph is one
// micro-batch: a step runs forward and backward m times, micro-batch k reading rows
// [k mb, (k+1) mb) of the step's global batch (data.hpp, micro_batch_shard), the loss seeded
// with 1/m. Parameters are boxed storage -> compute once per step and the boxed copy kept for
// every micro-batch; a parameter edge's gradient contributions are summed over the micro-batches
// in dual(compute) and boxed to the summing layout once, in the last micro-batch's backward.
// Recomputation frees in forward what the plan does not keep and recomputes it in backward:
//   selective  an attention op inside a repeated block drops its saved products (the
//              probabilities) after forward and reruns its forward just before its backward;
//   full       once a repeated block's forward is done, its ops drop everything but the outputs
//              that ops outside the block read, and the boxed copies of edges inside the block;
//              before the block's backward its ops rerun forward, edges inside it reboxed.
// Dropout masks are keyed by (seed, op, global index), so a rerun forward is the same forward.
// From an op's forward to its backward the step keeps only what the backward reads
// (backward_reads_of, op_kernels.hpp; what the planner prices as the op's activations): once an
// op's forward has run, its boxed input copies that its backward does not read are freed, and so
// is a producer's output once its last consumer has run forward, unless a backward reads it in
// place (its own: relu, softmax; a consumer's over an edge that does not box) or a fully
// recomputed block reruns from it. In backward every op's forward products, boxed inputs and
// gradient are freed after its own backward.
//
// A pipeline stage (pipeline_stage: the plan is one stage's layouts on the stage mesh, the
// communicator that stage's) runs its ops [first_ops[s], first_ops[s+1]) in the 1F1B order
// (pipeline_schedule.hpp). Before a micro-batch's forward it receives from stage s-1 every output
// of an earlier stage that an op of its own or of a later stage reads (in its producer's layout,
// as it was made: the consumer boxes it); after the forward it sends the same to stage s+1. The
// gradients go back the same way: received from s+1 before the backward (added to what its own
// consumers give), sent to s-1 after it. Sends are posted and completed later, receives block.
// A stage keeps only the parameters its ops use; a parameter used on several stages (GPT's
// tied wte) is kept on each, each synchronises its own uses' gradient, and they exchange and add
// the synchronised gradients (in stage order, so every copy stays equal). Bytes sent per step
// count these messages too (what search/pipeline.hpp prices per stage).
//
// Where the Device and its communicator offer a side queue (SideQueue<D, M>,
// backend/communicator.hpp: cuda_device with nccl_mesh_comm, not cpu_device with MPI), the boxing
// of each parameter edge's summed gradient in the last micro-batch's backward, and its addition
// into the parameter's summing layout, go on the side queue, so the remaining ops' backward runs
// beside them (what the cost model's overlap_rule::grad_sync_with_backward prices). Those boxed
// sums are kept apart (boxed_sums_) from the contributions added on the main queue until the
// join after backward (before the loss all-reduce) adds them in; only then do the tied parameters'
// synchronisation, the pipeline's tied exchange, the finiteness check and the optimizer read a
// gradient. Everything a side-queue step uses lives, unwritten by the main queue, until that join:
// the summed contribution is moved into the side queue's boxing, whose temporaries die while the
// side queue is current (released in its order), and boxed_sums_ is touched only there and after
// the join. Without a side queue every step runs in program order on one queue, as before.
//
// Every tensor of the model (parameters, gradients, optimizer state, activations, boxing
// buffers) is a buffer of the Device; accumulation, zeroing and packing are its primitives and
// collectives run on its memory (backend/device.hpp, communicator.hpp). The host touches values
// only where a user reads them: the synthetic inputs it generates and uploads, the initial
// parameters, the loss, the finiteness flag, and the shards a caller downloads (param_shard, ...).
#include <algorithm>
#include <chrono>
#include <deque>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "autoddl/backend/communicator.hpp"
#include "autoddl/backend/device.hpp"
#include "autoddl/cost/memory.hpp"
#include "autoddl/index.hpp"
#include "autoddl/runtime/boxing.hpp"
#include "autoddl/runtime/data.hpp"
#include "autoddl/runtime/op_instance.hpp"
#include "autoddl/runtime/op_kernels.hpp"
#include "autoddl/runtime/pipeline_schedule.hpp"
#include "autoddl/search/plan_paths.hpp"
#include "autoddl/search/planner.hpp"
#include "autoddl/search/step_schedule.hpp"

namespace autoddl {

namespace detail {
// What a non-blocking send of C returns (C::isend), or a placeholder where C has none (then the
// trainer refuses pipelines).
template <class C, class T>
struct send_request_of {
  struct type {
    bool test() { return true; }
    void wait() {}
  };
};
template <class C, class T>
  requires requires(C& c, std::span<const T> v) { c.isend(v, 0, 0); }
struct send_request_of<C, T> {
  using type = decltype(std::declval<C&>().isend(std::declval<std::span<const T>>(), 0, 0));
};
}  // namespace detail

struct train_options {
  optimizer opt = optimizer::adam;
  double lr = 1e-3;
  std::uint64_t seed = 1;
  bool keep_outputs = false;  ///< keep every op's output shard of the last step (for checks)
  /// Stop with autoddl::error, on every rank alike, when the loss or a parameter's synchronised
  /// gradient holds NaN or Inf (naming the parameter and the ops that use it); costs one scan of
  /// the gradient shards and one all-reduce of a double per step.
  bool check_finite = true;
  /// Sample the device's bytes in use at every op boundary for last_step_peak_bytes() (on the
  /// CPU glibc's mallinfo2: a few microseconds a sample); false reports 0.
  bool measure_memory = true;
  /// A byte-level text the index inputs are read from (a language model's ids and labels, vocab
  /// 256), instead of the synthetic task; not owned, must outlive the trainer.
  const text_corpus* text = nullptr;
};

/// Where one device's last step spent its time (wall seconds, steady clock), op by op as the
/// planner prices it: each op's kernels (forward + backward) and its boxings (the paths of its
/// input and parameter edges, both directions), then the steps the planner prices per model.
struct step_profile {
  std::vector<double> kernel_s;  ///< per op, all micro-batches: op_forward (twice where recomputed) + op_backward
  std::vector<double> boxing_s;  ///< per op: boxing of its inputs (reboxed where recomputed), parameters, gradients
  double inputs_s = 0;           ///< synthetic model inputs generated (not priced: the data loader's share)
  double accumulate_s = 0;       ///< gradient contributions added (residuals, tied parameters)
  double loss_s = 0;             ///< the global loss all-reduce (reported, outside the plan's bytes)
  double sync_s = 0;             ///< tied parameters' one synchronisation
  /// With a side queue (SideQueue<D, M>): the host's time in the join after backward, before the
  /// loss all-reduce (a queued wait on a GPU; the deferred gradient boxings themselves on the
  /// opaque test device); counted in none of the other fields.
  /// The gradient boxings' share of boxing_s is then only the time to queue them.
  double side_join_s = 0;
  double update_s = 0;           ///< optimizer update
  double pipe_wait_s = 0;        ///< a pipeline stage waiting for its neighbours' activations and gradients
  double total_s = 0;            ///< the whole train_step
};

/// One device's part of training `problem`'s model under the plan `pick` (per node of
/// problem.untied()). A step is forward, loss and backward of each of the plan's micro-batches,
/// the one synchronisation of each tied parameter's summed gradient, and the optimizer update on
/// the storage shards.
template <class T, Device D, MeshCommunicator M>
class trainer {
  using buffer = buffer_t<D, T>;
  using index_buffer = buffer_t<D, std::int64_t>;

 public:
  /// The communicator type of a pipeline's stage axis: the mesh communicator's axis type.
  using pipe_comm = std::remove_cvref_t<decltype(std::declval<M&>().world())>;

  /// `stage`: this device's stage of a pipeline whose every stage runs `pick` on problem's mesh
  /// (the stage mesh); nullopt: the whole model. Throws error on a stage that does not fit the
  /// model or the pipe, or a communicator without non-blocking sends.
  trainer(const plan_problem& problem, std::vector<int> pick, D& dev, M& comm, train_options options = {},
          std::optional<pipeline_stage<pipe_comm>> stage = std::nullopt)
      : problem_(problem),
        model_(problem.model()),
        pick_(std::move(pick)),
        dev_(dev),
        comm_(comm),
        options_(options),
        paths_(problem_, pick_) {
    if (!(comm_.shape() == problem_.options().mesh))
      detail::fail<layout_error>("the plan is for mesh " + to_string(problem_.options().mesh) +
                                 " but the communicator spans " + to_string(comm_.shape()));
    if (bytes_of(problem_.options().type) != int(sizeof(T)))
      detail::fail<error>("the plan is priced in " + std::string(to_string(problem_.options().type)) + " (" +
                          std::to_string(bytes_of(problem_.options().type)) + "-byte elements) but this trainer trains " +
                          std::to_string(sizeof(T)) + "-byte elements; plan with the dtype it trains (plan_options::type)");
    schedule_.emplace(model_, recompute(), paths_.boxed_inputs());
    input_kinds_ = input_kinds(model_);
    if (options_.text) check_text_model(model_, *options_.text);
    end_op_ = int(model_.ops.size());
    if (stage) set_stage(*stage);
    init_parameters();
  }

  const signature& sig(int op) const { return at(problem_.op_candidates(op), at(pick_, op)); }
  /// From the next step on, runs every op through a typed model's compiled instance
  /// (runtime/typed_program.hpp): kernel contexts from the instance's constant local shapes,
  /// kernels chosen at compile time; an empty program goes back to the dynamic dispatch.
  /// @throws layout_error when the program has another op count, or an op's instance has
  /// another signature than the plan's pick.
  void run_instances(op_program<T, D> program) {
    if (!program.empty() && program.size() != model_.ops.size())
      detail::fail<layout_error>("the typed program has " + std::to_string(program.size()) + " ops but the plan's model has " +
                                 std::to_string(model_.ops.size()));
    for (int i = 0; i < int(program.size()); ++i)
      if (!(at(program, i).sig == sig(i)))
        detail::fail<layout_error>("op '" + at(model_.ops, i).name + "': the typed program's instance runs " +
                                   to_string(at(model_.ops, i), at(program, i).sig) + " but the plan picked " +
                                   to_string(at(model_.ops, i), sig(i)));
    program_ = std::move(program);
  }
  /// Whether ops run through a typed model's instances (run_instances).
  bool runs_instances() const { return !program_.empty(); }
  /// This device's pipeline stage (0 without a pipeline) and the stages.
  int stage() const { return stage_; }
  int stages() const { return stages_; }
  /// Whether this device keeps parameter p (it does unless a pipeline stage's ops do not use it).
  bool holds_param(int p) const { return at(held_, p) != 0; }
  const param_choice& param_layouts(int p) const {
    return at(problem_.param_candidates(p), at(pick_, problem_.param_node(p)));
  }
  const nd_sbp& storage(int p) const { return param_layouts(p).storage; }
  /// The layout of parameter p's synchronised gradient and optimizer state (== storage except
  /// under ZeRO stages 1 and 2, where it is storage with its B axes split).
  const nd_sbp& update_layout(int p) const { return param_layouts(p).update; }
  /// This device's shard of parameter p (storage layout) and of its last gradient (update
  /// layout), downloaded (empty where the device does not hold p).
  std::vector<T> param_shard(int p) const { return host_copy(at(params_, p)); }
  std::vector<T> grad_shard(int p) const { return host_copy(at(grads_, p)); }
  /// Parameter p's optimizer state on this device (update layout), downloaded: k = 0 Adam's first
  /// moment (SGD's velocity), k = 1 Adam's second moment (empty for SGD).
  std::vector<T> moment_shard(int p, int k) const { return host_copy(at(k == 0 ? first_moment_ : second_moment_, p)); }
  /// Optimizer steps taken so far (Adam's bias correction counts them).
  std::int64_t steps_done() const { return steps_done_; }
  /// Replaces parameter p's storage shard and optimizer state with host values (a checkpoint's):
  /// sizes as param_shard and moment_shard give them. @throws error on a size mismatch.
  void restore_shard(int p, const std::vector<T>& param, const std::vector<T>& m, const std::vector<T>& v) {
    auto put = [&](buffer& b, const std::vector<T>& h, const char* what) {
      if (h.size() != b.size())
        detail::fail<error>("restoring " + std::string(what) + " of parameter '" + at(model_.params, p).name + "': " +
                            std::to_string(h.size()) + " values for a shard of " + std::to_string(b.size()));
      if (!h.empty()) dev_.upload(std::span<const T>(h), view(b));
    };
    put(at(params_, p), param, "the value");
    put(at(first_moment_, p), m, "the first moment");
    put(at(second_moment_, p), v, "the second moment");
  }
  /// Sets the optimizer steps taken (a resumed run continues Adam's bias correction).
  void restore_steps_done(std::int64_t n) { steps_done_ = n; }
  /// This device's shard of op `op`'s output in the last step (train_options::keep_outputs;
  /// empty for an op of another pipeline stage).
  std::vector<T> output_shard(int op) const { return host_copy(at(kept_outputs_, op)); }
  /// Bytes this device sent on the mesh axes (and a pipeline's stage axis) during the last step
  /// (the plan's bytes).
  std::int64_t last_step_bytes() const { return last_bytes_; }
  /// Where the last step's time went on this device.
  const step_profile& last_step_profile() const { return profile_; }
  /// This device's peak memory during the last step, in bytes: the parameter shards and optimizer
  /// state it stores, plus the high-water mark over the step of the Device's bytes in use
  /// (Device::bytes_in_use; on the CPU the heap, glibc mallinfo2: uordblks + hblkhd) above their
  /// level at the step's start, sampled at every op boundary of forward, recomputation and
  /// backward and after every gradient synchronisation. The step's gradients, boxed copies, kept
  /// activations and gradient accumulators are in that mark; what a kernel or a boxing path
  /// allocates and frees within itself is not. 0 where the device reports none, or with
  /// measure_memory off.
  std::int64_t last_step_peak_bytes() const { return peak_bytes_; }

  /// Runs training step `step_index` (0-based: it keys the data and dropout) and returns the
  /// global loss (the mean of its micro-batches' losses), the same on every device.
  double train_step(std::int64_t step_index) {
    const std::int64_t bytes_before = axis_bytes();
    const auto start = clock::now();
    begin_step();
    const int m = microbatches();
    const std::int64_t pipe_before = pipe_bytes_;
    double local_loss = 0;
    for (const pipeline_slot& x : one_f_one_b(stages_, stage_, m)) local_loss += run_slot(step_index, x);
    finish_sends();
    // Backward is all queued: the main queue waits for the side queue's gradient boxings here, so
    // that no collective of another communicator (the loss's, over the world) runs beside them.
    join_gradient_boxing();
    auto t = clock::now();
    const double loss = global_loss(local_loss) / m;
    if (options_.check_finite && !std::isfinite(loss))
      detail::fail<error>("step " + std::to_string(step_index) + ": the loss is " + (std::isnan(loss) ? "NaN" : "Inf") +
                          "; training stopped (lower the learning rate or check the inputs; train_options::check_finite "
                          "= false, autoddl-train --no-check-finite, turns this check off)");
    profile_.loss_s = lap(t);
    synchronise_gradients();
    if (options_.check_finite) check_gradients_finite(step_index);
    profile_.sync_s = lap(t);
    optimizer_update();
    sample_memory();
    profile_.update_s = lap(t);
    profile_.total_s = lap(t = start);
    last_bytes_ = axis_bytes() - bytes_before + pipe_bytes_ - pipe_before;
    peak_bytes_ = options_.measure_memory ? stored_bytes() + peak_live_ : 0;
    return loss;
  }

 private:
  using clock = std::chrono::steady_clock;
  /// Seconds since t; t moves to now.
  static double lap(clock::time_point& t) {
    const auto now = clock::now();
    const double s = std::chrono::duration<double>(now - t).count();
    t = now;
    return s;
  }

  /// What lives from an op's forward to its backward during one micro-batch.
  using send_request = typename detail::send_request_of<pipe_comm, T>::type;
  static constexpr bool pipe_sends = requires(pipe_comm& c, std::span<const T> v) { c.isend(v, 0, 0); };
  static constexpr int tag_activation = 1, tag_gradient = 2, tag_tied = 3;

  struct step_buffers {
    std::vector<std::vector<buffer>> inputs;  ///< boxed copies (empty: read in place)
    std::vector<index_buffer> indices;        ///< token ids and labels per op
    std::vector<kernel_context<T>> ctx;
    std::vector<forward_result<D, T>> fwd;  ///< outputs empty once freed (see release_after_forward)
    std::vector<int> pending;               ///< per op: consumer slots whose forward has yet to read its output
    std::vector<send_request> sends;        ///< outputs sent to the next stage (held in fwd until done)
  };

  int microbatches() const { return problem_.options().microbatches; }
  recompute_mode recompute() const { return problem_.options().recompute; }

  static void release(buffer& v) { v = buffer{}; }

  std::span<T> view(buffer& b) { return dev_.view(b); }
  std::span<const T> view(const buffer& b) const { return std::as_const(dev_).view(b); }
  /// A device copy of b.
  buffer clone(const buffer& b) {
    buffer c = dev_.template alloc<T>(b.size());
    dev_.copy(view(b), view(c));
    return c;
  }
  /// b downloaded (what a caller reads).
  std::vector<T> host_copy(const buffer& b) const {
    std::vector<T> h(b.size());
    dev_.download(view(b), std::span<T>(h));
    return h;
  }
  /// Host values uploaded into a new buffer.
  template <class U>
  buffer_t<D, U> uploaded(const std::vector<U>& h) {
    buffer_t<D, U> b = dev_.template alloc<U>(h.size());
    dev_.upload(std::span<const U>(h), dev_.view(b));
    return b;
  }

  // Frees what the last step left (its gradients, kept outputs) and starts the memory mark.
  void begin_step() {
    const int nops = int(model_.ops.size());
    profile_ = step_profile{};
    assign(profile_.kernel_s, nops, 0.0);
    assign(profile_.boxing_s, nops, 0.0);
    for (auto& g : grads_) release(g);
    for (auto& g : grad_sums_) release(g);
    kept_outputs_.clear();
    if (options_.keep_outputs) resize(kept_outputs_, nops);
    gathered_.clear();  // (buffers may be move-only: no assign)
    resize(gathered_, nops);
    param_grad_acc_.clear();
    resize(param_grad_acc_, nops);
    for (int i = 0; i < nops; ++i) {
      at(gathered_, i).resize(at(model_.ops, i).param_ids.size());
      at(param_grad_acc_, i).resize(at(model_.ops, i).param_ids.size());
    }
    peak_live_ = 0;
    heap_at_start_ = heap_in_use();
  }

  // One slot of this stage's 1F1B order (one forward and backward after another without a
  // pipeline): a forward's micro-batch waits, in order, for its backward. Returns this device's
  // part of a forward's loss (global_loss sums the parts).
  double run_slot(std::int64_t step_index, const pipeline_slot& x) {
    if (!x.forward) {
      backward(waiting_.front(), x.microbatch);
      waiting_.pop_front();
      return 0;
    }
    waiting_.push_back(forward_micro_batch(step_index, x.microbatch));
    const step_buffers& b = waiting_.back();
    return last_stage() ? local_loss(output(b, model_.loss_op), sig(model_.loss_op).outputs[0]) : 0;
  }

  // Micro-batch k's forward through this stage's ops: what earlier stages made is received
  // first, what later stages read is sent after.
  step_buffers forward_micro_batch(std::int64_t step_index, int k) {
    const int nops = int(model_.ops.size());
    const bool keep = options_.keep_outputs && k == microbatches() - 1;
    step_buffers b;
    resize(b.inputs, nops);
    resize(b.indices, nops);
    resize(b.ctx, nops);
    resize(b.fwd, nops);  // never reallocates: outputs are read in place
    b.pending = schedule().consumer_slots();
    receive_activations(b);
    for (int i = first_op_; i < end_op_; ++i) {
      forward_op(b, i, step_index, k);
      if (keep) at(kept_outputs_, i) = clone(output(b, i));
      release_after_forward(b, i, b.pending, false);
      drop_recomputed(b, i);
      sample_memory();
    }
    send_activations(b);
    return b;
  }

  static const buffer& output(const step_buffers& b, int op) { return at(at(b.fwd, op).outputs, 0); }

  const step_schedule& schedule() const { return *schedule_; }

  // After op i's forward (rerun: its rerun in a fully recomputed block's backward): its boxed
  // input copies that no backward or rerun reads are freed, and each producer's output once its
  // last consumer slot counted in `pending` has read it, unless someone holds it (index_reads).
  void release_after_forward(step_buffers& b, int i, std::vector<int>& pending, bool rerun) {
    auto& in = at(b.inputs, i);
    const step_schedule& sc = schedule();
    for (std::size_t j = 0; j < in.size(); ++j)
      if (!sc.reads(i).input(j) && (rerun || !sc.reruns_from(i, j))) release(in[j]);
    auto free_unheld = [&](int p) {
      if (!sc.held(p, rerun)) at(b.fwd, p).outputs.clear();
    };
    for (std::size_t j = 0; j < at(model_.op_inputs, i).size(); ++j) {
      const int p = at(model_.op_inputs, i)[j].op;
      if (p < 0 || (rerun && !sc.inside_block(i, j))) continue;
      if (--at(pending, p) == 0) free_unheld(p);
    }
    if (at(pending, i) == 0 && i != model_.loss_op) free_unheld(i);  // no (further) consumer reads it
  }

  void init_parameters() {
    const int np = int(model_.params.size());
    if (held_.empty()) assign(held_, np, 1);
    if (tied_stages_.empty()) resize(tied_stages_, np);
    resize(params_, np);
    resize(grads_, np);
    resize(grad_sums_, np);
    resize(boxed_sums_, np);
    resize(first_moment_, np);
    resize(second_moment_, np);
    for (int p = 0; p < np; ++p) {
      const int c = at(pick_, problem_.param_node(p));
      const tensor_shape& shape = at(model_.params, p).shape;
      sync_paths_.push_back(problem_.param_sync_path(p, c));
      gather_paths_.push_back(problem_.param_gather_path(p, c));
      slice_paths_.push_back(problem_.box(storage(p), update_layout(p), shape));
      if (!holds_param(p)) continue;  // another stage's
      const shard_info s = make_shard(shape, storage(p), comm_.shape(), comm_.coords());
      at(params_, p) = uploaded(init_param_shard<T>(model_, p, s, options_.seed));
      const std::size_t state = std::size_t(local_shape(shape, layout{update_layout(p), comm_.shape()}).elements());
      at(first_moment_, p) = dev_.template alloc<T>(state);
      if (options_.opt == optimizer::adam) at(second_moment_, p) = dev_.template alloc<T>(state);
    }
  }

  // Op i's forward in micro-batch k: its model inputs loaded, producer outputs boxed by the
  // priced paths (identity paths are read in place), parameters boxed once per step (micro-batch
  // 0; the copy is kept), then the kernel.
  void forward_op(step_buffers& b, int i, std::int64_t step_index, int k) {
    const op_node& n = at(model_.ops, i);
    at(b.ctx, i) = context_of(i, micro_batch_seed(options_.seed, step_index, k));
    kernel_context<T>& ctx = at(b.ctx, i);
    wire_statistics(ctx);
    ctx.input_grad_wanted.assign(n.inputs.size(), true);
    auto& in = at(b.inputs, i);
    in.resize(n.inputs.size());
    auto t = clock::now();
    for (std::size_t j = 0; j < n.inputs.size(); ++j) {
      const tensor_ref r = at(model_.op_inputs, i)[j];
      if (r.op < 0) {
        ctx.input_grad_wanted[j] = false;  // model inputs need no gradient
        at(profile_.boxing_s, i) += lap(t);
        load_model_input(b, i, int(j), r.index, step_index, k);
        profile_.inputs_s += lap(t);
        continue;
      }
      box_input(b, i, j);
    }
    for (std::size_t j = 0; j < n.param_ids.size() && k == 0; ++j) {
      const int p = n.param_ids[j];
      const boxing_path& path = paths_.param(i, j).forward;
      if (path.size() > 0)
        at(gathered_, i)[j] = run_boxing<T>(dev_, comm_, clone(at(params_, p)), at(model_.params, p).shape, storage(p), path);
    }
    at(profile_.boxing_s, i) += lap(t);
    at(b.fwd, i) = kernel_forward(i, ctx, make_operands(b, i));
    at(profile_.kernel_s, i) += lap(t);
  }

  // Op i's kernel context on this device: from the typed instance's constant local shapes where
  // the ops run through instances, else from its signature.
  kernel_context<T> context_of(int i, std::uint64_t seed) const {
    const op_node& n = at(model_.ops, i);
    if (program_.empty()) return make_kernel_context<T>(n, sig(i), comm_.shape(), comm_.coords(), seed, std::uint64_t(i));
    const op_instance<T, D>& x = at(program_, i);
    return kernel_context<T>{n, x.sig, comm_.shape(), comm_.coords(), x.shards(comm_.coords()), seed, std::uint64_t(i), true,
                             {}, {}};
  }
  forward_result<D, T> kernel_forward(int i, const kernel_context<T>& c, const operands<T>& in) {
    return program_.empty() ? op_forward(dev_, c, in) : at(program_, i).forward(dev_, c, in);
  }
  gradients<D, T> kernel_backward(int i, const kernel_context<T>& c, const operands<T>& in, const forward_result<D, T>& f,
                                  std::span<const T> dy) {
    return program_.empty() ? op_backward(dev_, c, in, f, dy) : at(program_, i).backward(dev_, c, in, f, dy);
  }

  // Input j of op i: its producer's output boxed by the edge's forward path (if it has one).
  void box_input(step_buffers& b, int i, std::size_t j) {
    const tensor_ref r = at(model_.op_inputs, i)[j];
    const boxing_path& path = paths_.input(i, j).forward;
    if (path.size() > 0)
      at(b.inputs, i)[j] = run_boxing<T>(dev_, comm_, clone(output(b, r.op)), at(at(model_.ops, r.op).outputs, r.index),
                                         at(sig(r.op).outputs, r.index), path);
  }

  // After op i's forward: what the plan's recomputation does not keep is freed. Selective: a
  // recomputed attention op's saved products. Full, at the last op of a block: the block's saved
  // products, its outputs that no op outside the block reads, and the boxed copies of the edges
  // inside it (the copies of edges entering it are kept). (release_after_forward has freed
  // already what no one reads.)
  void drop_recomputed(step_buffers& b, int i) {
    const step_schedule& sc = schedule();
    if (!sc.recomputes(i)) return;
    if (sc.selectively_recomputed(i)) {
      at(b.fwd, i).drop_saved();
      return;
    }
    if (!sc.last_of_block(i)) return;
    for (int o : sc.block_ops(at(model_.block, i))) {
      forward_result<D, T>& f = at(b.fwd, o);
      f.drop_saved();
      if (!sc.read_outside_block(o)) f.outputs.clear();
      for (std::size_t j = 0; j < at(b.inputs, o).size(); ++j)
        if (sc.inside_block(o, j)) release(at(b.inputs, o)[j]);
    }
  }

  // Before the backward of a fully recomputed block (at its last op): its ops' forward again, in
  // order, with the micro-batch's kernel contexts (the same dropout keys), edges inside the
  // block reboxed from the rerun outputs.
  // As in forward, each op then keeps only what backward reads.
  void recompute_block(step_buffers& b, int blk) {
    std::vector<int> pending = schedule().block_consumer_slots();
    for (int o : schedule().block_ops(blk)) {
      auto t = clock::now();
      for (std::size_t j = 0; j < at(b.inputs, o).size(); ++j)
        if (schedule().inside_block(o, j)) box_input(b, o, j);
      at(profile_.boxing_s, o) += lap(t);
      at(b.fwd, o) = kernel_forward(o, at(b.ctx, o), make_operands(b, o));
      at(profile_.kernel_s, o) += lap(t);
      release_after_forward(b, o, pending, true);
      sample_memory();
    }
  }

  // Model input `input` of op i's slot j: this device's shard of micro-batch k's rows of the
  // step's synthetic global batch.
  void load_model_input(step_buffers& b, int i, int j, int input, std::int64_t step_index, int k) {
    const shard_info sh = micro_batch_shard(at(at(b.ctx, i).shards.inputs, j), k, microbatches());
    const input_kind kind = at(input_kinds_, input);
    if (kind.indices) {
      if (options_.text) {  // ids (input 0) and next-byte labels from the text
        at(b.indices, i) = uploaded(options_.text->shard(sh, step_index, kind.labels ? 1 : 0));
        return;
      }
      at(b.indices, i) = uploaded(kind.labels && input != 0
                                      ? label_shard<T>(sh, input, kind.bound, at(input_kinds_, 0),
                                                       micro_batch_input_shape(0), options_.seed, step_index)
                                      : index_shard(sh, input, kind.bound, options_.seed, step_index));
      return;
    }
    std::vector<T> x = input_shard<T>(sh, input, options_.seed, step_index);
    // taken as P: the value sits on coordinate 0 of each P axis, zeros elsewhere
    const nd_sbp& l = at(sig(i).inputs, j);
    for (int a = 0; a < l.size(); ++a)
      if (l[a].is_partial() && comm_.coords()[a] != 0) std::fill(x.begin(), x.end(), T{});
    at(at(b.inputs, i), j) = uploaded(x);
  }

  // Model input `input`'s global shape over the step's whole batch (the graph holds one micro-batch).
  tensor_shape micro_batch_input_shape(int input) const {
    tensor_shape s = at(model_.inputs, input);
    s[0] *= microbatches();
    return s;
  }

  // Micro-batch k's ops in reverse: each op's input gradients go back to their producers, boxed
  // dual(input) -> dual(output); its parameter gradients are accumulated (add_param_gradient).
  // A recomputed op's forward reruns first; after its backward an op's buffers are freed.
  void backward(step_buffers& b, int k) {
    const int nops = int(model_.ops.size());
    const bool last = k == microbatches() - 1;
    std::vector<buffer> dy(static_cast<std::size_t>(nops));
    if (last_stage()) at(dy, model_.loss_op) = loss_seed(sig(model_.loss_op).outputs[0]);
    receive_gradients(dy);
    for (send_request& r : b.sends) r.wait();  // the next stage has them: it sent their gradients
    for (int i = end_op_ - 1; i >= first_op_; --i) {
      const op_node& n = at(model_.ops, i);
      if (schedule().fully_recomputed(i) && schedule().last_of_block(i))
        recompute_block(b, at(model_.block, i));
      if (at(dy, i).empty()) at(dy, i) = dev_.template alloc<T>(std::size_t(at(b.ctx, i).shards.outputs[0].local.elements()));
      auto t = clock::now();
      if (schedule().selectively_recomputed(i))
        at(b.fwd, i) = kernel_forward(i, at(b.ctx, i), make_operands(b, i));
      auto grads = kernel_backward(i, at(b.ctx, i), make_operands(b, i), at(b.fwd, i), view(std::as_const(at(dy, i))));
      at(profile_.kernel_s, i) += lap(t);
      sample_memory();
      for (std::size_t j = 0; j < n.inputs.size(); ++j) {
        const tensor_ref r = at(model_.op_inputs, i)[j];
        if (r.op < 0) continue;
        const boxing_path& path = paths_.input(i, j).backward;
        buffer g = path.size() == 0 ? std::move(grads.inputs[j])
                                    : run_boxing<T>(dev_, comm_, std::move(grads.inputs[j]),
                                                    at(at(model_.ops, r.op).outputs, r.index), dual(sig(i).inputs[j]), path);
        at(profile_.boxing_s, i) += lap(t);
        accumulate(at(dy, r.op), std::move(g));
        profile_.accumulate_s += lap(t);
      }
      for (std::size_t j = 0; j < n.param_ids.size(); ++j) add_param_gradient(i, j, std::move(grads.params[j]), last);
      release(at(dy, i));
      at(b.fwd, i) = forward_result<D, T>{};
      at(b.inputs, i).clear();
      at(b.indices, i) = index_buffer{};
      if (last) at(gathered_, i).clear();
      sample_memory();
    }
    send_gradients(dy);
  }

  // Micro-batch contribution g to the gradient of op i's parameter slot j, laid out
  // dual(compute). An edge whose gradient needs no boxing adds it to the summing layout's sum
  // directly; the others sum it in dual(compute) and box the sum once, in the last micro-batch
  // (with one micro-batch: each contribution boxed as it comes, as the planner prices it).
  void add_param_gradient(int i, std::size_t j, buffer&& g, bool last_micro_batch) {
    const int p = at(model_.ops, i).param_ids[j];
    const boxing_path& path = paths_.param(i, j).backward;
    auto t = clock::now();
    if (path.size() == 0) {
      accumulate(at(grad_sums_, p), std::move(g));
      profile_.accumulate_s += lap(t);
      return;
    }
    buffer& sum = at(param_grad_acc_, i)[j];
    accumulate(sum, std::move(g));
    profile_.accumulate_s += lap(t);
    if (!last_micro_batch) return;
    if constexpr (SideQueue<D, M>) {
      box_on_side_queue(i, j, p, path);
      at(profile_.boxing_s, i) += lap(t);
      return;
    }
    buffer boxed = run_boxing<T>(dev_, comm_, std::move(sum), at(model_.params, p).shape, dual(sig(i).params[j]), path);
    release(sum);
    at(profile_.boxing_s, i) += lap(t);
    accumulate(at(grad_sums_, p), std::move(boxed));
    profile_.accumulate_s += lap(t);
  }

  // With a side queue: op i's slot j's summed gradient (moved out of param_grad_acc_) boxed and
  // added into boxed_sums_[p] there. Every buffer the path makes, and the sum itself, dies before
  // the switch back, so the device releases it in the side queue's order.
  void box_on_side_queue(int i, std::size_t j, int p, const boxing_path& path) {
    dev_.use_side_queue(comm_);
    side_pending_ = true;
    buffer& sum = at(param_grad_acc_, i)[j];
    {
      buffer boxed = run_boxing<T>(dev_, comm_, std::move(sum), at(model_.params, p).shape, dual(sig(i).params[j]), path);
      accumulate(at(boxed_sums_, p), std::move(boxed));
    }
    release(sum);
    dev_.use_main_queue(comm_);
  }

  // The main queue waits for the gradient boxings queued on the side queue, then adds each
  // parameter's boxed sum to what the main queue summed (a move where it summed nothing).
  void join_gradient_boxing() {
    if constexpr (SideQueue<D, M>) {
      if (!side_pending_) return;
      auto t = clock::now();
      dev_.join_side_queue(comm_);
      side_pending_ = false;
      profile_.side_join_s += lap(t);
      for (std::size_t p = 0; p < boxed_sums_.size(); ++p)
        if (!boxed_sums_[p].empty()) {
          accumulate(grad_sums_[p], std::move(boxed_sums_[p]));
          release(boxed_sums_[p]);  // (accumulate adds without taking it where grad_sums_[p] held a value)
        }
      profile_.accumulate_s += lap(t);
    }
  }

  // Each parameter's summed gradient boxed to its storage: nothing for a parameter with one
  // use (its contribution already went to storage), one synchronisation for a tied one.
  // A pipeline stage synchronises the parameters it holds; one held by several stages is then
  // exchanged with them and summed (exchange_tied_gradient). First the side queue's gradient
  // boxings are joined (train_step has done so; joining again is a no-op): nothing below reads a
  // gradient before that.
  void synchronise_gradients() {
    join_gradient_boxing();
    for (std::size_t p = 0; p < grads_.size(); ++p) {
      if (!holds_param(int(p))) continue;
      const param_choice& pc = param_layouts(int(p));
      if (grad_sums_[p].empty())  // a parameter no op reached this step
        grads_[p] = dev_.template alloc<T>(first_moment_[p].size());
      else
        grads_[p] = sync_paths_[p].size() == 0 ? std::move(grad_sums_[p])
                                               : run_boxing<T>(dev_, comm_, std::move(grad_sums_[p]),
                                                               model_.params[p].shape, pc.grad_sum, sync_paths_[p]);
      release(grad_sums_[p]);
      exchange_tied_gradient(int(p));
      sample_memory();
    }
  }

  // A parameter held by several pipeline stages: each sends its synchronised gradient to the
  // others and sums all of them in stage order, so every copy takes the same update.
  void exchange_tied_gradient(int p) {
    const std::vector<int>& users = at(tied_stages_, p);
    if (users.size() < 2) return;
    buffer mine = std::move(at(grads_, p));
    std::vector<send_request> sends;
    for (int t : users)
      if (t != stage_) sends.push_back(post_send(view(std::as_const(mine)), t, tag_tied));
    buffer sum;
    for (int t : users) {
      if (t == stage_) {
        accumulate(sum, clone(mine));
        continue;
      }
      buffer theirs = dev_.template alloc<T>(mine.size());
      receive(view(theirs), t, tag_tied);
      accumulate(sum, std::move(theirs));
    }
    for (send_request& r : sends) r.wait();
    at(grads_, p) = std::move(sum);
  }

  // The first parameter (by index, over all ranks) whose synchronised gradient shard holds NaN or
  // Inf stops training on every rank with the same message: one all-reduce (max) of a double.
  void check_gradients_finite(std::int64_t step_index) {
    const int n = int(grads_.size());
    double flag = 0;  // n - p for the first bad parameter p here, so the max picks the least p
    for (int p = 0; p < n && flag == 0; ++p)
      if (!dev_.all_finite(view(std::as_const(at(grads_, p))))) flag = double(n - p);
    flag = everyone_all_reduce(flag, reduce_kind::max);
    if (flag == 0) return;
    const int p = n - int(flag);
    std::string users;
    for (const op_node& op : model_.ops)
      for (int q : op.param_ids)
        if (q == p) users += (users.empty() ? "'" : ", '") + op.name + "'";
    detail::fail<error>("step " + std::to_string(step_index) + ": the gradient of parameter '" + at(model_.params, p).name +
                        "' (used by op " + users + ") holds NaN or Inf; training stopped (lower the learning rate or "
                        "check the inputs; train_options::check_finite = false, autoddl-train --no-check-finite, turns "
                        "this check off)");
  }

  // SGD with momentum or Adam on each device's shard in the update layout: the storage shard
  // itself, or (ZeRO stages 1 and 2) this device's slice of it, updated and then gathered back.
  void optimizer_update() {
    ++steps_done_;
    optimizer_step os;
    os.lr = options_.lr;
    os.step = steps_done_;
    for (std::size_t p = 0; p < params_.size(); ++p) {
      if (!holds_param(int(p))) continue;
      const boxing_path& gather = at(gather_paths_, p);
      if (gather.size() == 0) {
        update_shard(os, p, view(params_[p]));
        continue;
      }
      const param_choice& pc = param_layouts(int(p));
      const tensor_shape& shape = at(model_.params, p).shape;
      buffer slice = run_boxing<T>(dev_, comm_, clone(params_[p]), shape, pc.storage, at(slice_paths_, p));
      update_shard(os, p, view(slice));
      params_[p] = run_boxing<T>(dev_, comm_, std::move(slice), shape, pc.update, gather);
    }
  }
  void update_shard(const optimizer_step& os, std::size_t p, std::span<T> param) {
    const std::span<const T> g = view(std::as_const(grads_[p]));
    if (options_.opt == optimizer::adam)
      dev_.adam(os, g, view(first_moment_[p]), view(second_moment_[p]), param);
    else
      dev_.sgd_momentum(os, g, view(first_moment_[p]), param);
  }

  // The device's bytes in use now.
  std::int64_t heap_in_use() const { return std::int64_t(dev_.bytes_in_use()); }

  void sample_memory() {
    if (options_.measure_memory) peak_live_ = std::max(peak_live_, heap_in_use() - heap_at_start_);
  }

  // Bytes of what persists between steps: parameter shards and optimizer state.
  std::int64_t stored_bytes() const {
    std::int64_t n = 0;
    for (std::size_t p = 0; p < params_.size(); ++p)
      n += std::int64_t(params_[p].size() + first_moment_[p].size() + second_moment_[p].size());
    return n * std::int64_t(sizeof(T));
  }

  std::int64_t axis_bytes() {
    std::int64_t bytes = 0;
    for (int a = 0; a < comm_.shape().size(); ++a) bytes += comm_.axis(a).bytes_sent();
    return bytes;
  }

  // The operands of op i: a boxed copy where its edge boxes, else the producer's output or the
  // stored parameter shard itself (identity paths copy nothing).
  operands<T> make_operands(const step_buffers& b, int i) const {
    operands<T> ops;
    const op_node& n = at(model_.ops, i);
    for (std::size_t j = 0; j < n.inputs.size(); ++j) {  // a freed tensor is an empty span
      const tensor_ref r = at(model_.op_inputs, i)[j];
      const bool direct = r.op >= 0 && paths_.input(i, j).forward.size() == 0;
      if (!direct) {
        ops.inputs.push_back(view(at(b.inputs, i)[j]));
        continue;
      }
      const auto& outs = at(b.fwd, r.op).outputs;
      ops.inputs.push_back(outs.empty() ? std::span<const T>() : view(outs[0]));
    }
    for (std::size_t j = 0; j < n.param_ids.size(); ++j) {
      const bool direct = paths_.param(i, j).forward.size() == 0;
      ops.params.push_back(view(direct ? at(params_, n.param_ids[j]) : at(gathered_, i)[j]));
    }
    ops.indices = std::as_const(dev_).view(at(b.indices, i));
    return ops;
  }

  // into += v on the device (into takes v when it is empty).
  void accumulate(buffer& into, buffer&& v) {
    if (into.empty()) {
      into = std::move(v);
      return;
    }
    dev_.axpy(T(1), view(std::as_const(v)), view(into));
  }

  // Vocab-parallel cross-entropy: its row statistics are all-reduced over the axes that split
  // the logits' last dim (the planner priced these as the op's statistic all-reduces).
  void wire_statistics(kernel_context<T>& c) {
    if (c.op.kind != op_kind::cross_entropy) return;
    const int last = c.op.inputs[0].rank() - 1;
    std::vector<int> axes;
    for (int a = 0; a < c.sig.inputs[0].size(); ++a)
      if (c.sig.inputs[0][a].is_split() && c.sig.inputs[0][a].dim == last) axes.push_back(a);
    if (axes.empty()) return;
    using S = statistic_t<T>;
    c.row_all_reduce = [this, axes](std::span<S> v, reduce_kind k) {
      for (int a : axes) {  // in place, through a zero-padded copy where n does not divide the rows
        const std::size_t n = std::size_t(comm_.shape()[a]);
        if (v.size() % n == 0) {
          comm_.axis(a).all_reduce(v, k);
          continue;
        }
        buffer_t<D, S> pad = dev_.template alloc<S>((v.size() + n - 1) / n * n);
        dev_.copy(std::span<const S>(v), dev_.view(pad).first(v.size()));
        comm_.axis(a).all_reduce(dev_.view(pad), k);
        dev_.copy(std::as_const(dev_).view(pad).first(v.size()), v);
      }
    };
  }

  // The loss output is a scalar, P over the axes whose devices hold partial sums and B over the
  // others: the global loss sums one copy per P group. This device's part: its value if it holds
  // one of those copies, else 0.
  double local_loss(const buffer& local, const nd_sbp& l) const {
    for (int a = 0; a < l.size(); ++a)
      if (!l[a].is_partial() && comm_.coords()[a] != 0) return 0;
    T v{};
    dev_.download(view(local).first(1), std::span<T>(&v, 1));
    return double(v);
  }

  // The sum of every device's part, over the world communicator (reported, outside the plan's
  // bytes): one all-reduce per step whatever the micro-batches.
  double global_loss(double part) { return everyone_all_reduce(part, reduce_kind::sum); }

  // x reduced (sum or max) over every device, through the device's memory (the communicator
  // works on it): one double per device, padded to the world's size.
  double world_all_reduce(double x, reduce_kind k) { return all_reduce_one(comm_.world(), x, k); }
  template <class C>
  double all_reduce_one(C& c, double x, reduce_kind k) {
    std::vector<double> h(std::size_t(c.size()), 0.0);
    h[0] = x;
    buffer_t<D, double> b = uploaded(h);
    c.all_reduce(dev_.view(b), k);
    dev_.download(std::as_const(dev_).view(b).first(1), std::span<double>(h).first(1));
    return h[0];
  }
  // Over every device of every pipeline stage: the stage's world, then the stage axis.
  double everyone_all_reduce(double x, reduce_kind k) {
    x = world_all_reduce(x, k);
    return pipe_ ? all_reduce_one(*pipe_, x, k) : x;
  }

  // dLoss/dLoss = 1/m for a step of m micro-batches (the step's loss is their mean), laid out
  // dual(loss layout): B where the loss was P (every device holds it), P where it was B (device
  // 0 of that axis holds it, the others 0).
  buffer loss_seed(const nd_sbp& l) {
    bool one = true;
    for (int a = 0; a < l.size(); ++a)
      if (l[a].is_broadcast() && comm_.coords()[a] != 0) one = false;
    return uploaded(std::vector<T>(1, one ? T(1.0 / microbatches()) : T(0)));
  }

  // ---- pipeline stages ----

  bool last_stage() const { return stage_ == stages_ - 1; }
  int stage_of(const std::vector<int>& first_ops, int op) const {
    return int(std::upper_bound(first_ops.begin(), first_ops.end(), op) - first_ops.begin()) - 1;
  }
  // Elements of this device's shard of op o's first output.
  std::size_t output_elements(int o) const {
    return std::size_t(local_shape(at(at(model_.ops, o).outputs, 0), layout{at(sig(o).outputs, 0), comm_.shape()}).elements());
  }

  void set_stage(const pipeline_stage<pipe_comm>& st) {
    if constexpr (!pipe_sends)
      detail::fail<error>("this communicator has no non-blocking sends, so it cannot run pipeline stages; run pipelines on MPI ranks");
    const int nops = int(model_.ops.size()), p = st.stages();
    bool ok = p >= 1 && st.stage >= 0 && st.stage < p && at(st.first_ops, 0) == 0 && st.pipe != nullptr;
    for (int i = 1; ok && i < p; ++i) ok = at(st.first_ops, i - 1) < at(st.first_ops, i) && at(st.first_ops, i) < nops;
    if (!ok)
      detail::fail<error>("pipeline stage " + detail::itos(st.stage) + " of " + detail::itos(p) +
                          ": the stages must begin at op 0 and at ascending ops of the model's " + detail::itos(nops) +
                          ", one communicator over the stages given");
    if (st.pipe->size() != p || st.pipe->rank() != st.stage)
      detail::fail<error>("the stage axis communicator has " + detail::itos(st.pipe->size()) + " ranks and this device is its rank " +
                          detail::itos(st.pipe->rank()) + ", but the pipeline has " + detail::itos(p) +
                          " stages and this is stage " + detail::itos(st.stage));
    if (stage_of(st.first_ops, model_.loss_op) != p - 1)
      detail::fail<error>("the loss op '" + at(model_.ops, model_.loss_op).name + "' must be in the last pipeline stage");
    stage_ = st.stage;
    stages_ = p;
    pipe_ = st.pipe;
    first_op_ = at(st.first_ops, stage_);
    end_op_ = stage_ + 1 < p ? at(st.first_ops, stage_ + 1) : nops;
    find_boundaries(st.first_ops);
    find_stage_params(st.first_ops);
  }

  // The outputs crossing into and out of this stage: recv_fwd_ (made before it, read by it or
  // later) and send_fwd_ (made before its end, read after it), ascending.
  void find_boundaries(const std::vector<int>& first_ops) {
    const int nops = int(model_.ops.size());
    std::vector<int> furthest(static_cast<std::size_t>(nops), -1);  // the last op reading each op's first output
    for (int i = 0; i < nops; ++i)
      for (const tensor_ref& r : at(model_.op_inputs, i)) {
        if (r.op < 0) continue;
        if (r.index != 0 && stage_of(first_ops, r.op) != stage_of(first_ops, i))
          detail::fail<error>("op '" + at(model_.ops, i).name + "' reads output " + detail::itos(r.index) + " of op '" +
                              at(model_.ops, r.op).name + "' from another pipeline stage; only first outputs cross stages");
        at(furthest, r.op) = std::max(at(furthest, r.op), i);
      }
    for (int o = 0; o < nops; ++o) {
      if (o < first_op_ && at(furthest, o) >= first_op_) recv_fwd_.push_back(o);
      if (o < end_op_ && at(furthest, o) >= end_op_) send_fwd_.push_back(o);
    }
  }

  // The parameters this stage's ops use, and the stages sharing each used on several.
  void find_stage_params(const std::vector<int>& first_ops) {
    const int np = int(model_.params.size());
    std::vector<std::vector<int>> users(static_cast<std::size_t>(np));
    for (int i = 0; i < int(model_.ops.size()); ++i)
      for (int q : at(model_.ops, i).param_ids) {
        std::vector<int>& u = at(users, q);
        const int s = stage_of(first_ops, i);
        if (std::find(u.begin(), u.end(), s) == u.end()) u.insert(std::upper_bound(u.begin(), u.end(), s), s);
      }
    assign(held_, np, 0);
    resize(tied_stages_, np);
    for (int q = 0; q < np; ++q) {
      const std::vector<int>& u = at(users, q);
      at(held_, q) = std::find(u.begin(), u.end(), stage_) != u.end() ? 1 : 0;
      if (u.size() > 1 && at(held_, q)) at(tied_stages_, q) = u;
    }
  }

  send_request post_send(std::span<const T> v, int to, int tag) {
    pipe_bytes_ += std::int64_t(v.size() * sizeof(T));
    if constexpr (pipe_sends) return pipe_->isend(v, to, tag);
    else return {};
  }
  void receive(std::span<T> v, int from, int tag) {
    auto t = clock::now();
    if constexpr (pipe_sends) pipe_->recv(v, from, tag);
    profile_.pipe_wait_s += lap(t);
  }

  // Before a stage's forward: the outputs of earlier stages that it or a later stage reads, from
  // stage s - 1 in ascending op order (as that stage sends them), each as its producer made it.
  void receive_activations(step_buffers& b) {
    for (int o : recv_fwd_) {
      auto& outs = at(b.fwd, o).outputs;
      outs.push_back(dev_.template alloc<T>(output_elements(o)));
      receive(view(outs[0]), stage_ - 1, tag_activation);
    }
  }
  // After it: the outputs later stages read, to stage s + 1; held until backward.
  void send_activations(step_buffers& b) {
    for (int o : send_fwd_) b.sends.push_back(post_send(view(output(b, o)), stage_ + 1, tag_activation));
  }
  // Before a stage's backward: the gradients of what it sent, from stage s + 1.
  void receive_gradients(std::vector<buffer>& dy) {
    for (int o : send_fwd_) {
      buffer g = dev_.template alloc<T>(output_elements(o));
      receive(view(g), stage_ + 1, tag_gradient);
      accumulate(at(dy, o), std::move(g));
    }
  }
  // After it: the gradients of what it received, to stage s - 1 (kept until sent).
  void send_gradients(std::vector<buffer>& dy) {
    for (int o : recv_fwd_) {
      buffer& g = at(dy, o);
      if (g.empty()) g = dev_.template alloc<T>(output_elements(o));
      send_request r = post_send(view(std::as_const(g)), stage_ - 1, tag_gradient);
      gradient_sends_.emplace_back(std::move(g), std::move(r));
    }
    while (!gradient_sends_.empty() && gradient_sends_.front().second.test()) gradient_sends_.pop_front();
  }
  void finish_sends() {
    auto t = clock::now();
    for (auto& [g, r] : gradient_sends_) r.wait();
    gradient_sends_.clear();
    profile_.pipe_wait_s += lap(t);
  }

  const plan_problem& problem_;
  const graph& model_;
  std::vector<int> pick_;
  D& dev_;
  M& comm_;
  train_options options_;
  plan_paths paths_;                       ///< per op slot: the boxing into it, forward and backward
  std::vector<boxing_path> sync_paths_;    ///< per parameter: summing layout -> update layout
  std::vector<boxing_path> slice_paths_;   ///< per parameter: storage -> update layout (a local slice)
  std::vector<boxing_path> gather_paths_;  ///< per parameter: update layout -> storage (ZeRO 1, 2)
  std::vector<input_kind> input_kinds_;
  op_program<T, D> program_;  ///< a typed model's instances per op (run_instances); empty: dynamic dispatch
  std::vector<buffer> params_, grads_;  ///< storage shards of parameters and their gradients
  std::vector<buffer> grad_sums_;       ///< per parameter: its uses' gradients, summed
  std::vector<buffer> boxed_sums_;      ///< per parameter: boxed on the side queue, summed there (until the join)
  bool side_pending_ = false;           ///< side-queue work queued since the last join
  std::vector<std::vector<buffer>> gathered_;        ///< per op slot: parameter boxed to compute, this step
  std::vector<std::vector<buffer>> param_grad_acc_;  ///< per op slot: gradient summed over micro-batches
  std::optional<step_schedule> schedule_;  ///< what the step keeps and reruns (after paths_)
  std::vector<buffer> first_moment_;    ///< Adam's m, or SGD-momentum's velocity
  std::vector<buffer> second_moment_;   ///< Adam's v (empty for SGD)
  std::vector<buffer> kept_outputs_;
  int stage_ = 0, stages_ = 1;    ///< this device's pipeline stage, of stages_
  int first_op_ = 0, end_op_ = 0; ///< its ops
  pipe_comm* pipe_ = nullptr;     ///< the stage axis (null: no pipeline)
  std::vector<int> recv_fwd_, send_fwd_;        ///< outputs received from the stage before, sent to the next
  std::vector<char> held_;                      ///< per parameter: kept here
  std::vector<std::vector<int>> tied_stages_;   ///< per parameter held on several stages: those stages
  std::deque<step_buffers> waiting_;            ///< micro-batches forward, not yet backward
  std::deque<std::pair<buffer, send_request>> gradient_sends_;
  std::int64_t pipe_bytes_ = 0;   ///< bytes sent on the stage axis (activations, gradients, tied)
  std::int64_t steps_done_ = 0;
  std::int64_t last_bytes_ = 0;
  std::int64_t heap_at_start_ = 0, peak_live_ = 0, peak_bytes_ = 0;
  step_profile profile_;
};

}  // namespace autoddl
