#pragma once
// Whether OpenBLAS runs kernels narrower than the CPU's vectors, and what to set instead.
// OpenBLAS built with DYNAMIC_ARCH picks its kernel family ("core") from the CPU's model number
// at load time; a release older than the CPU may not know the model and fall back to an old
// family: Debian 12's OpenBLAS 0.3.21 runs its Prescott (SSE3) kernels on Emerald Rapids
// Xeons, where OPENBLAS_CORETYPE=SkylakeX (AVX-512) makes sgemm 2.5-3x faster. OpenBLAS reads
// the variable at load time, so a program can only say so, in one line:
//   OpenBLAS runs its Prescott kernels on this CPU, which has AVX-512: OPENBLAS_CORETYPE=SkylakeX
//   would run its AVX-512 kernels (GEMMs often 2-3x faster); see docs/reference/runtime.md,
//   "OpenBLAS's kernels"
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "autoddl/backend/cpu/gemm.hpp"

namespace autoddl {

/// The widest vector instructions a CPU or a BLAS kernel family uses.
enum class vector_isa : int { older = 0, avx2 = 1, avx512 = 2 };

/// The vector instructions of OpenBLAS's kernel family `core` (openblas_get_corename(), any
/// case): AVX-512 for SkylakeX, Cooperlake and Sapphire Rapids; AVX2 for Haswell and the Zen
/// families; older for the rest (Prescott, Core2, Nehalem, Sandybridge, ...).
inline vector_isa blas_core_isa(std::string_view core) {
  std::string c(core);
  std::transform(c.begin(), c.end(), c.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
  for (const char* n : {"skylakex", "cooperlake", "sapphirerapids"})
    if (c == n) return vector_isa::avx512;
  for (const char* n : {"haswell", "zen", "excavator"})
    if (c == n) return vector_isa::avx2;
  return vector_isa::older;
}

/// The one line suggesting OPENBLAS_CORETYPE when OpenBLAS's kernel family `core` uses narrower
/// vectors than the CPU has and the user has not chosen a family; nullopt otherwise.
/// Example: ("Prescott", avx512, false) -> "OpenBLAS runs its Prescott kernels on this CPU, which
/// has AVX-512: OPENBLAS_CORETYPE=SkylakeX would ...".
inline std::optional<std::string> blas_core_advice(std::string_view core, vector_isa cpu, bool coretype_set) {
  if (coretype_set || core.empty() || int(blas_core_isa(core)) >= int(cpu)) return std::nullopt;
  const bool wide = cpu == vector_isa::avx512;
  const std::string isa = wide ? "AVX-512" : "AVX2", family = wide ? "SkylakeX" : "Haswell";
  return "OpenBLAS runs its " + std::string(core) + " kernels on this CPU, which has " + isa + ": OPENBLAS_CORETYPE=" +
         family + " would run its " + isa +
         " kernels (GEMMs often 2-3x faster); see docs/reference/runtime.md, \"OpenBLAS's kernels\"";
}

/// This CPU's widest vector instructions (x86 with GCC or Clang; older elsewhere).
inline vector_isa cpu_vector_isa() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (__builtin_cpu_supports("avx512f")) return vector_isa::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return vector_isa::avx2;
#endif
  return vector_isa::older;
}

/// blas_core_advice for the OpenBLAS this program runs on this CPU; nullopt where the BLAS is not
/// OpenBLAS.
inline std::optional<std::string> cpu_blas_core_advice() {
#if AUTODDL_HAS_CBLAS && defined(OPENBLAS_VERSION)
  const char* core = openblas_get_corename();
  return blas_core_advice(core ? core : "", cpu_vector_isa(), std::getenv("OPENBLAS_CORETYPE") != nullptr);
#else
  return std::nullopt;
#endif
}

}  // namespace autoddl
