#pragma once
// Umbrella header of autoddl/cost/: boxing paths and the analytical cost model. The JSON loader
// of hardware profiles (hardware_io.hpp) is included when nlohmann-json is available.
#include "autoddl/cost/boxing_path.hpp"
#include "autoddl/cost/calibration.hpp"
#include "autoddl/cost/collective_cost.hpp"
#include "autoddl/cost/compute.hpp"
#include "autoddl/cost/dtype.hpp"
#include "autoddl/cost/hardware.hpp"
#include "autoddl/cost/memory.hpp"
#include "autoddl/cost/step_time.hpp"
#if __has_include(<nlohmann/json.hpp>)
#include "autoddl/cost/hardware_io.hpp"
#endif
