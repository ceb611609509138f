#pragma once
// Umbrella header of autoddl/cost/: boxing paths and the analytical cost model.
#include "autoddl/cost/boxing_path.hpp"
