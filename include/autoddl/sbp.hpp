#pragma once
// Umbrella header of autoddl/sbp/: S/B/P values, nd-SBP, meshes, shapes, layouts, boxing steps.
#include "autoddl/sbp/boxing.hpp"
#include "autoddl/sbp/layout.hpp"
#include "autoddl/sbp/mesh_shape.hpp"
#include "autoddl/sbp/nd_sbp.hpp"
#include "autoddl/sbp/sbp.hpp"
#include "autoddl/sbp/shape.hpp"
