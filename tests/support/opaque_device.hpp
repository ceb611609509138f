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
#include <concepts>
#include <cstdint>
#include <span>
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

/// A primitive's argument as cpu_device sees it: spans flipped back, the rest as they came.
template <class A>
decltype(auto) open(A&& a) {
  if constexpr (is_span<std::remove_cvref_t<A>>::value)
    return flip(a);
  else
    return std::forward<A>(a);
}
}  // namespace detail

class opaque_device;

/// n elements of host memory that only opaque_device reaches.
template <class T>
class opaque_buffer {
 public:
  opaque_buffer() = default;
  std::size_t size() const { return data_.size(); }
  bool empty() const { return data_.empty(); }

 private:
  friend class opaque_device;
  explicit opaque_buffer(std::size_t n) : data_(n, T{}) {}
  buffer_t<cpu_device, T> data_;  // counted as cpu_device's buffers are (bytes_in_use)
};

// Each primitive: flip the spans back and run cpu_device's.
#define AUTODDL_OPAQUE_PRIMITIVE(name)                                                      \
  template <class... A>                                                                     \
  auto name(A&&... a)->decltype(std::declval<cpu_device&>().name(detail::open(std::forward<A>(a))...)) { \
    return cpu_.name(detail::open(std::forward<A>(a))...);                                  \
  }

class opaque_device {
 public:
  template <class T>
  using buffer = opaque_buffer<T>;

  template <class T>
  buffer<T> alloc(std::size_t n) {
    ++allocations_;
    return buffer<T>(n);
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
    cpu_.upload(host, detail::flip(dst));
  }
  template <class T>
  void download(std::span<const T> src, std::span<T> host) {
    ++downloads_;
    cpu_.download(detail::flip(src), host);
  }
  template <class T>
  bool all_finite(std::span<const T> x) const {
    return cpu_.all_finite(detail::flip(x));
  }
  void synchronize() const {}
  std::int64_t bytes_in_use() const { return cpu_.bytes_in_use(); }

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
  AUTODDL_OPAQUE_PRIMITIVE(layernorm_fwd)
  AUTODDL_OPAQUE_PRIMITIVE(layernorm_bwd)
  AUTODDL_OPAQUE_PRIMITIVE(softmax_fwd)
  AUTODDL_OPAQUE_PRIMITIVE(softmax_bwd)
  AUTODDL_OPAQUE_PRIMITIVE(scale_causal_mask)
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

  /// Host crossings so far (a test can check that a step downloads only what users read).
  std::int64_t uploads() const { return uploads_; }
  std::int64_t downloads() const { return downloads_; }
  std::int64_t allocations() const { return allocations_; }

 private:
  cpu_device cpu_;
  std::int64_t uploads_ = 0, downloads_ = 0, allocations_ = 0;
};

#undef AUTODDL_OPAQUE_PRIMITIVE

static_assert(Device<opaque_device>, "opaque_device must model autoddl::Device");

/// An axis communicator over opaque_device memory: flips the spans back, then calls C's.
template <class C>
class opaque_axis_comm {
 public:
  opaque_axis_comm() = default;
  explicit opaque_axis_comm(C* c) : c_(c) {}
  int rank() const { return c_->rank(); }
  int size() const { return c_->size(); }
  std::int64_t bytes_sent() const { return c_->bytes_sent(); }
  template <class T>
  std::int64_t all_gather(std::span<T> buf) { return c_->all_gather(detail::flip(buf)); }
  template <class T>
  std::int64_t reduce_scatter(std::span<T> buf) { return c_->reduce_scatter(detail::flip(buf)); }
  template <class T>
  std::int64_t all_reduce(std::span<T> buf) { return c_->all_reduce(detail::flip(buf)); }
  template <class T>
  std::int64_t all_reduce(std::span<T> buf, reduce_kind k) { return c_->all_reduce(detail::flip(buf), k); }
  template <class T>
  std::int64_t all_to_all(std::span<const T> in, std::span<T> out) {
    return c_->all_to_all(detail::flip(in), detail::flip(out));
  }
  template <class T>
  std::int64_t broadcast(std::span<T> buf, int root) { return c_->broadcast(detail::flip(buf), root); }
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

 private:
  M& m_;
  axis_comm world_;
  std::vector<axis_comm> axes_;
};

}  // namespace autoddl::testing
