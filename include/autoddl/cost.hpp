#pragma once
// Umbrella header of autoddl/cost/: boxing paths and the analytical cost model.
// Not included here: the JSON loader of hardware profiles, autoddl/cost/hardware_io.hpp, which
// pulls in nlohmann-json (it takes a translation unit from 0.5 s to 2.5 s; templates are kept cheap to compile):
// include it where profiles are read or written.
#include "autoddl/cost/boxing_path.hpp"
#include "autoddl/cost/boxing_copies.hpp"
#include "autoddl/cost/calibration.hpp"
#include "autoddl/cost/collective_cost.hpp"
#include "autoddl/cost/compute.hpp"
#include "autoddl/cost/dropless.hpp"
#include "autoddl/cost/dtype.hpp"
#include "autoddl/cost/hardware.hpp"
#include "autoddl/cost/memory.hpp"
#include "autoddl/cost/measured.hpp"
#include "autoddl/cost/step_time.hpp"
