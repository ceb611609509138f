#pragma once
// Umbrella header of the CPU device: the Device concept, shards and cpu_device (CBLAS GEMMs, and
// their start-up check).
#include "autoddl/backend/cpu/blas_core.hpp"
#include "autoddl/backend/cpu/device.hpp"
#include "autoddl/backend/cpu/gemm.hpp"
#include "autoddl/backend/cpu/gemm_check.hpp"
#include "autoddl/backend/device.hpp"
#include "autoddl/backend/shard.hpp"
