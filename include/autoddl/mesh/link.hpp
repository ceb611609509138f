#pragma once
// One kind of link between devices, in the alpha-beta (Hockney) model: sending m bytes costs
// alpha + m / beta seconds (Hockney 1994, "The communication challenge for MPP"; the model
// Thakur, Rabenseifner & Gropp 2005 price collectives with). Their gamma term, seconds per byte
// reduced, is kept with the link because reductions run where the group's bytes arrive; it is 0
// where the reduction is fused into the transfer and hidden by it (NCCL on GPUs), and measured
// for CPU ranks, where summing received chunks is a memory-bound pass of its own.
//   link{2e-6, 150e9, "nvlink2"}: 2 us latency, 150 GB/s per direction.
#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "autoddl/sbp/error.hpp"

namespace autoddl {

/// A short name held by value, so a link (and a device_mesh) is a literal type usable in
/// constant expressions. Longer names are cut at `capacity - 1` characters.
struct link_name {
  static constexpr std::size_t capacity = 32;
  std::array<char, capacity> s{};
  std::size_t n = 0;
  constexpr link_name() = default;
  constexpr link_name(std::string_view v) {  // NOLINT: implicit from text on purpose
    for (char c : v) {
      if (n + 1 == capacity) break;
      s[n++] = c;
    }
  }
  constexpr link_name(const char* v) : link_name(std::string_view(v)) {}  // NOLINT
  constexpr std::string_view view() const { return {s.data(), n}; }
  friend constexpr bool operator==(const link_name& a, const link_name& b) { return a.view() == b.view(); }
};

/// Note: POSIX's <unistd.h> declares a function ::link; code that has `using namespace autoddl`
/// and includes it must write autoddl::link.
struct link {
  double alpha = 0;    ///< seconds per message (latency)
  double beta = 1;     ///< bytes per second (bandwidth, one direction, per device)
  link_name name{};
  double gamma = 0;    ///< seconds per byte reduced (reduce-scatter, all-reduce)
  /// Seconds to send `bytes` as `messages` messages: messages * alpha + bytes / beta.
  constexpr double time(double messages, double bytes) const { return messages * alpha + bytes / beta; }
  friend constexpr bool operator==(const link&, const link&) = default;
};

/// @pre alpha >= 0 and beta > 0; throws autoddl::error naming the link otherwise.
constexpr link checked(const link& l) {
  if (!(l.alpha >= 0))
    detail::fail<error>("link '" + std::string(l.name.view()) + "' has a negative latency alpha; give alpha in seconds, >= 0");
  if (!(l.beta > 0))
    detail::fail<error>("link '" + std::string(l.name.view()) + "' has a bandwidth beta <= 0; give beta in bytes per second, > 0");
  if (!(l.gamma >= 0))
    detail::fail<error>("link '" + std::string(l.name.view()) + "' has a negative gamma; give seconds per byte reduced, >= 0");
  return l;
}

}  // namespace autoddl
