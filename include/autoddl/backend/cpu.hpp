#pragma once
// Umbrella header of the CPU device: the Device concept, shards and cpu_device (CBLAS GEMMs).
#include "autoddl/backend/cpu/device.hpp"
#include "autoddl/backend/cpu/gemm.hpp"
#include "autoddl/backend/device.hpp"
#include "autoddl/backend/shard.hpp"
