#pragma once
// Umbrella header of autoddl/ops/: operators, their per-axis signature rules, n-D signature
// enumeration, backward layouts (dual), FLOPs, bytes and activation memory.
#include "autoddl/ops/attention.hpp"
#include "autoddl/ops/conv.hpp"
#include "autoddl/ops/elementwise.hpp"
#include "autoddl/ops/embedding.hpp"
#include "autoddl/ops/kernel_key.hpp"
#include "autoddl/ops/matmul.hpp"
#include "autoddl/ops/moe.hpp"
#include "autoddl/ops/op.hpp"
#include "autoddl/ops/reshape.hpp"
#include "autoddl/ops/shapes.hpp"
#include "autoddl/ops/signatures.hpp"
#include "autoddl/ops/work.hpp"
