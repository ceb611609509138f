#pragma once
// Kinds of computation: the operators say which kind their FLOPs are (ops/), the cost model
// applies each kind's achievable fraction of a device's peak (cost/). Shared vocabulary of both.
#include <cstdint>
#include <string_view>

namespace autoddl {

/// attention: the fused attention kernel's FLOPs (its tiles' GEMMs and online softmax), which run
/// below a plain GEMM's rate on GPUs; a hardware profile without its own figure prices them as gemm.
enum class work_kind : std::uint8_t { gemm, conv, elementwise, attention };

inline constexpr int work_kind_count = 4;

constexpr std::string_view to_string(work_kind k) {
  switch (k) {
    case work_kind::gemm: return "gemm";
    case work_kind::conv: return "conv";
    case work_kind::elementwise: return "elementwise";
    case work_kind::attention: return "attention";
  }
  return "?";
}

}  // namespace autoddl
