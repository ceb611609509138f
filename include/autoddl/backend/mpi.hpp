#pragma once
// Umbrella header of autoddl/backend/mpi/ (needs MPI's compile flags): ring collectives over
// MPI communicators and the per-axis communicators of a device mesh.
#include "autoddl/backend/mpi/error.hpp"
#include "autoddl/backend/mpi/init.hpp"
#include "autoddl/backend/mpi/mesh_comm.hpp"
#include "autoddl/backend/mpi/pipeline_comm.hpp"
#include "autoddl/backend/mpi/ring_comm.hpp"
#include "autoddl/backend/mpi/timing.hpp"
#include "autoddl/backend/mpi/wait.hpp"
