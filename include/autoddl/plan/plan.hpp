#pragma once
// A plan as a value: everything one training step runs, with nothing left to choose or price.
// search/ makes one from a solved problem (search/plan_of.hpp), plan files write and read one
// (search/plan_file.hpp), runtime/ executes one; none of them needs the others' code.
//
// A plan holds, for its model (one micro-batch of it):
//   per op       the signature it computes in, and per operand slot the boxing paths into it:
//                forward (the producer's output layout, or the parameter's storage, to the
//                op's layout) and backward (the gradient, back to the producer's dual layout or
//                to the parameter's summing layout); a chained input slot boxes from another
//                reader's input instead of from the producer (box once for all consumers);
//   per param    its storage, summing and update layouts (param_choice) and the paths of its
//                gradient's synchronisation (grad_sum -> update), of the updated slices back to
//                storage (update -> storage) and of the optimizer state's slice (storage -> update);
//   the step     mesh (one pipeline stage's), element type, micro-batches, recomputation, whether
//                gathered inputs and parameters are gathered again for backward, and the first op
//                of each pipeline stage.
// Example, one linear layer of a data-parallel plan on mesh 2:
//   op fc: X[S(0)] W[B] b[B] -> Y[S(0)]; W's storage [B], summed in [P], updated in [B];
//   sync path [P] -> [B] (one all-reduce); every other path empty.
// check_plan says whether a plan is whole: every path where it starts and ends, every layout of
// the mesh's rank; the executor relies on it.
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "autoddl/cost/boxing_path.hpp"
#include "autoddl/cost/dtype.hpp"
#include "autoddl/cost/memory.hpp"
#include "autoddl/error.hpp"
#include "autoddl/index.hpp"
#include "autoddl/models/graph.hpp"
#include "autoddl/ops/op.hpp"
#include "autoddl/ops/signatures.hpp"
#include "autoddl/sbp/layout.hpp"
#include "autoddl/text.hpp"

namespace autoddl {

/// A parameter's stored layout, the layout its gradient contributions are summed in before they
/// are synchronised (== update for a parameter with one use: nothing to sum), and the layout of
/// its optimizer state, which the synchronised gradient takes and the optimizer updates (==
/// storage, or under ZeRO stages 1 and 2 storage with its B axes split: the device updates its
/// slice of the stored parameter, then the slices are all-gathered to storage).
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

/// An op's input slot (op -1: none).
struct input_slot {
  int op = -1, input = -1;
  friend constexpr bool operator==(const input_slot&, const input_slot&) = default;
};

/// A graph shared by its copies (the plans made from one problem share its model), freed with the
/// last of them. Written here rather than taken from <memory>: in C++20 <memory>'s atomics bring
/// glibc's ::link into the global namespace, which makes `link` ambiguous beside autoddl::link in a
/// program with `using namespace autoddl` (the umbrella header includes this one). Copies are
/// counted without atomics: a plan and its copies stay on one thread.
class shared_graph {
 public:
  shared_graph() = default;
  explicit shared_graph(graph g) : box_(new holder{std::move(g), 1}) {}
  shared_graph(const shared_graph& o) noexcept : box_(o.box_) {
    if (box_) ++box_->owners;
  }
  shared_graph(shared_graph&& o) noexcept : box_(std::exchange(o.box_, nullptr)) {}
  shared_graph& operator=(shared_graph o) noexcept {
    std::swap(box_, o.box_);
    return *this;
  }
  ~shared_graph() {
    if (box_ && --box_->owners == 0) delete box_;
  }
  explicit operator bool() const { return box_ != nullptr; }
  const graph& operator*() const { return box_->g; }
  const graph* operator->() const { return &box_->g; }

