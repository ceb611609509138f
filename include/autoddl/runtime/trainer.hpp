#pragma once
// A training step of any valid plan on one device of the mesh: forward, loss and backward of each
// of the plan's micro-batches, the gradients boxed to the parameters' storage layouts, the
// optimizer step, as serial training does. It runs a plan value (plan/plan.hpp) and needs no
// planner: every tensor that crosses an edge of the model is boxed by exactly the plan's path (the
// one the planner priced, or a plan file holds), so the bytes sent on the mesh axes per step equal
// the plan's predicted bytes; the schedule (micro-batches, recomputation, 1F1B pipeline stages,
// what is gathered again for backward) and what each op keeps from forward to backward are the
// plan's (step_schedule); any valid plan computes what serial training of the whole batch does.
// docs/reference/runtime.md, "The training step", says how. The parts: detail/parameter_store.hpp
// (initialise, synchronise, update, restore), detail/gradient_accumulator.hpp (gradient sums, the
// side queue), detail/stage_link.hpp (pipeline transport and the tied-gradient exchange),
// detail/step_loss.hpp (the loss).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "autoddl/backend/communicator.hpp"
#include "autoddl/backend/device.hpp"
#include "autoddl/cost/memory.hpp"
#include "autoddl/index.hpp"
#include "autoddl/plan/plan.hpp"
#include "autoddl/plan/step_schedule.hpp"
#include "autoddl/runtime/boxing.hpp"
#include "autoddl/runtime/data.hpp"
#include "autoddl/runtime/detail/device_buffers.hpp"
#include "autoddl/runtime/detail/gradient_accumulator.hpp"
#include "autoddl/runtime/detail/parameter_store.hpp"
#include "autoddl/runtime/detail/stage_link.hpp"
#include "autoddl/runtime/detail/step_loss.hpp"
#include "autoddl/runtime/op_instance.hpp"
#include "autoddl/runtime/op_kernels.hpp"
#include "autoddl/runtime/pipeline_schedule.hpp"
#include "autoddl/runtime/token_order_of.hpp"
#include "autoddl/runtime/train_options.hpp"

namespace autoddl {

/// One device's part of training a plan's model under that plan (plan/plan.hpp; the planner
/// makes one with plan_of, a plan file holds one). A step is forward, loss and backward of each of the plan's micro-batches,
/// the one synchronisation of each tied parameter's summed gradient, and the optimizer update on
/// the storage shards. Sum: the type of gradient sums (master_t<T>; T for 16-bit sums, detail/precision.hpp).
template <class T, Device D, MeshCommunicator M, class Sum = detail::master_t<T>>
class trainer : detail::device_buffers<T, D> {
  using buffer = buffer_t<D, T>;
  using master = detail::master_t<T>;  ///< master weights, gradients and optimizer state (runtime/detail/precision.hpp)
  using index_buffer = buffer_t<D, std::int64_t>;
  using buffers = detail::device_buffers<T, D>;
  using buffers::accumulate, buffers::clone, buffers::host_copy, buffers::release, buffers::uploaded, buffers::view;

 public:
  /// The communicator type of a pipeline's stage axis: the mesh communicator's axis type.
  using pipe_comm = std::remove_cvref_t<decltype(std::declval<M&>().world())>;

  /// `stage`: this device's stage of a pipeline whose every stage runs plan `p` on its mesh
  /// (the stage mesh); nullopt: the whole model. Throws layout_error on a plan that is not whole
  /// (check_plan) or is for another mesh, error on another element type, a stage that does not
  /// fit the model or the pipe, or a communicator without non-blocking sends.
  trainer(plan p, D& dev, M& comm, train_options options = {}, std::optional<pipeline_stage<pipe_comm>> stage = std::nullopt)
      : buffers(dev),
        plan_(checked(std::move(p))),
        model_(plan_.g()),
        dev_(dev),
        comm_(comm),
        options_(options),
        store_(plan_, dev, comm, options),
        gradients_(dev, comm, int(model_.params.size())),
        link_(dev, model_) {
    if (!(comm_.shape() == plan_.mesh))
      detail::fail<layout_error>("the plan is for mesh " + to_string(plan_.mesh) + " but the communicator spans " +
                                 to_string(comm_.shape()));
    if (bytes_of(plan_.type) != int(sizeof(T)))
      detail::fail<error>("the plan is priced in " + std::string(to_string(plan_.type)) + " (" +
                          std::to_string(bytes_of(plan_.type)) + "-byte elements) but this trainer trains " +
                          std::to_string(sizeof(T)) + "-byte elements; plan with the dtype it trains (plan_options::type)");
    schedule_.emplace(plan_);
    input_kinds_ = input_kinds(model_);
    order_ = plan_token_order(plan_);
    if (options_.text) check_text_model(model_, *options_.text);
    if (stage && stage->first_ops != plan_.stage_first_ops)
      detail::fail<layout_error>("the pipeline stage's cuts are not the plan's: it has " + std::to_string(stage->stages()) +
                                 " stages, the plan " + std::to_string(plan_.stages()));
    if (stage) link_.set_stage(*stage);
    store_.init(link_.held());
  }

