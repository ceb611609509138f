#pragma once
// The opaque test device: proof that the executor (runtime/trainer.hpp) is generic without a GPU.
//
// opaque_device keeps its buffers in host memory but never lets the host reach them: a buffer
// has no data() (only size and empty), and view() hands out spans whose pointers are the real
// address with bit 62 flipped, a non-canonical x86-64 / AArch64 address, so any dereference
// outside the device's own primitives faults at once. Its primitives flip the bit back and run
// cpu_device's. opaque_mesh_comm wraps a MeshCommunicator the same way (as a CUDA-aware MPI or
// NCCL reads GPU memory): it takes the device's spans, flips them back and calls the wrapped
// communicator. A span of host memory handed to it comes out non-canonical and faults too, so
// the executor passing a host buffer where a GPU would need device memory is caught as well.
//
// side_queue_opaque_device (basic_opaque_device<true>) also offers a side queue (SideQueue,
// backend/communicator.hpp) that DEFERS: a primitive or a collective of the paired
// opaque_mesh_comm called while the side queue is current is recorded (a closure over its spans)
// and runs only at join_side_queue, in call order, so every rank runs its deferred collectives in
// the same order there. A dependency the executor forgets shows at once:
//   - a main-queue primitive or collective that writes memory a pending side step reads or
//     writes, or reads memory one writes, throws std::logic_error naming the primitive;
//   - a buffer a pending side step uses, destroyed on the main queue before the join, aborts;
//   - a read of a gradient before the join reads the value from before the side queue's work
//     (and the comparison with the serial run fails).
// A buffer destroyed while the side queue is current keeps its storage until the join (the
// release in the side queue's order that the contract asks of the device); like cuda_device's
// count, bytes_in_use() stops counting it at its destruction.
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "autoddl/backend/communicator.hpp"
#include "autoddl/backend/cpu/device.hpp"

namespace autoddl::testing {

namespace detail {
inline constexpr std::uintptr_t opaque_bit = std::uintptr_t(1) << 62;

/// The span with its address's bit 62 flipped: device <-> host address. Null stays null, so an
/// empty span stays empty; offsets taken on a flipped span survive the flip back (no carry
/// reaches bit 62 from a user-space address).
template <class T>
std::span<T> flip(std::span<T> s) {
  if (s.data() == nullptr) return s;
  return {reinterpret_cast<T*>(reinterpret_cast<std::uintptr_t>(s.data()) ^ opaque_bit), s.size()};
}

template <class A>
struct is_span : std::false_type {};
template <class T, std::size_t E>
struct is_span<std::span<T, E>> : std::true_type {};

/// Host memory [lo, hi) a queued step touches; writes unless the span was of const elements.
struct touched {
  std::uintptr_t lo = 0, hi = 0;
  bool writes = false;
};

template <class A>
void note(std::vector<touched>& out, const A& a) {
  if constexpr (is_span<A>::value) {
    if (a.empty()) return;
    const auto lo = reinterpret_cast<std::uintptr_t>(a.data());
    out.push_back({lo, lo + a.size_bytes(), !std::is_const_v<typename A::element_type>});
  }
}

/// The deferring side queue shared by side_queue_opaque_device, its buffers and its paired
/// opaque_mesh_comm: the steps recorded since the last join, what they touch, and the storage of
/// buffers destroyed while it was current.
class deferred_queue {
 public:
  bool current() const { return current_; }
  void set_current(bool on) { current_ = on; }

  /// f(x...) now on the main queue (after the hazard check), or recorded on the side queue
  /// (returning R{}: a deferred collective cannot know its bytes yet). x: real (flipped back)
  /// spans and plain values, copied into the record.
  template <class F, class... X>
  auto submit(const char* what, F f, X... x) -> decltype(f(x...)) {
    using R = decltype(f(x...));
    std::vector<touched> t;
    (note(t, x), ...);
    if (current_) {
      touched_.insert(touched_.end(), t.begin(), t.end());
      steps_.push_back([f, x...]() mutable { (void)f(x...); });
      ++deferred_;
      if constexpr (!std::is_void_v<R>) return R{};
      else return;
    }
    for (const touched& m : t) check_main(m, what);
    return f(x...);
  }

