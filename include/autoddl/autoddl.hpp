#pragma once
// Everything autoddl offers that needs no optional back end.
#include "autoddl/cost.hpp"
#include "autoddl/mesh.hpp"
#include "autoddl/sbp.hpp"