  const signature& sig(int op) const { return plan_.sig(op); }
  /// The plan this trainer runs.
  const plan& the_plan() const { return plan_; }
  /// From the next step on, runs every op through a typed model's compiled instance
  /// (runtime/typed_program.hpp): kernel contexts from the instance's constant local shapes,
  /// kernels chosen at compile time; an empty program goes back to the dynamic dispatch.
  /// @throws layout_error when the program has another op count, or an op's instance has
  /// another signature than the plan's pick.
  void run_instances(op_program<T, D> program) {
    detail::check_program(program, model_, [this](int i) -> const signature& { return sig(i); });
    program_ = std::move(program);
  }
  /// Whether ops run through a typed model's instances (run_instances).
  bool runs_instances() const { return !program_.empty(); }
  /// This device's pipeline stage (0 without a pipeline) and the stages.
  int stage() const { return link_.stage(); }
  int stages() const { return link_.stages(); }
  /// Whether this device keeps parameter p (it does unless a pipeline stage's ops do not use it).
  bool holds_param(int p) const { return store_.holds(p); }
  const param_choice& param_layouts(int p) const { return store_.layouts(p); }
  const nd_sbp& storage(int p) const { return store_.storage(p); }
  /// The layout of parameter p's synchronised gradient and optimizer state (== storage except
  /// under ZeRO stages 1 and 2, where it is storage with its B axes split).
  const nd_sbp& update_layout(int p) const { return store_.update_layout(p); }
  /// This device's shard of parameter p (storage layout) and of its last gradient (update
  /// layout, in master_t<T>: float for a 16-bit T), downloaded (empty where it does not hold p).
  std::vector<T> param_shard(int p) const { return store_.param_shard(p); }
  std::vector<master> grad_shard(int p) const { return store_.grad_shard(p); }
  /// Parameter p's optimizer state here (update layout, master_t<T>), downloaded: k = 0 Adam's m (SGD's
  /// velocity), k = 1 Adam's v (empty for SGD), k = 2 a 16-bit T's master copy (else empty).
  std::vector<master> moment_shard(int p, int k) const { return k == 2 ? store_.master_shard(p) : store_.moment_shard(p, k); }
  /// Optimizer steps taken so far (Adam's bias correction counts them).
  std::int64_t steps_done() const { return store_.steps_done(); }
  /// Replaces parameter p's shard, optimizer state and master copy (where given; else the value's) with
  /// a checkpoint's host values, sized as param_shard and moment_shard give them. @throws error on a size mismatch.
  void restore_shard(int p, const std::vector<T>& param, const std::vector<master>& m, const std::vector<master>& v,
                     const std::vector<master>& master_copy = {}) { store_.restore_shard(p, param, m, v, master_copy); }
  /// Sets the optimizer steps taken (a resumed run continues Adam's bias correction).
  void restore_steps_done(std::int64_t n) { store_.restore_steps_done(n); }
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
  /// The dynamic loss scale now (0: none); whether it skipped the last step's update.
  double loss_scale() const { return scale_.scale; }
  bool last_step_skipped() const { return scale_.skipped; }

