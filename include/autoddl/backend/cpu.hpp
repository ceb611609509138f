#pragma once
// Umbrella header of the CPU device: the Device concept, shards and cpu_device (CBLAS GEMMs, and
// their start-up check), and its 16-bit storage types bf16 and fp16.
#include "autoddl/backend/cpu/blas_core.hpp"
#include "autoddl/backend/cpu/device.hpp"
#include "autoddl/backend/cpu/gemm.hpp"
#include "autoddl/backend/cpu/gemm_check.hpp"
#include "autoddl/backend/cpu/half_types.hpp"
#include "autoddl/backend/device.hpp"
#include "autoddl/backend/shard.hpp"
