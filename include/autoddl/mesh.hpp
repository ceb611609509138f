#pragma once
// Umbrella header of autoddl/mesh/: links, device meshes and the rank mapping.
#include "autoddl/mesh/device_mesh.hpp"
#include "autoddl/mesh/link.hpp"