  /// Runs training step `step_index` (0-based: it keys the data and dropout) and returns the
  /// global loss (the mean of its micro-batches' losses), the same on every device.
  double train_step(std::int64_t step_index) {
    const std::int64_t bytes_before = axis_bytes();
    const auto start = clock::now();
    begin_step();
    scale_.begin_step(step_index == options_.inject_overflow_step);
    const int m = microbatches();
    const std::int64_t pipe_before = link_.bytes_sent();
    double local_loss = 0;
    for (const pipeline_slot& x : one_f_one_b(stages(), stage(), m)) local_loss += run_slot(step_index, x);
    link_.finish_sends();
    // Backward is all queued: the main queue waits for the side queue's gradient boxings here, so
    // that no collective of another communicator (the loss's, over the world) runs beside them.
    gradients_.join(profile_);
    auto t = clock::now();
    const double loss = global_loss(local_loss) / m;
    if (options_.check_finite && !std::isfinite(loss)) detail::fail_non_finite_loss(loss, step_index);
    profile_.loss_s = lap(t);
    synchronise_gradients();
    if (options_.check_finite && !scale_.on()) check_gradients_finite(step_index);
    profile_.sync_s = lap(t);
    if (!scale_.on() || scale_.after_step(everyone_all_reduce(store_.non_finite_flag(), reduce_kind::max) == 0))
      store_.update(scale_.on() ? 1 / scale_.applied : 1);
    sample_memory();
    profile_.update_s = lap(t);
    profile_.pipe_wait_s = link_.waited_s();
    profile_.total_s = lap(t = start);
    last_bytes_ = axis_bytes() - bytes_before + link_.bytes_sent() - pipe_before;
    peak_bytes_ = options_.measure_memory ? store_.stored_bytes() + peak_live_ : 0;
    return loss;
  }

 private:
  using clock = detail::step_clock;
  static double lap(clock::time_point& t) { return detail::lap(t); }

  using link = detail::stage_link<T, D, pipe_comm>;
  using send_request = typename link::send_request;

  /// What lives from an op's forward to its backward during one micro-batch.
  struct step_buffers {
    std::vector<std::vector<buffer>> inputs;  ///< boxed copies (empty: read in place)
    std::vector<index_buffer> indices;        ///< token ids and labels per op
    std::vector<kernel_context<T>> ctx;
    std::vector<forward_result<D, T>> fwd;  ///< outputs empty once freed (see release_after_forward)
    std::vector<int> pending;               ///< per op: consumer slots whose forward has yet to read its output
    std::vector<send_request> sends;        ///< outputs sent to the next stage (held in fwd until done)
  };

  int microbatches() const { return plan_.microbatches; }
  recompute_mode recompute() const { return plan_.recompute; }
  static plan checked(plan p) {
    check_plan(p);
    return p;
  }

  // Frees what the last step left (its gradients, kept outputs) and starts the memory mark.
  void begin_step() {
    const int nops = int(model_.ops.size());
    profile_ = step_profile{};
    assign(profile_.kernel_s, nops, 0.0);
    assign(profile_.boxing_s, nops, 0.0);
    store_.release_gradients();
    gradients_.begin_step(model_);
    link_.reset_wait();
    kept_outputs_.clear();
    if (options_.keep_outputs) resize(kept_outputs_, nops);
    gathered_.clear();  // (buffers may be move-only: no assign)
    resize(gathered_, nops);
    for (int i = 0; i < nops; ++i) at(gathered_, i).resize(at(model_.ops, i).param_ids.size());
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
    const int l = model_.loss_op;
    return link_.last_stage() ? detail::local_loss<T>(dev_, comm_, at(b.fwd, l), at(model_.ops, l).kind, sig(l).outputs[0]) : 0;
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
    link_.receive_activations(b.fwd, output_elements());
    for (int i = link_.first_op(); i < link_.end_op(); ++i) {
      forward_op(b, i, step_index, k);
      if (keep) at(kept_outputs_, i) = clone(output(b, i));
      release_after_forward(b, i, b.pending, false);
      drop_recomputed(b, i);
      if (plan_.reshard_after_forward) release_gathered(i);
      sample_memory();
    }
    link_.send_activations(b.fwd, b.sends);
    return b;
  }

  static const buffer& output(const step_buffers& b, int op) { return at(at(b.fwd, op).outputs, 0); }

  const step_schedule& schedule() const { return *schedule_; }

