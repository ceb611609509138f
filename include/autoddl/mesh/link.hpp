#pragma once
// One kind of link between devices, in the alpha-beta (Hockney) model: sending m bytes costs
// alpha + m / beta seconds (Hockney 1994, "The communication challenge for MPP"; the model
// Thakur, Rabenseifner & Gropp 2005 price collectives with). Their gamma term, seconds per byte
// reduced, is kept with the link because reductions run where the group's bytes arrive; it is 0
// where the reduction is fused into the transfer and hidden by it (NCCL on GPUs), and measured
// for CPU ranks, where summing received chunks is a memory-bound pass of its own.
//   link{2e-6, 150e9, "nvlink2"}: 2 us latency, 150 GB/s per direction.
// Optionally a second regime: a link whose rate drops once the collective's buffer outgrows a
// cache (CPU ranks over shared memory: ~10 GB/s while T fits the L3 cache, ~4 GB/s beyond) is
// piecewise linear in the buffer size T: of a collective on T > large_bytes, the share
// large_bytes / T of its bytes moves at beta (and is reduced at gamma), the rest at beta_large
// (gamma_large). The time stays continuous and increasing in T, so the search sees no jump.
// large_bytes == 0 (the default) is the one-regime Hockney link, bit for bit.
#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "autoddl/error.hpp"

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
  double alpha = 0;        ///< seconds per message (latency)
  double beta = 1;         ///< bytes per second (bandwidth, one direction, per device)
  link_name name{};
  double gamma = 0;        ///< seconds per byte reduced (reduce-scatter, all-reduce)
  double large_bytes = 0;  ///< buffer bytes T beyond which the second regime applies; 0: one regime
  double beta_large = 0;   ///< bytes per second of the bytes beyond large_bytes (second regime)
  double gamma_large = 0;  ///< seconds per byte reduced beyond large_bytes (second regime)

  constexpr bool two_regimes() const { return large_bytes > 0; }

  /// Seconds to send `bytes` as `messages` messages and reduce `reduced` bytes, in a collective
  /// over a buffer of `size` bytes (T; it selects the regime). One regime:
  /// messages * alpha + bytes / beta + reduced * gamma. Two regimes and size > large_bytes, with
  /// f = large_bytes / size: messages * alpha + f * (bytes / beta + reduced * gamma)
  ///                                           + (1 - f) * (bytes / beta_large + reduced * gamma_large).
  ///   {alpha 0, beta 10e9, large_bytes 4 MiB, beta_large 4e9}.time(1, 8 MiB, 0, 16 MiB)
  ///     == 2 MiB / 10e9 + 6 MiB / 4e9.
  constexpr double time(double messages, double bytes, double reduced, double size) const {
    if (!two_regimes() || !(size > large_bytes)) return messages * alpha + bytes / beta + reduced * gamma;
    const double f = large_bytes / size;
    return messages * alpha + f * (bytes / beta + reduced * gamma) +
           (1 - f) * (bytes / beta_large + reduced * gamma_large);
  }
  /// A point-to-point transfer: the message is the buffer (size = bytes), nothing reduced.
  constexpr double time(double messages, double bytes) const { return time(messages, bytes, 0, bytes); }
  friend constexpr bool operator==(const link&, const link&) = default;
};

/// @pre alpha >= 0, beta > 0, gamma >= 0, large_bytes >= 0 and, with a second regime, beta_large > 0
/// and gamma_large >= 0; throws autoddl::error naming the link otherwise.
constexpr link checked(const link& l) {
  if (!(l.alpha >= 0))
    detail::fail<error>("link '" + std::string(l.name.view()) + "' has a negative latency alpha; give alpha in seconds, >= 0");
  if (!(l.beta > 0))
    detail::fail<error>("link '" + std::string(l.name.view()) + "' has a bandwidth beta <= 0; give beta in bytes per second, > 0");
  if (!(l.gamma >= 0))
    detail::fail<error>("link '" + std::string(l.name.view()) + "' has a negative gamma; give seconds per byte reduced, >= 0");
  if (!(l.large_bytes >= 0))
    detail::fail<error>("link '" + std::string(l.name.view()) + "' has a negative large_bytes; give bytes > 0, or 0 for one regime");
  if (l.two_regimes() && !(l.beta_large > 0))
    detail::fail<error>("link '" + std::string(l.name.view()) + "' has a second regime with beta_large <= 0; give bytes per second, > 0");
  if (l.two_regimes() && !(l.gamma_large >= 0))
    detail::fail<error>("link '" + std::string(l.name.view()) + "' has a negative gamma_large; give seconds per byte reduced, >= 0");
  return l;
}

}  // namespace autoddl
