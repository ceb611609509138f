#pragma once
// autoddl's runtime error type. Messages are one sentence that names the rule, the offending
// value in the notation, and the fix, e.g.
//   "shape [12,64] does not divide evenly under [S(0),B]@8x1: dim 0 (12) is split 8 ways; ..."
#include <stdexcept>
#include <string>

namespace autoddl {

/// Every error autoddl throws derives from this; command-line programs print what() and exit 2.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Malformed text in the notation (`[S(0),B]@2x4`), a model key, or a JSON profile.
class parse_error : public error {
 public:
  using error::error;
};

/// A layout an operator or shape cannot take (wrong signature, uneven split, mesh mismatch).
class layout_error : public error {
 public:
  using error::error;
};

namespace detail {
/// Throws in a constant expression too: there it stops compilation at this call, which names
/// the failing check in the diagnostic; at runtime it throws E with the message.
template <class E = error>
[[noreturn]] constexpr void fail(const std::string& what) {
  throw E(what);
}
}  // namespace detail

}  // namespace autoddl
