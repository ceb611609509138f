#pragma once
// How many of a test's drawn or enumerated cases run. scripts/sanitize builds the tests with
// AddressSanitizer and UndefinedBehaviorSanitizer (gcc announces it with __SANITIZE_ADDRESS__,
// clang with __has_feature(address_sanitizer)), where a case runs several times slower; there the
// tests that repeat one code path over many random plans or tables run about half of them, so that
// every path still runs under the sanitizers within CI's budget. scripts/test runs them all.

namespace autoddl::testing {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool sanitized_build = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool sanitized_build = true;
#else
inline constexpr bool sanitized_build = false;
#endif
#else
inline constexpr bool sanitized_build = false;
#endif

/// n cases in a plain build; under the sanitizers half of them, rounded up.
constexpr int sampled(int n) { return sanitized_build ? (n + 1) / 2 : n; }

/// Whether case k (counted from 0 over a case list) runs: every case in a plain build; under the
/// sanitizers the even ones, so a list of n cases runs sampled(n) of them.
constexpr bool sampled_case(int k) { return !sanitized_build || k % 2 == 0; }

}  // namespace autoddl::testing
