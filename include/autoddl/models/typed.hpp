#pragma once
// Typed models: a whole model as a type whose layer layouts are pinned or searched.
#include "autoddl/models/typed/layers.hpp"
#include "autoddl/models/typed/model.hpp"