  /// A buffer's storage at its destruction: kept until the join while the side queue is current;
  /// on the main queue, a buffer a pending step uses is a missing join (abort: a destructor).
  template <class V>
  void dispose(V&& v) {
    if (v.empty()) return;
    const auto lo = reinterpret_cast<std::uintptr_t>(v.data());
    const touched range{lo, lo + v.size() * sizeof(v[0]), true};
    if (current_) {
      retained_bytes_ += std::int64_t(range.hi - range.lo);
      retained_.push_back(std::make_shared<std::remove_cvref_t<V>>(std::move(v)));
      return;
    }
    for (const touched& p : touched_)
      if (p.lo < range.hi && range.lo < p.hi) {
        std::fputs("opaque_device: a buffer a pending side-queue step uses was destroyed on the main queue before "
                   "join_side_queue (the executor must keep it alive until the join)\n", stderr);
        std::abort();
      }
  }

  /// Runs the recorded steps in order, then releases the kept storage.
  void join() {
    const bool was = current_;
    current_ = false;
    for (auto& f : steps_) f();
    current_ = was;
    steps_.clear();
    touched_.clear();
    retained_.clear();
    retained_bytes_ = 0;
    ++joins_;
  }

  std::int64_t deferred_steps() const { return deferred_; }
  std::int64_t joins() const { return joins_; }
  std::int64_t pending_steps() const { return std::int64_t(steps_.size()); }
  std::int64_t retained_bytes() const { return retained_bytes_; }

 private:
  // A main-queue access m against the pending side steps: a write that meets anything they
  // touch, or a read that meets what they write.
  void check_main(const touched& m, const char* what) const {
    for (const touched& p : touched_)
      if (p.lo < m.hi && m.lo < p.hi && (m.writes || p.writes))
        throw std::logic_error(std::string("opaque_device: main-queue ") + what + " touches memory a pending side-queue "
                               "step " + (p.writes ? "writes" : "reads") + "; join_side_queue first");
  }

  bool current_ = false;
  std::vector<std::function<void()>> steps_;
  std::vector<touched> touched_;
  std::vector<std::shared_ptr<void>> retained_;
  std::int64_t retained_bytes_ = 0, deferred_ = 0, joins_ = 0;
};

/// f(x...) through q (null: at once, unchecked: the device without a side queue).
template <class F, class... X>
auto submit(deferred_queue* q, const char* what, F f, X... x) -> decltype(f(x...)) {
  if (q) return q->submit(what, f, x...);
  return f(x...);
}

/// A primitive's argument as cpu_device sees it: spans flipped back, the rest as they came.
template <class A>
decltype(auto) open(A&& a) {
  if constexpr (is_span<std::remove_cvref_t<A>>::value)
    return flip(a);
  else
    return std::forward<A>(a);
}
}  // namespace detail

template <bool Side>
class basic_opaque_device;

/// n elements of host memory that only the opaque device reaches.
template <class T>
class opaque_buffer {
 public:
  opaque_buffer() = default;
  opaque_buffer(opaque_buffer&& o) noexcept : data_(std::move(o.data_)), queue_(std::exchange(o.queue_, nullptr)) {
    o.data_ = {};
  }
  opaque_buffer& operator=(opaque_buffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::move(o.data_);
      o.data_ = {};
      queue_ = std::exchange(o.queue_, nullptr);
    }
    return *this;
  }
  ~opaque_buffer() { release(); }
  std::size_t size() const { return data_.size(); }
  bool empty() const { return data_.empty(); }

 private:
  template <bool>
  friend class basic_opaque_device;
  opaque_buffer(std::size_t n, detail::deferred_queue* q) : data_(n, T{}), queue_(q) {}
  // With a side queue, the queue decides when the storage goes (deferred_queue::dispose).
  void release() noexcept {
    if (queue_) queue_->dispose(std::move(data_));
    data_ = {};
    queue_ = nullptr;
  }
  buffer_t<cpu_device, T> data_;  // counted as cpu_device's buffers are (bytes_in_use)
  detail::deferred_queue* queue_ = nullptr;
};

