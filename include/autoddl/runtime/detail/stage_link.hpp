#pragma once
// One device's link to the other stages of a pipeline: which ops and parameters are its stage's,
// the activations it receives from stage s-1 and sends to stage s+1 (and their gradients back),
// and the exchange of a tied parameter's gradient between the stages that use it. Sends are
// posted and completed later; receives block. Without a pipeline the link is one stage holding
// the whole model, and sends nothing.
#include <algorithm>
#include <cstdint>
#include <deque>
#include <span>
#include <utility>
#include <vector>

#include "autoddl/error.hpp"
#include "autoddl/index.hpp"
#include "autoddl/models/graph.hpp"
#include "autoddl/runtime/detail/device_buffers.hpp"
#include "autoddl/runtime/detail/precision.hpp"
#include "autoddl/runtime/op_kernels.hpp"
#include "autoddl/runtime/pipeline_schedule.hpp"
#include "autoddl/text.hpp"

namespace autoddl::detail {

// What a non-blocking send of C returns (C::isend); where C has none, a request that is always
// complete (the trainer then refuses pipelines, so none is ever made).
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

/// This device's stage of a pipeline over communicator Pipe (the stage axis), and the messages it
/// exchanges with its neighbours. `elements_of(o)` below: elements of this device's shard of op
/// o's first output.
template <class T, Device D, class Pipe>
class stage_link {
 public:
  using buffer = buffer_t<D, T>;
  using send_request = typename send_request_of<Pipe, T>::type;
  static constexpr bool pipe_sends = requires(Pipe& c, std::span<const T> v) { c.isend(v, 0, 0); };

  /// The whole model as one stage: every op and every parameter here.
  stage_link(D& dev, const graph& model) : dev_(&dev), buffers_(dev), model_(&model), end_op_(int(model.ops.size())) {
    assign(held_, model.params.size(), 1);
    resize(tied_stages_, model.params.size());
  }

  /// This device as stage st.stage of the pipeline st. Throws error on a stage that does not fit
  /// the model or the pipe, or a communicator without non-blocking sends.
  void set_stage(const pipeline_stage<Pipe>& st) {
    check_stage(st);
    const int nops = int(model_->ops.size()), p = st.stages();
    stage_ = st.stage;
    stages_ = p;
    pipe_ = st.pipe;
    first_op_ = at(st.first_ops, stage_);
    end_op_ = stage_ + 1 < p ? at(st.first_ops, stage_ + 1) : nops;
    find_boundaries(st.first_ops);
    find_stage_params(st.first_ops);
  }

  int stage() const { return stage_; }
  int stages() const { return stages_; }
  bool last_stage() const { return stage_ == stages_ - 1; }
  /// This stage's ops: [first_op(), end_op()).
  int first_op() const { return first_op_; }
  int end_op() const { return end_op_; }
  /// The stage axis (null without a pipeline).
  Pipe* pipe() const { return pipe_; }
  /// Per parameter: 1 where this stage's ops use it.
  const std::vector<char>& held() const { return held_; }
  /// Bytes sent on the stage axis so far (activations, gradients, tied gradients).
  std::int64_t bytes_sent() const { return bytes_sent_; }
  /// Seconds spent waiting for messages since the last reset_wait.
  double waited_s() const { return waited_s_; }
  void reset_wait() { waited_s_ = 0; }

  /// Before a stage's forward: the outputs of earlier stages that it or a later stage reads, from
  /// stage s - 1 in ascending op order (as that stage sends them), each as its producer made it.
  template <class ElementsOf>
  void receive_activations(std::vector<forward_result<D, T>>& fwd, ElementsOf elements_of) {
    for (int o : recv_fwd_) {
      auto& outs = at(fwd, o).outputs;
      outs.push_back(buffers_.alloc(elements_of(o)));
      receive(buffers_.view(outs[0]), stage_ - 1, tag_activation);
    }
  }
  /// After it: the outputs later stages read, to stage s + 1; held (in fwd) until backward.
  void send_activations(const std::vector<forward_result<D, T>>& fwd, std::vector<send_request>& sends) {
    for (int o : send_fwd_) sends.push_back(post_send(buffers_.view(at(at(fwd, o).outputs, 0)), stage_ + 1, tag_activation));
  }
  /// Before a stage's backward: the gradients of what it sent, from stage s + 1, added into dy.
  template <class ElementsOf>
  void receive_gradients(std::vector<buffer>& dy, ElementsOf elements_of) {
    for (int o : send_fwd_) {
      buffer g = buffers_.alloc(elements_of(o));
      receive(buffers_.view(g), stage_ + 1, tag_gradient);
      buffers_.accumulate(at(dy, o), std::move(g));
    }
  }
  /// After it: the gradients of what it received, to stage s - 1 (kept until sent).
  template <class ElementsOf>
  void send_gradients(std::vector<buffer>& dy, ElementsOf elements_of) {
    for (int o : recv_fwd_) {
      buffer& g = at(dy, o);
      if (g.empty()) g = buffers_.alloc(elements_of(o));
      send_request r = post_send(buffers_.view(std::as_const(g)), stage_ - 1, tag_gradient);
      gradient_sends_.emplace_back(std::move(g), std::move(r));
    }
    while (!gradient_sends_.empty() && gradient_sends_.front().second.test()) gradient_sends_.pop_front();
  }
  /// At the end of a step: every gradient send completed.
  void finish_sends() {
    auto t = step_clock::now();
    for (auto& [g, r] : gradient_sends_) r.wait();
    gradient_sends_.clear();
    waited_s_ += lap(t);
  }

