#pragma once
// Shared by the libFuzzer targets in this folder (built and run by scripts/fuzz).
// A parser given hostile text may refuse it with an autoddl::error (or a subclass): that is the
// expected outcome. Anything else is a finding: another exception type, a crash, a leak, a
// sanitizer report, or a broken property of an accepted input; each aborts, so libFuzzer keeps
// the input as a crash-* file (docs/testing.md says how it becomes a regression input).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string_view>
#include <typeinfo>

#include "autoddl/error.hpp"

namespace autoddl::fuzz {

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

[[noreturn]] inline void finding(const char* what, std::string_view detail, std::string_view input) {
  std::fprintf(stderr, "autoddl fuzz finding: %s: %.*s\n  input (%zu bytes): '%.*s'\n", what, int(detail.size()),
               detail.data(), input.size(), int(input.size()), input.data());
  std::abort();
}

/// The value parse() returns, or nullopt when it refuses the input with an autoddl::error.
/// Any other exception is a finding.
template <class F>
auto parse_or_refuse(F&& parse, std::string_view input) -> std::optional<decltype(parse())> {
  try {
    return parse();
  } catch (const autoddl::error&) {
    return std::nullopt;
  } catch (const std::exception& e) {
    finding("an exception that is not an autoddl::error", typeid(e).name(), input);
  } catch (...) {
    finding("an exception that is not an autoddl::error", "(not a std::exception)", input);
  }
}

/// The value f() returns; any exception is a finding (f must succeed on an accepted input).
template <class F>
auto must_succeed(F&& f, const char* what, std::string_view input) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    finding(what, e.what(), input);
  } catch (...) {
    finding(what, "(not a std::exception)", input);
  }
}

/// A property every accepted input has; its failure is a finding.
inline void expect(bool ok, const char* what, std::string_view input) {
  if (!ok) finding("property failed", what, input);
}

}  // namespace autoddl::fuzz