  // After op i's forward (rerun: its rerun in a fully recomputed block's backward): the boxed
  // input copies that no later forward, backward or rerun reads are freed, and each producer's
  // output once its last consumer slot counted in `pending` has read it, unless someone holds it
  // (index_reads).
  void release_after_forward(step_buffers& b, int i, std::vector<int>& pending, bool rerun) {
    const step_schedule& sc = schedule();
    for (const input_slot c : sc.copies_done(i))
      if (rerun || !sc.reruns_from(c.op, std::size_t(c.input))) release(at(b.inputs, c.op)[std::size_t(c.input)]);
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

  // Op i's forward in micro-batch k: its model inputs loaded, producer outputs boxed by the
  // priced paths (identity paths are read in place), parameters gathered (every micro-batch where
  // the plan reshards after forward, else once at micro-batch 0 and kept), then the kernel.
  void forward_op(step_buffers& b, int i, std::int64_t step_index, int k) {
    const op_node& n = at(model_.ops, i);
    at(b.ctx, i) = context_of(i, micro_batch_seed(options_.seed, step_index, k));
    kernel_context<T>& ctx = at(b.ctx, i);
    detail::wire_statistics(dev_, comm_, ctx);
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
    if (k == 0 || plan_.reshard_after_forward) gather_params(i);
    at(profile_.boxing_s, i) += lap(t);
    at(b.fwd, i) = kernel_forward(i, ctx, make_operands(b, i));
    at(profile_.kernel_s, i) += lap(t);
  }

  // Op i's parameters boxed from storage to its compute layout where their path boxes (gathered),
  // unless held already.
  void gather_params(int i) {
    const op_node& n = at(model_.ops, i);
    for (std::size_t j = 0; j < n.param_ids.size(); ++j) {
      const int p = n.param_ids[j];
      const boxing_path& path = plan_.param(i, j).forward;
      if (buffer& g = at(gathered_, i)[j]; path.size() > 0 && g.empty())
        g = run_boxing<T>(dev_, comm_, clone(store_.param(p)), at(model_.params, p).shape, storage(p), path);
    }
  }
  void release_gathered(int i) { std::ranges::for_each(at(gathered_, i), [&](buffer& g) { release(g); }); }

  // Op i's kernel context on this device: from the typed instance's constant local shapes where
  // the ops run through instances, else from its signature.
  kernel_context<T> context_of(int i, std::uint64_t seed) const {
    const op_node& n = at(model_.ops, i);
    if (program_.empty()) return make_kernel_context<T>(n, sig(i), comm_.shape(), comm_.coords(), seed, std::uint64_t(i), order_);
    const op_instance<T, D>& x = at(program_, i);
    return kernel_context<T>{n, x.sig, comm_.shape(), comm_.coords(), x.shards(comm_.coords()), seed, std::uint64_t(i), true,
                             {}, {}, order_};
  }
  forward_result<D, T> kernel_forward(int i, const kernel_context<T>& c, const operands<T>& in) {
    return program_.empty() ? op_forward(dev_, c, in) : at(program_, i).forward(dev_, c, in);
  }
  gradients<D, T> kernel_backward(int i, const kernel_context<T>& c, const operands<T>& in, const forward_result<D, T>& f,
                                  std::span<const T> dy) {
    return program_.empty() ? op_backward(dev_, c, in, f, dy) : at(program_, i).backward(dev_, c, in, f, dy);
  }

  // Input j of op i: boxed by its edge's forward path (if it has one) from its producer's output,
  // or for a chained slot from its first reader's operand (plan::chained_from).
  void box_input(step_buffers& b, int i, std::size_t j) {
    const tensor_ref r = at(model_.op_inputs, i)[j];
    const boxing_path& path = plan_.input(i, j).forward;
    if (path.size() == 0) return;
    const input_slot c = plan_.chained_from(i, j);
    const input_slot copy = c.op >= 0 ? schedule().copy_read(c.op, std::size_t(c.input)) : input_slot{};
    const buffer& from = copy.op >= 0 ? at(b.inputs, copy.op)[std::size_t(copy.input)] : output(b, r.op);
    const nd_sbp& layout = c.op >= 0 ? at(sig(c.op).inputs, c.input) : at(sig(r.op).outputs, r.index);
    at(b.inputs, i)[j] = run_boxing<T>(dev_, comm_, clone(from), at(at(model_.ops, r.op).outputs, r.index), layout, path);
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
      gather_params(o);  // resharded: gathered for the rerun, kept for the op's backward
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
    const auto ids = [&](const shard_info& s) {  // ids (input 0) and next-byte labels from the text, or synthetic
      if (options_.text) return options_.text->shard(s, step_index, kind.labels ? 1 : 0);
      return kind.labels && input != 0 ? label_shard<T>(s, input, kind.bound, at(input_kinds_, 0),
                                                        micro_batch_input_shape(0), options_.seed, step_index)
                                       : index_shard(s, input, kind.bound, options_.seed, step_index);
    };
    if (kind.indices) return void(at(b.indices, i) = uploaded(in_token_order<std::int64_t>(sh, order_, ids)));
    std::vector<T> x =
        in_token_order<T>(sh, order_, [&](const shard_info& s) { return input_shard<T>(s, input, options_.seed, step_index); });
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
  // dual(input) -> dual(output), a chained slot's to its first reader's input gradient first
  // (chained_gradient); its parameter gradients are accumulated (add_param_gradient).
  // Recomputed forwards (reruns_before) run first; after its backward an op's buffers are freed.
  void backward(step_buffers& b, int k) {
    const int nops = int(model_.ops.size());
    const bool last = k == microbatches() - 1;
    std::vector<buffer> dy(static_cast<std::size_t>(nops));
    std::vector<std::vector<buffer>> chained_sums(static_cast<std::size_t>(nops));  // later readers' gradients, per first slot
    if (link_.last_stage())
      at(dy, model_.loss_op) = detail::loss_seed<T>(dev_, comm_, sig(model_.loss_op).outputs[0], microbatches(), scale_.seed);
    link_.receive_gradients(dy, output_elements());
    for (send_request& r : b.sends) r.wait();  // the next stage has them: it sent their gradients
    for (int i = link_.end_op() - 1; i >= link_.first_op(); --i) {
      const op_node& n = at(model_.ops, i);
      if (schedule().fully_recomputed(i) && schedule().last_of_block(i))
        recompute_block(b, at(model_.block, i));
      if (at(dy, i).empty()) at(dy, i) = dev_.template alloc<T>(std::size_t(at(b.ctx, i).shards.outputs[0].local.elements()));
      auto t = clock::now();
      for (const input_slot s : schedule().reboxed_before(i))  // regathered copies, from their kept sources
        if (at(b.inputs, s.op)[std::size_t(s.input)].empty()) box_input(b, s.op, std::size_t(s.input));
      if (plan_.reshard_after_forward) gather_params(i);
      at(profile_.boxing_s, i) += lap(t);
      for (const int o : schedule().reruns_before(i))  // selectively recomputed, or recomputed for i (swiglu's product)
        at(b.fwd, o) = kernel_forward(o, at(b.ctx, o), make_operands(b, o));
      auto grads = kernel_backward(i, at(b.ctx, i), make_operands(b, i), at(b.fwd, i), view(std::as_const(at(dy, i))));
      at(profile_.kernel_s, i) += lap(t);
      sample_memory();
      for (std::size_t j = 0; j < n.inputs.size(); ++j) {
        const tensor_ref r = at(model_.op_inputs, i)[j];
        if (r.op < 0) continue;
        const boxing_path& path = plan_.input(i, j).backward;
        if (auto& sums = at(chained_sums, i); j < sums.size() && !sums[j].empty()) {  // this slot's later readers
          accumulate(grads.inputs[j], std::move(sums[j]));
          release(sums[j]);
        }
        buffer g = path.size() == 0 ? std::move(grads.inputs[j])
                                    : run_boxing<T>(dev_, comm_, std::move(grads.inputs[j]),
                                                    at(at(model_.ops, r.op).outputs, r.index), dual(sig(i).inputs[j]), path);
        at(profile_.boxing_s, i) += lap(t);
        accumulate(chained_gradient(chained_sums, dy, i, j), std::move(g));
        profile_.accumulate_s += lap(t);
      }
      for (std::size_t j = 0; j < n.param_ids.size(); ++j) add_param_gradient(i, j, std::move(grads.params[j]), last);
      release(at(dy, i));
      at(b.fwd, i) = forward_result<D, T>{};
      at(b.inputs, i).clear();
      at(b.indices, i) = index_buffer{};
      if (last || plan_.reshard_after_forward) release_gathered(i);
      sample_memory();
    }
    link_.send_gradients(dy, output_elements());
  }

  // Where op i's input j's boxed gradient is added: its producer's output gradient, or for a
  // chained slot its first reader's input gradient (which that reader boxes back once).
  buffer& chained_gradient(std::vector<std::vector<buffer>>& sums, std::vector<buffer>& dy, int i, std::size_t j) {
    const input_slot c = plan_.chained_from(i, j);
    if (c.op < 0) return at(dy, at(model_.op_inputs, i)[j].op);
    auto& s = at(sums, c.op);
    if (s.size() <= std::size_t(c.input)) s.resize(std::size_t(c.input) + 1);
    return s[std::size_t(c.input)];
  }

  // Micro-batch contribution g to the gradient of op i's parameter slot j, laid out
  // dual(compute), to the step's gradient sums (gradient_accumulator::add).
  void add_param_gradient(int i, std::size_t j, buffer&& g, bool last_micro_batch) {
    const int p = at(model_.ops, i).param_ids[j];
    gradients_.add(i, j, p, std::move(g), last_micro_batch, plan_.param(i, j).backward, at(model_.params, p).shape,
                   dual(sig(i).params[j]), profile_);
  }

  // Each parameter's summed gradient boxed to its update layout (parameter_store::synchronise); a
  // parameter held by several pipeline stages is then exchanged with them and summed. First the
  // side queue's gradient boxings are joined (train_step has done so; joining again is a no-op):
  // nothing below reads a gradient before that.
  void synchronise_gradients() {
    gradients_.join(profile_);
    store_.synchronise(gradients_.sums(), [&](int p, auto& grad) {
      link_.exchange_tied_gradient(p, grad);
      sample_memory();
    });
  }

  // The first parameter (by index, over all ranks) whose synchronised gradient shard holds NaN or
  // Inf stops training on every rank with the same message: one all-reduce (max) of a double.
  void check_gradients_finite(std::int64_t step_index) {
    const int n = store_.count();
    const double flag = everyone_all_reduce(store_.non_finite_flag(), reduce_kind::max);
    if (flag == 0) return;
    detail::fail_non_finite_gradient(model_, n - int(flag), step_index);
  }

  // The device's bytes in use now.
  std::int64_t heap_in_use() const { return std::int64_t(dev_.bytes_in_use()); }

  void sample_memory() {
    if (options_.measure_memory) peak_live_ = std::max(peak_live_, heap_in_use() - heap_at_start_);
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
      const input_slot copy = r.op < 0 ? input_slot{i, int(j)} : schedule().copy_read(i, j);
      if (copy.op >= 0) {  // a model input or a boxed copy (its own, or its chained slot's)
        ops.inputs.push_back(view(at(b.inputs, copy.op)[std::size_t(copy.input)]));
        continue;
      }
      const auto& outs = at(b.fwd, r.op).outputs;
      ops.inputs.push_back(outs.empty() ? std::span<const T>() : view(outs[0]));
    }
    for (std::size_t j = 0; j < n.param_ids.size(); ++j) {
      const bool direct = plan_.param(i, j).forward.size() == 0;
      ops.params.push_back(view(direct ? store_.param(n.param_ids[j]) : at(gathered_, i)[j]));
    }
    ops.indices = std::as_const(dev_).view(at(b.indices, i));
    return ops;
  }

  // The sum of every device's part, over the world communicator (reported, outside the plan's
  // bytes): one all-reduce per step whatever the micro-batches.
  double global_loss(double part) { return everyone_all_reduce(part, reduce_kind::sum); }

  // x reduced (sum or max) over every device of every pipeline stage: the stage's world, then
  // the stage axis.
  double everyone_all_reduce(double x, reduce_kind k) {
    x = detail::all_reduce_one(dev_, comm_.world(), x, k);
    return link_.pipe() ? detail::all_reduce_one(dev_, *link_.pipe(), x, k) : x;
  }

  // Elements of this device's shard of op o's first output, as a function of o (what the stage
  // link allocates for a message).
  auto output_elements() const {
    return [this](int o) {
      return std::size_t(local_shape(at(at(model_.ops, o).outputs, 0), layout{at(sig(o).outputs, 0), comm_.shape()}).elements());
    };
  }

  plan plan_;
  const graph& model_;  ///< plan_'s
  D& dev_;
  M& comm_;
  train_options options_;
  std::vector<input_kind> input_kinds_;
  token_order order_;  ///< the order the plan feeds tokens in (runtime/token_order_of.hpp)
  op_program<T, D> program_;  ///< a typed model's instances per op (run_instances); empty: dynamic dispatch
  detail::parameter_store<T, D, M, Sum> store_;          ///< parameters, their gradients, optimizer state
  detail::gradient_accumulator<T, D, M, Sum> gradients_;  ///< the step's gradient sums
  link link_;                                        ///< this device's pipeline stage and its messages
  std::vector<std::vector<buffer>> gathered_;  ///< per op slot: parameter boxed to compute, this step
  std::optional<step_schedule> schedule_;      ///< what the step keeps and reruns
  std::vector<buffer> kept_outputs_;
  std::deque<step_buffers> waiting_;  ///< micro-batches forward, not yet backward
  std::int64_t last_bytes_ = 0;
  std::int64_t heap_at_start_ = 0, peak_live_ = 0, peak_bytes_ = 0;
  step_profile profile_;
  detail::dynamic_loss_scale scale_{detail::mixed_precision_v<T> ? options_.loss_scale : 0, options_.loss_scale_window};
};

}  // namespace autoddl
