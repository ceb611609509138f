#pragma once
// Umbrella header of autoddl/search/: the layout-choice problem and its solvers.
#include "autoddl/search/coordinate_descent.hpp"
#include "autoddl/search/exact.hpp"
#include "autoddl/search/problem.hpp"
#include "autoddl/search/terms.hpp"