 private:
  struct holder {
    graph g;
    long owners;
  };
  holder* box_ = nullptr;
};

/// The boxing into one operand slot: forward into the op's layout, backward its gradient back.
struct slot_boxing {
  boxing_path forward, backward;
};

/// One op of a plan.
struct op_plan {
  signature sig;
  std::vector<slot_boxing> inputs;  ///< per activation input (empty paths: read in place, or a model input)
  std::vector<input_slot> chained;  ///< per activation input: the slot it boxes from (op -1: its producer)
  std::vector<slot_boxing> params;  ///< per parameter slot: storage -> sig's layout, gradient -> grad_sum
};

/// One parameter of a plan.
struct param_plan {
  param_choice layouts;
  boxing_path sync;    ///< the summed gradient, grad_sum -> update
  boxing_path gather;  ///< the updated slices, update -> storage (empty where they agree)
  boxing_path slice;   ///< the optimizer state's part of the stored tensor, storage -> update
};

struct plan {
  shared_graph model;                  ///< one micro-batch of the model
  mesh_shape mesh;                     ///< the devices of one pipeline stage
  dtype type = dtype::fp32;
  int microbatches = 1;
  recompute_mode recompute = recompute_mode::none;
  /// Whether an input copy that gathers (larger on the device than its source) and that the op's
  /// backward reads is freed after the forward and boxed again from its kept source before the
  /// backward, rather than kept (sequence parallelism as Megatron-LM runs it; step_schedule).
  bool regather_inputs = true;
  /// Whether a gathered parameter (a non-empty forward path) is gathered before each op's forward
  /// and again before its backward, and freed after each (FSDP2's reshard_after_forward), rather
  /// than gathered at micro-batch 0's forward and kept until the last backward.
  bool reshard_after_forward = true;
  std::vector<int> stage_first_ops{0};  ///< the first op of each pipeline stage ({0}: no pipeline)
  std::vector<op_plan> ops;
  std::vector<param_plan> params;

  const graph& g() const { return *model; }
  int stages() const { return int(stage_first_ops.size()); }
  const signature& sig(int op) const { return at(ops, op).sig; }
  /// The paths into input slot j of op i (empty for a model input: it has no producer).
  const slot_boxing& input(int i, std::size_t j) const { return at(at(ops, i).inputs, j); }
  /// The paths into parameter slot j of op i.
  const slot_boxing& param(int i, std::size_t j) const { return at(at(ops, i).params, j); }
  /// The slot input j of op i is chained from (op -1: none, it boxes from its producer).
  input_slot chained_from(int i, std::size_t j) const { return at(at(ops, i).chained, j); }
  /// Whether input slot j of op i is a boxed copy rather than its producer's output read in place.
  bool boxes_input(int i, std::size_t j) const { return input(i, j).forward.size() > 0; }
  /// chained_from of every slot, per op.
  std::vector<std::vector<input_slot>> chains() const {
    std::vector<std::vector<input_slot>> r;
    for (const op_plan& o : ops) r.push_back(o.chained);
    return r;
  }
  /// boxes_input of every slot, per op.
  std::vector<std::vector<bool>> boxed_inputs() const {
    std::vector<std::vector<bool>> r(ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i)
      for (std::size_t j = 0; j < ops[i].inputs.size(); ++j) r[i].push_back(boxes_input(int(i), j));
    return r;
  }
};

namespace detail {

struct plan_checker {
  const plan& p;
  [[noreturn]] void bad(const std::string& what) const { fail<layout_error>("the plan is not whole: " + what); }