// Each primitive: flip the spans back and run cpu_device's (recorded instead on the side queue).
#define AUTODDL_OPAQUE_PRIMITIVE(name)                                                                     \
  template <class... A>                                                                                    \
  auto name(A&&... a)->decltype(std::declval<cpu_device&>().name(detail::open(std::forward<A>(a))...)) {   \
    return detail::submit(queue(), #name, [this](auto... x) { return cpu_.name(x...); },                   \
                          detail::open(std::forward<A>(a))...);                                            \
  }

/// Side: whether it offers the deferring side queue (side_queue_opaque_device).
template <bool Side>
class basic_opaque_device {
 public:
  template <class T>
  using buffer = opaque_buffer<T>;

  basic_opaque_device() = default;
  basic_opaque_device(const basic_opaque_device&) = delete;  // buffers point at its queue
  basic_opaque_device& operator=(const basic_opaque_device&) = delete;

  template <class T>
  buffer<T> alloc(std::size_t n) {
    ++allocations_;
    return buffer<T>(n, queue());
  }
  template <class T>
  std::span<T> view(buffer<T>& b) {
    return detail::flip(std::span<T>(b.data_.data(), b.data_.size()));
  }
  template <class T>
  std::span<const T> view(const buffer<T>& b) const {
    return detail::flip(std::span<const T>(b.data_.data(), b.data_.size()));
  }
  /// host -> device: the host span is real, the device span flipped.
  template <class T>
  void upload(std::span<const T> host, std::span<T> dst) {
    ++uploads_;
    main_only("upload");
    detail::submit(queue(), "upload", [this, host](std::span<T> d) { cpu_.upload(host, d); }, detail::flip(dst));
  }
  template <class T>
  void download(std::span<const T> src, std::span<T> host) {
    ++downloads_;
    main_only("download");
    detail::submit(queue(), "download", [this, host](std::span<const T> s) { cpu_.download(s, host); }, detail::flip(src));
  }
  template <class T>
  bool all_finite(std::span<const T> x) const {
    main_only("all_finite");
    return detail::submit(queue(), "all_finite", [this](std::span<const T> s) { return cpu_.all_finite(s); },
                          detail::flip(x));
  }
  /// Waits for the main queue only (a no-op here); the side queue's steps wait for the join.
  void synchronize() const {}
  /// cpu_device's count less the storage kept for pending side steps of destroyed buffers.
  std::int64_t bytes_in_use() const { return cpu_.bytes_in_use() - (Side ? queue_.retained_bytes() : 0); }

  // ---- the side queue (Side only; the contract: backend/communicator.hpp, SideQueue) ----
  /// Later primitives and m's collectives are recorded, to run at the join.
  template <class M>
    requires Side && requires(M& m, detail::deferred_queue* q) { m.attach_side_queue(q); }
  void use_side_queue(M& m) {
    m.attach_side_queue(queue());
    queue_.set_current(true);
  }
  template <class M>
    requires Side && requires(M& m, detail::deferred_queue* q) { m.attach_side_queue(q); }
  void use_main_queue(M&) {
    queue_.set_current(false);
  }
  /// Runs every recorded step, in order.
  template <class M>
    requires Side && requires(M& m, detail::deferred_queue* q) { m.attach_side_queue(q); }
  void join_side_queue(M&) {
    queue_.join();
  }
  /// Steps recorded on the side queue so far (all joins), joins so far, steps not yet run.
  std::int64_t deferred_steps() const { return queue_.deferred_steps(); }
  std::int64_t joins() const { return queue_.joins(); }
  std::int64_t pending_steps() const { return queue_.pending_steps(); }

