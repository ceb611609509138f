#pragma once
// Typed layers: dtensor operations whose layouts the compiler checks.
#include "autoddl/ops/typed/layers.hpp"
#include "autoddl/ops/typed/rules.hpp"
#include "autoddl/ops/typed/static_signature.hpp"
#include "autoddl/sbp/dtensor.hpp"
