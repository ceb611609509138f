#pragma once
// What both programs say about the hardware profile they price with: a calibrated profile
// (autoddl-calibrate records the CPU it measured, hardware::cpu_model) loaded on a machine whose
// CPU is another is named in one line on stderr, with the command that measures this one. The
// plan goes on: the line is a warning, not an error.
#include <cstdio>
#include <string>

#include "autoddl/cost/hardware.hpp"
#include "autoddl/cost/hardware_io.hpp"

namespace autoddl::tools {

/// The warning for profile `name` (as given: a preset or a file) on a machine whose CPU is
/// `here`; empty where the profile records no CPU, this machine names none, or they are one.
inline std::string other_cpu_warning(const std::string& program, const std::string& name, const hardware& hw,
                                     const std::string& here) {
  if (hw.cpu_model.empty() || here.empty() || hw.cpu_model == here) return "";
  return program + ": hardware profile '" + name + "' was calibrated on a '" + hw.cpu_model + "' CPU, this machine's is '" +
         here + "', so its measured prices may not hold here; run autoddl-calibrate to measure this machine";
}

/// Prints other_cpu_warning for this machine (/proc/cpuinfo), if any.
inline void warn_if_other_cpu(const std::string& program, const std::string& name, const hardware& hw) {
  const std::string line = other_cpu_warning(program, name, hw, this_cpu_model());
  if (!line.empty()) std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace autoddl::tools