  /// A parameter held by several pipeline stages: each sends its synchronised gradient `grad` to
  /// the others and sums all of them in stage order, so every copy takes the same update.
  void exchange_tied_gradient(int p, buffer& grad) {
    const std::vector<int>& users = at(tied_stages_, p);
    if (users.size() < 2) return;
    buffer mine = std::move(grad);
    std::vector<send_request> sends;
    for (int t : users)
      if (t != stage_) sends.push_back(post_send(buffers_.view(std::as_const(mine)), t, tag_tied));
    buffer sum;
    for (int t : users) {
      if (t == stage_) {
        buffers_.accumulate(sum, buffers_.clone(mine));
        continue;
      }
      buffer theirs = buffers_.alloc(mine.size());
      receive(buffers_.view(theirs), t, tag_tied);
      buffers_.accumulate(sum, std::move(theirs));
    }
    for (send_request& r : sends) r.wait();
    grad = std::move(sum);
  }
  /// A float gradient of a 16-bit T (precision.hpp) is exchanged in T, as the plan prices it.
  template <class G>
    requires(!std::is_same_v<G, buffer>)
  void exchange_tied_gradient(int p, G& grad) {
    if (at(tied_stages_, p).size() < 2) return;
    buffer low = converted<T, master_t<T>>(*dev_, std::move(grad));
    exchange_tied_gradient(p, low);
    grad = converted<master_t<T>, T>(*dev_, std::move(low));
  }

 private:
  static constexpr int tag_activation = 1, tag_gradient = 2, tag_tied = 3;

  static int stage_of(const std::vector<int>& first_ops, int op) {
    return int(std::upper_bound(first_ops.begin(), first_ops.end(), op) - first_ops.begin()) - 1;
  }

  void check_stage(const pipeline_stage<Pipe>& st) const {
    if constexpr (!pipe_sends)
      fail<error>("this communicator has no non-blocking sends, so it cannot run pipeline stages; run pipelines on MPI ranks");
    const int nops = int(model_->ops.size()), p = st.stages();
    bool ok = p >= 1 && st.stage >= 0 && st.stage < p && at(st.first_ops, 0) == 0 && st.pipe != nullptr;
    for (int i = 1; ok && i < p; ++i) ok = at(st.first_ops, i - 1) < at(st.first_ops, i) && at(st.first_ops, i) < nops;
    if (!ok)
      fail<error>("pipeline stage " + itos(st.stage) + " of " + itos(p) +
                  ": the stages must begin at op 0 and at ascending ops of the model's " + itos(nops) +
                  ", one communicator over the stages given");
    if (st.pipe->size() != p || st.pipe->rank() != st.stage)
      fail<error>("the stage axis communicator has " + itos(st.pipe->size()) + " ranks and this device is its rank " +
                  itos(st.pipe->rank()) + ", but the pipeline has " + itos(p) + " stages and this is stage " + itos(st.stage));
    if (stage_of(st.first_ops, model_->loss_op) != p - 1)
      fail<error>("the loss op '" + at(model_->ops, model_->loss_op).name + "' must be in the last pipeline stage");
  }

  // The outputs crossing into and out of this stage: recv_fwd_ (made before it, read by it or
  // later) and send_fwd_ (made before its end, read after it), ascending.
  void find_boundaries(const std::vector<int>& first_ops) {
    const graph& model = *model_;
    const int nops = int(model.ops.size());
    std::vector<int> furthest(static_cast<std::size_t>(nops), -1);  // the last op reading each op's first output
    for (int i = 0; i < nops; ++i)
      for (const tensor_ref& r : at(model.op_inputs, i)) {
        if (r.op < 0) continue;
        if (r.index != 0 && stage_of(first_ops, r.op) != stage_of(first_ops, i))
          fail<error>("op '" + at(model.ops, i).name + "' reads output " + itos(r.index) + " of op '" +
                      at(model.ops, r.op).name + "' from another pipeline stage; only first outputs cross stages");
        at(furthest, r.op) = std::max(at(furthest, r.op), i);
      }
    for (int o = 0; o < nops; ++o) {
      if (o < first_op_ && at(furthest, o) >= first_op_) recv_fwd_.push_back(o);
      if (o < end_op_ && at(furthest, o) >= end_op_) send_fwd_.push_back(o);
    }
  }

  // The parameters this stage's ops use, and the stages sharing each used on several.
  void find_stage_params(const std::vector<int>& first_ops) {
    const graph& model = *model_;
    const int np = int(model.params.size());
    std::vector<std::vector<int>> users(static_cast<std::size_t>(np));
    for (int i = 0; i < int(model.ops.size()); ++i)
      for (int q : at(model.ops, i).param_ids) {
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
    bytes_sent_ += std::int64_t(v.size() * sizeof(T));
    if constexpr (pipe_sends) return pipe_->isend(v, to, tag);
    else return {};
  }
  void receive(std::span<T> v, int from, int tag) {
    auto t = step_clock::now();
    if constexpr (pipe_sends) pipe_->recv(v, from, tag);
    waited_s_ += lap(t);
  }

  D* dev_;
  device_buffers<T, D> buffers_;
  const graph* model_;
  int stage_ = 0, stages_ = 1;     ///< this device's pipeline stage, of stages_
  int first_op_ = 0, end_op_ = 0;  ///< its ops
  Pipe* pipe_ = nullptr;           ///< the stage axis (null: no pipeline)
  std::vector<int> recv_fwd_, send_fwd_;       ///< outputs received from the stage before, sent to the next
  std::vector<char> held_;                     ///< per parameter: kept here
  std::vector<std::vector<int>> tied_stages_;  ///< per parameter held on several stages: those stages
  std::deque<std::pair<buffer, send_request>> gradient_sends_;
  std::int64_t bytes_sent_ = 0;
  double waited_s_ = 0;
};

}  // namespace autoddl::detail
