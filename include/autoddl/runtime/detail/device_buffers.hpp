#pragma once
// The buffer operations a training step performs on a Device's memory for element type T, and
// the steady clock its profile reads: shared by the trainer and its parts (parameter store,
// gradient accumulator, stage link).
#include <chrono>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "autoddl/backend/device.hpp"

namespace autoddl::detail {

using step_clock = std::chrono::steady_clock;

/// Seconds since t; t moves to now.
inline double lap(step_clock::time_point& t) {
  const auto now = step_clock::now();
  const double s = std::chrono::duration<double>(now - t).count();
  t = now;
  return s;
}

/// Views, copies, uploads and sums of buffer_t<D, T> on one device (not owned; outlives this).
template <class T, Device D>
class device_buffers {
 public:
  using buffer = buffer_t<D, T>;

  explicit device_buffers(D& dev) : dev_(&dev) {}

  static void release(buffer& v) { v = buffer{}; }

  /// n zeros.
  buffer alloc(std::size_t n) { return dev_->template alloc<T>(n); }

  std::span<T> view(buffer& b) { return dev_->view(b); }
  std::span<const T> view(const buffer& b) const { return std::as_const(*dev_).view(b); }
  /// A device copy of b.
  buffer clone(const buffer& b) {
    buffer c = dev_->template alloc<T>(b.size());
    dev_->copy(view(b), view(c));
    return c;
  }
  /// b downloaded (what a caller reads).
  std::vector<T> host_copy(const buffer& b) const {
    std::vector<T> h(b.size());
    dev_->download(view(b), std::span<T>(h));
    return h;
  }
  /// Host values uploaded into a new buffer.
  template <class U>
  buffer_t<D, U> uploaded(const std::vector<U>& h) {
    buffer_t<D, U> b = dev_->template alloc<U>(h.size());
    dev_->upload(std::span<const U>(h), dev_->view(b));
    return b;
  }
  /// into += v on the device (into takes v when it is empty).
  void accumulate(buffer& into, buffer&& v) {
    if (into.empty()) {
      into = std::move(v);
      return;
    }
    dev_->axpy(T(1), view(std::as_const(v)), view(into));
  }

 private:
  D* dev_;
};

}  // namespace autoddl::detail
