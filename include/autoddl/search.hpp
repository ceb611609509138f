#pragma once
// Umbrella header of autoddl/search/: the layout-choice problem, its solvers, the planner that
// builds it from a model, expert plans, and the readable report.
#include "autoddl/search/coordinate_descent.hpp"
#include "autoddl/search/exact.hpp"
#include "autoddl/search/kernel_prices.hpp"
#include "autoddl/search/parallelism.hpp"
#include "autoddl/search/pipeline_cuts.hpp"
#include "autoddl/search/pipeline_shape.hpp"
#include "autoddl/search/experts.hpp"
#include "autoddl/search/plan_options.hpp"
#include "autoddl/search/plan_of.hpp"
#include "autoddl/search/planner.hpp"
#include "autoddl/search/problem.hpp"
#include "autoddl/search/report.hpp"
#include "autoddl/search/solve.hpp"
#include "autoddl/search/svg.hpp"
#include "autoddl/search/terms.hpp"
#include "autoddl/search/typed.hpp"