  void layout_of_mesh(const nd_sbp& l, const std::string& what) const {
    if (l.size() != p.mesh.size())
      bad(what + " " + to_string(l) + " has " + itos(l.size()) + " entries for mesh " + to_string(p.mesh) + " of " +
          itos(p.mesh.size()) + " axes");
  }
  void layouts_of_mesh(const std::vector<nd_sbp>& ls, std::size_t want, const std::string& what) const {
    if (ls.size() != want) bad(what + " lists " + itos(int(ls.size())) + " layouts, the op has " + itos(int(want)));
    for (std::size_t k = 0; k < ls.size(); ++k) layout_of_mesh(ls[k], what + " " + itos(int(k)));
  }
  // A path must run from `from` to `to` on the plan's mesh, one axis a step.
  void path(const boxing_path& b, const nd_sbp& from, const nd_sbp& to, const std::string& what) const {
    nd_sbp state = from;
    for (const boxing_step& s : b) {
      if (s.axis < 0 || s.axis >= p.mesh.size() || !(state[s.axis] == s.from) || s.group != p.mesh[s.axis])
        bad(what + ": step " + std::string(to_string(s.op)) + " on axis " + itos(s.axis) + " does not continue from " +
            to_string(state));
      state[s.axis] = s.to;
    }
    if (!(state == to))
      bad(what + " ends at " + to_string(state) + " where " + to_string(to) + " is wanted (it starts at " + to_string(from) + ")");
  }
  void op(int i) const {
    const graph& g = p.g();
    const op_node& n = at(g.ops, i);
    const op_plan& o = at(p.ops, i);
    const std::string where = "op '" + n.name + "'";
    layouts_of_mesh(o.sig.inputs, n.inputs.size(), where + " input");
    layouts_of_mesh(o.sig.params, n.param_ids.size(), where + " parameter");
    layouts_of_mesh(o.sig.outputs, n.outputs.size(), where + " output");
    if (o.inputs.size() != n.inputs.size() || o.chained.size() != n.inputs.size() || o.params.size() != n.param_ids.size())
      bad(where + " has paths for " + itos(int(o.inputs.size())) + " inputs and " + itos(int(o.params.size())) +
          " parameters, the op has " + itos(int(n.inputs.size())) + " and " + itos(int(n.param_ids.size())));
    for (std::size_t j = 0; j < n.inputs.size(); ++j) input(i, j);
    for (std::size_t j = 0; j < n.param_ids.size(); ++j) {
      const param_choice& c = at(p.params, n.param_ids[j]).layouts;
      const std::string what = where + " parameter " + itos(int(j));
      path(o.params[j].forward, c.storage, o.sig.params[j], what + "'s forward path");
      path(o.params[j].backward, dual(o.sig.params[j]), c.grad_sum, what + "'s gradient path");
    }
  }
  // Input j of op i: a model input reads in place; else its forward path runs from the producer's
  // output (or the chained slot's layout) to the op's, and its gradient back.
  void input(int i, std::size_t j) const {
    const op_plan& o = at(p.ops, i);
    const tensor_ref r = at(p.g().op_inputs, i)[j];
    const std::string what = "op '" + at(p.g().ops, i).name + "' input " + itos(int(j));
    const input_slot c = o.chained[j];
    if (r.op < 0) {
      if (o.inputs[j].forward.size() > 0 || o.inputs[j].backward.size() > 0 || c.op >= 0) bad(what + " is a model input, yet boxed");
      return;
    }
    if (c.op >= 0 && (c.op >= i || c.input < 0 || c.input >= int(at(p.ops, c.op).inputs.size()) ||
                      !(at(p.g().op_inputs, c.op)[std::size_t(c.input)] == r)))
      bad(what + " is chained from a slot that does not read the same tensor before it");
    const nd_sbp& source = c.op >= 0 ? at(p.ops, c.op).sig.inputs[std::size_t(c.input)] : at(at(p.ops, r.op).sig.outputs, r.index);
    path(o.inputs[j].forward, source, o.sig.inputs[j], what + "'s forward path");
    path(o.inputs[j].backward, dual(o.sig.inputs[j]), dual(source), what + "'s gradient path");
  }
  void param(int q) const {
    const param_plan& x = at(p.params, q);
    const std::string what = "parameter '" + at(p.g().params, q).name + "'";
    layout_of_mesh(x.layouts.storage, what + " storage");
    layout_of_mesh(x.layouts.grad_sum, what + " summing layout");
    layout_of_mesh(x.layouts.update, what + " update layout");
    path(x.sync, x.layouts.grad_sum, x.layouts.update, what + "'s synchronisation path");
    path(x.gather, x.layouts.update, x.layouts.storage, what + "'s gather path");
    path(x.slice, x.layouts.storage, x.layouts.update, what + "'s slice path");
  }
};

}  // namespace detail

/// Checks that `p` is whole: a model, an op plan per op and a param plan per parameter, every
/// layout of the mesh's rank, and every path a chain of single-axis steps from its source layout
/// to its target (a plan made by the planner is; one read from a file may not be).
/// @throws layout_error naming the first op or parameter that is not, and what is wrong.
inline void check_plan(const plan& p) {
  if (!p.model) detail::fail<layout_error>("the plan is not whole: it has no model");
  const graph& g = p.g();
  if (p.ops.size() != g.ops.size() || p.params.size() != g.params.size())
    detail::fail<layout_error>("the plan is not whole: it lays out " + detail::itos(int(p.ops.size())) + " ops and " +
                               detail::itos(int(p.params.size())) + " parameters, its model has " +
                               detail::itos(int(g.ops.size())) + " and " + detail::itos(int(g.params.size())));
  if (p.microbatches < 1) detail::fail<layout_error>("the plan is not whole: it runs " + detail::itos(p.microbatches) + " micro-batches");
  bool cuts = !p.stage_first_ops.empty() && p.stage_first_ops.front() == 0;
  for (std::size_t s = 1; cuts && s < p.stage_first_ops.size(); ++s)
    cuts = p.stage_first_ops[s - 1] < p.stage_first_ops[s] && p.stage_first_ops[s] < int(g.ops.size());
  if (!cuts) detail::fail<layout_error>("the plan is not whole: its pipeline stages must begin at ascending ops, the first at op 0");
  const detail::plan_checker c{p};
  for (int q = 0; q < int(g.params.size()); ++q) c.param(q);
  for (int i = 0; i < int(g.ops.size()); ++i) c.op(i);
}

}  // namespace autoddl