  AUTODDL_OPAQUE_PRIMITIVE(copy)
  AUTODDL_OPAQUE_PRIMITIVE(fill)
  AUTODDL_OPAQUE_PRIMITIVE(copy_rows)
  AUTODDL_OPAQUE_PRIMITIVE(gemm)
  AUTODDL_OPAQUE_PRIMITIVE(add)
  AUTODDL_OPAQUE_PRIMITIVE(axpy)
  AUTODDL_OPAQUE_PRIMITIVE(scale)
  AUTODDL_OPAQUE_PRIMITIVE(permute_0213)
  AUTODDL_OPAQUE_PRIMITIVE(bias_add)
  AUTODDL_OPAQUE_PRIMITIVE(bias_grad)
  AUTODDL_OPAQUE_PRIMITIVE(relu_fwd)
  AUTODDL_OPAQUE_PRIMITIVE(relu_bwd)
  AUTODDL_OPAQUE_PRIMITIVE(gelu_fwd)
  AUTODDL_OPAQUE_PRIMITIVE(gelu_bwd)
  AUTODDL_OPAQUE_PRIMITIVE(silu_fwd)
  AUTODDL_OPAQUE_PRIMITIVE(silu_bwd)
  AUTODDL_OPAQUE_PRIMITIVE(mul)
  AUTODDL_OPAQUE_PRIMITIVE(rotary)
  AUTODDL_OPAQUE_PRIMITIVE(rmsnorm_fwd)
  AUTODDL_OPAQUE_PRIMITIVE(rmsnorm_bwd)
  AUTODDL_OPAQUE_PRIMITIVE(layernorm_fwd)
  AUTODDL_OPAQUE_PRIMITIVE(layernorm_bwd)
  AUTODDL_OPAQUE_PRIMITIVE(softmax_fwd)
  AUTODDL_OPAQUE_PRIMITIVE(softmax_bwd)
  AUTODDL_OPAQUE_PRIMITIVE(scale_causal_mask)
  AUTODDL_OPAQUE_PRIMITIVE(attention_fwd)
  AUTODDL_OPAQUE_PRIMITIVE(attention_bwd)
  AUTODDL_OPAQUE_PRIMITIVE(gather_rows)
  AUTODDL_OPAQUE_PRIMITIVE(scatter_add_rows)
  AUTODDL_OPAQUE_PRIMITIVE(im2col)
  AUTODDL_OPAQUE_PRIMITIVE(col2im)
  AUTODDL_OPAQUE_PRIMITIVE(max_pool_fwd)
  AUTODDL_OPAQUE_PRIMITIVE(max_pool_bwd)
  AUTODDL_OPAQUE_PRIMITIVE(dropout)
  AUTODDL_OPAQUE_PRIMITIVE(row_max)
  AUTODDL_OPAQUE_PRIMITIVE(xent_stats)
  AUTODDL_OPAQUE_PRIMITIVE(xent_loss)
  AUTODDL_OPAQUE_PRIMITIVE(xent_bwd)
  AUTODDL_OPAQUE_PRIMITIVE(sgd_momentum)
  AUTODDL_OPAQUE_PRIMITIVE(adam)
  AUTODDL_OPAQUE_PRIMITIVE(topk_experts)
  AUTODDL_OPAQUE_PRIMITIVE(topk_gates)
  AUTODDL_OPAQUE_PRIMITIVE(topk_gates_bwd)
  AUTODDL_OPAQUE_PRIMITIVE(balance_loss)
  AUTODDL_OPAQUE_PRIMITIVE(balance_loss_bwd)
  AUTODDL_OPAQUE_PRIMITIVE(moe_slots)
  AUTODDL_OPAQUE_PRIMITIVE(combine_rows)
  AUTODDL_OPAQUE_PRIMITIVE(combine_rows_bwd)

  /// Host crossings so far (a test can check that a step downloads only what users read).
  std::int64_t uploads() const { return uploads_; }
  std::int64_t downloads() const { return downloads_; }
  std::int64_t allocations() const { return allocations_; }

 private:
  detail::deferred_queue* queue() const { return Side ? &queue_ : nullptr; }
  // The host waits for what it reads: never on the side queue (the contract's rule).
  void main_only(const char* what) const {
    if (Side && queue_.current())
      throw std::logic_error(std::string("opaque_device: ") + what + " called while the side queue is current");
  }

  cpu_device cpu_;
  mutable detail::deferred_queue queue_;  // unused without Side
  std::int64_t uploads_ = 0, downloads_ = 0, allocations_ = 0;
};

#undef AUTODDL_OPAQUE_PRIMITIVE

/// The opaque device without a side queue: every step at once, in order (as cpu_device).
using opaque_device = basic_opaque_device<false>;
/// The opaque device with the deferring side queue.
using side_queue_opaque_device = basic_opaque_device<true>;

static_assert(Device<opaque_device>, "opaque_device must model autoddl::Device");
static_assert(Device<side_queue_opaque_device>, "side_queue_opaque_device must model autoddl::Device");

