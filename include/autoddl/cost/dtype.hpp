#pragma once
// Element types the cost model prices: fp32 (4 bytes), fp16 and bf16 (2 bytes), fp64 (8 bytes: the
// CPU executor trains in double where round-off must not decide a result, e.g. the tests' serial oracle).
#include <cstdint>
#include <string>
#include <string_view>

#include "autoddl/error.hpp"
#include "autoddl/work_kind.hpp"

namespace autoddl {

enum class dtype : std::uint8_t { fp32, fp16, bf16, fp64 };

inline constexpr int dtype_count = 4;
/// Every dtype, in enum order (for tables and loops over the profile's figures).
inline constexpr dtype all_dtypes[dtype_count] = {dtype::fp32, dtype::fp16, dtype::bf16, dtype::fp64};

constexpr int bytes_of(dtype t) {
  switch (t) {
    case dtype::fp32: return 4;
    case dtype::fp16:
    case dtype::bf16: return 2;
    case dtype::fp64: return 8;
  }
  return 0;
}

constexpr std::string_view to_string(dtype t) {
  switch (t) {
    case dtype::fp32: return "fp32";
    case dtype::fp16: return "fp16";
    case dtype::bf16: return "bf16";
    case dtype::fp64: return "fp64";
  }
  return "?";
}

/// parse_dtype("bf16") == dtype::bf16; throws parse_error naming the text and the choices.
constexpr dtype parse_dtype(std::string_view s) {
  if (s == "fp32") return dtype::fp32;
  if (s == "fp16") return dtype::fp16;
  if (s == "bf16") return dtype::bf16;
  if (s == "fp64") return dtype::fp64;
  detail::fail<parse_error>("unknown dtype '" + std::string(s) + "'; write fp32, fp16, bf16 or fp64");
}

}  // namespace autoddl
