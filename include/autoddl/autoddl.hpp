#pragma once
// Everything autoddl offers that needs no optional back end.
#include "autoddl/cost.hpp"
#include "autoddl/mesh.hpp"
#include "autoddl/models.hpp"
#include "autoddl/ops.hpp"
#include "autoddl/ops/typed.hpp"
#include "autoddl/sbp.hpp"