/// An axis communicator over opaque_device memory: flips the spans back, then calls C's. Once
/// attached to a deferring side queue (attach_side_queue), its collectives are recorded there
/// while the side queue is current, and checked against the pending steps otherwise.
/// (Point-to-point calls, a pipeline's stage axis, are the main queue's and run at once.)
template <class C>
class opaque_axis_comm {
 public:
  opaque_axis_comm() = default;
  explicit opaque_axis_comm(C* c) : c_(c) {}
  void attach_side_queue(detail::deferred_queue* q) { queue_ = q; }
  int rank() const { return c_->rank(); }
  int size() const { return c_->size(); }
  std::int64_t bytes_sent() const { return c_->bytes_sent(); }
  template <class T>
  std::int64_t all_gather(std::span<T> buf) {
    return detail::submit(queue_, "all_gather", [c = c_](std::span<T> b) { return c->all_gather(b); }, detail::flip(buf));
  }
  template <class T>
  std::int64_t reduce_scatter(std::span<T> buf) {
    return detail::submit(queue_, "reduce_scatter", [c = c_](std::span<T> b) { return c->reduce_scatter(b); },
                          detail::flip(buf));
  }
  template <class T>
  std::int64_t all_reduce(std::span<T> buf) {
    return detail::submit(queue_, "all_reduce", [c = c_](std::span<T> b) { return c->all_reduce(b); }, detail::flip(buf));
  }
  template <class T>
  std::int64_t all_reduce(std::span<T> buf, reduce_kind k) {
    return detail::submit(queue_, "all_reduce", [c = c_, k](std::span<T> b) { return c->all_reduce(b, k); },
                          detail::flip(buf));
  }
  template <class T>
  std::int64_t all_to_all(std::span<const T> in, std::span<T> out) {
    return detail::submit(queue_, "all_to_all", [c = c_](std::span<const T> i, std::span<T> o) { return c->all_to_all(i, o); },
                          detail::flip(in), detail::flip(out));
  }
  template <class T>
  std::int64_t broadcast(std::span<T> buf, int root) {
    return detail::submit(queue_, "broadcast", [c = c_, root](std::span<T> b) { return c->broadcast(b, root); },
                          detail::flip(buf));
  }
  template <class T>
  auto send(std::span<const T> buf, int peer) { return c_->send(detail::flip(buf), peer); }
  template <class T>
  auto recv(std::span<T> buf, int peer) { return c_->recv(detail::flip(buf), peer); }
  // a pipeline's stage axis: non-blocking sends, tagged receives
  template <class T>
  auto isend(std::span<const T> buf, int peer, int tag) { return c_->isend(detail::flip(buf), peer, tag); }
  template <class T>
  auto recv(std::span<T> buf, int peer, int tag) { return c_->recv(detail::flip(buf), peer, tag); }

 private:
  C* c_ = nullptr;
  detail::deferred_queue* queue_ = nullptr;
};

/// A MeshCommunicator over opaque_device memory, wrapping M (e.g. mpi::mpi_mesh_comm).
template <class M>
class opaque_mesh_comm {
 public:
  using axis_comm = opaque_axis_comm<std::remove_reference_t<decltype(std::declval<M&>().world())>>;
  explicit opaque_mesh_comm(M& m) : m_(m), world_(&m.world()) {
    for (int a = 0; a < m.shape().size(); ++a) axes_.emplace_back(&m.axis(a));
  }
  decltype(auto) shape() const { return m_.shape(); }
  int rank() const { return m_.rank(); }
  decltype(auto) coords() const { return m_.coords(); }
  std::int64_t bytes_sent() const { return m_.bytes_sent(); }
  axis_comm& world() { return world_; }
  axis_comm& axis(int a) { return axes_.at(std::size_t(a)); }
  /// Pairs every axis communicator with side_queue_opaque_device's side queue (its use_side_queue).
  void attach_side_queue(detail::deferred_queue* q) {
    world_.attach_side_queue(q);
    for (auto& a : axes_) a.attach_side_queue(q);
  }

 private:
  M& m_;
  axis_comm world_;
  std::vector<axis_comm> axes_;
};

}  // namespace autoddl::testing
