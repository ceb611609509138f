#pragma once
// Umbrella header of autoddl/models/: the graph (DAG of ops with global shapes) and the model
// zoo built by name and size (gpt, bert, vgg11..19, mlp).
#include "autoddl/models/graph.hpp"
#include "autoddl/models/typed.hpp"
#include "autoddl/models/mlp.hpp"
#include "autoddl/models/transformer.hpp"
#include "autoddl/models/vgg.hpp"
#include "autoddl/models/zoo.hpp"
