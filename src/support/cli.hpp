#pragma once
// What the command-line programs and the benchmarks share: turning exceptions into one sentence
// and exit code 2, and parsing sizes and lists. (src/support/: helpers of the programs built from
// this repository, not part of the installed library.)
#include <cctype>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "autoddl/error.hpp"
#include "autoddl/parse_number.hpp"

namespace autoddl::tools {

/// Runs f; any exception becomes "<program>: <sentence>" on stderr and exit code 2.
template <class F>
int guarded(const char* program, F&& f) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 2;
  }
}

inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else if (c != ' ') {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

/// "32GiB", "16GB", "512MiB", "1e9" -> bytes: a number (parse_number.hpp) and a unit of letters
/// after it. Throws parse_error naming the text.
inline double parse_bytes(std::string_view s) {
  std::size_t split = s.size();
  while (split > 0 && std::isalpha(static_cast<unsigned char>(s[split - 1]))) --split;
  const std::string unit(s.substr(split));
  const std::optional<double> v = parse_number_or_none<double>(s.substr(0, split));
  if (!v) throw parse_error("memory size '" + std::string(s) + "' is not a number with a unit; write e.g. 32GiB or 16GB");
  struct u { const char* name; double f; };
  const u units[] = {{"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
                     {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
  for (const auto& x : units)
    if (unit == x.name) {
      if (!(*v > 0)) throw parse_error("memory size '" + std::string(s) + "' must be positive");
      return *v * x.f;
    }
  throw parse_error("memory size '" + std::string(s) + "' has an unknown unit '" + unit +
                    "'; use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB");
}

/// A positive whole number given to option `name` ("--microbatches 4"). Throws parse_error.
inline int parse_count(std::string_view name, std::string_view s) {
  const int v = parse_number_or_none<int>(s).value_or(0);
  if (v < 1)
    throw parse_error(std::string(name) + " takes a positive whole number or auto, got '" + std::string(s) + "'");
  return v;
}

/// What both programs plan when not told otherwise: a small GPT on this machine kind's 4 ranks
/// (a 2x2 mesh) priced with its profile, so that `autoddl-plan` plans what `mpirun -np 4
/// autoddl-train` runs.
inline constexpr const char* default_model = "gpt:layers=2,hidden=64,heads=4,seq=32,batch=8,vocab=128";
inline constexpr const char* default_mesh = "2x2";
inline constexpr const char* default_hardware = "cpu-local";

/// The strategies --strategy takes in both programs, for their help (each adds the exact ones
/// it runs).
inline constexpr const char* strategies_help =
    "auto, dp (also spelled ddp), megatron[:tp=T,pp=P,cp=C,dp=D,mbs=B,recompute=R,sp=1,vpp=V,dopt=1,ep=E,etp=T,fsdp=1], "
    "zero[:stage=1|2|3] (zero alone is stage 3, also spelled fsdp), owt (one weird trick: data-parallel convolutions, "
    "model-parallel fully connected layers), 2d";

/// The optimizers and recomputations both programs take, for their help (search/../cost/memory.hpp
/// parses them; JSON, plan files and checkpoints write the first spelling).
inline constexpr const char* optimizers_help = "adam or sgd-momentum (also spelled sgd)";
inline constexpr const char* recompute_help =
    "activation recomputation of repeated blocks: auto (the planner's choice), none, selective (attention cores) or "
    "full (whole repeated blocks)";

/// --regather and --reshard: whether gathered input copies (Megatron-LM's sequence parallelism)
/// and gathered parameters (FSDP2's reshard_after_forward) are gathered again for backward; auto
/// leaves it to the planner (search/micro_batches.hpp).
inline constexpr const char* regather_help =
    "gathered input copies a backward reads (sequence parallelism): auto (the planner's choice), on (the source kept, "
    "the copy gathered again for backward) or off (the copy kept)";
inline constexpr const char* reshard_help =
    "gathered (ZeRO-3, FSDP) parameters: auto (the planner's choice), on (gathered for each op's forward and again for "
    "its backward, freed after each) or off (gathered once a step, kept to the last backward)";

/// The value of an auto|on|off option `name`: nullopt for auto. @throws parse_error on another word.
inline std::optional<bool> parse_auto_on_off(std::string_view name, std::string_view s) {
  if (s == "auto") return std::nullopt;
  if (s == "on" || s == "off") return s == "on";
  throw parse_error(std::string(name) + " takes auto, on or off, got '" + std::string(s) + "'");
}

inline constexpr const char* grad_sums_help =
    "the element type of gradient sums (over micro-batches, and the synchronised gradients): fp32, or the 16-bit "
    "--dtype itself (bf16 or fp16: Megatron-LM's training without --accumulate-allreduce-grads-in-fp32)";

/// Whether --grad-sums `s` keeps a `dtype_name` plan's gradient sums in fp32: "fp32", or the
/// dtype's own name (its sums in its type). @throws parse_error naming the values.
inline bool parse_fp32_gradient_sums(std::string_view s, std::string_view dtype_name) {
  if (s == "fp32" || (s == dtype_name && (s == "bf16" || s == "fp16"))) return s == "fp32";
  throw parse_error("--grad-sums takes fp32" +
                    (dtype_name == "bf16" || dtype_name == "fp16" ? " or " + std::string(dtype_name) : std::string()) +
                    " with --dtype " + std::string(dtype_name) + ", got '" + std::string(s) + "'");
}

}  // namespace autoddl::tools
