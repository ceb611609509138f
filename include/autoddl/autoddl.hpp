#pragma once
// Everything autoddl offers that needs no optional back end: the error type and the shared
// vocabulary (error.hpp, parse_number.hpp, text.hpp, work_kind.hpp), then the umbrella of every folder, which sits
// beside its folder (autoddl/sbp.hpp for autoddl/sbp/, autoddl/backend/cpu.hpp for
// autoddl/backend/cpu/): layouts (sbp), meshes, the cost model, operators with their typed
// layers, models (zoo and typed), the search, the CPU back end and the runtime. Not included:
// autoddl/backend/mpi.hpp (needs MPI), autoddl/backend/cuda.cuh and nccl.cuh (need CUDA), and
// autoddl/cost/hardware_io.hpp (pulls in nlohmann-json).
#include "autoddl/backend.hpp"
#include "autoddl/cost.hpp"
#include "autoddl/error.hpp"
#include "autoddl/mesh.hpp"
#include "autoddl/models.hpp"
#include "autoddl/ops.hpp"
#include "autoddl/ops/typed.hpp"
#include "autoddl/parse_number.hpp"
#include "autoddl/plan.hpp"
#include "autoddl/runtime.hpp"
#include "autoddl/sbp.hpp"
#include "autoddl/search.hpp"
#include "autoddl/text.hpp"
#include "autoddl/work_kind.hpp"
