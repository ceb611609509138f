#pragma once
// Umbrella header of autoddl/backend/: what the runtime asks of a compute device and of a
// communicator (the Device and MeshCommunicator concepts), shards, and the CPU device. The back
// ends that need optional dependencies have umbrellas of their own beside their folders:
// autoddl/backend/mpi.hpp (MPI's compile flags), autoddl/backend/cuda.cuh and
// autoddl/backend/nccl.cuh (CUDA; NCCL).
#include "autoddl/backend/communicator.hpp"
#include "autoddl/backend/cpu.hpp"
#include "autoddl/backend/device.hpp"
#include "autoddl/backend/shard.hpp"
