#pragma once
// The plan value (autoddl/plan/): what one training step runs, made by search/ and run by
// runtime/: per-op layouts and boxing paths, parameter layouts, micro-batches, recomputation and
// pipeline stages (plan/plan.hpp), which of its slots box (plan/boxed_slots.hpp), what a step
// keeps and reruns (plan/step_schedule.hpp) and a pipeline stage's 1F1B order
// (plan/pipeline_order.hpp).
#include "autoddl/plan/boxed_slots.hpp"
#include "autoddl/plan/pipeline_order.hpp"
#include "autoddl/plan/plan.hpp"
#include "autoddl/plan/step_schedule.hpp"
