#pragma once
// The NCCL communicator back end (needs MPI for the bootstrap; link NCCL, cudart and MPI).
#include "autoddl/backend/nccl/comm.cuh"
#include "autoddl/backend/nccl/mesh_comm.cuh"
#include "autoddl/backend/nccl/overlap.cuh"
