#pragma once
// Umbrella header of autoddl/runtime/: the executor of a plan on one device of the mesh (the
// trainer), its boxing executor, operator kernels over a Device, synthetic data and the
// gathering of shards for checks. Generic over Device and MeshCommunicator; instantiate it with
// a back end (autoddl/backend.hpp for the CPU device, autoddl/backend/mpi.hpp for MPI ranks).
#include "autoddl/runtime/boxing.hpp"
#include "autoddl/runtime/data.hpp"
#include "autoddl/runtime/dropless_moe.hpp"
#include "autoddl/runtime/expert_routes.hpp"
#include "autoddl/runtime/gather.hpp"
#include "autoddl/runtime/op_kernels.hpp"
#include "autoddl/runtime/train_options.hpp"
#include "autoddl/runtime/trainer.hpp"
