#pragma once
// MPI's C API only: the deprecated C++ bindings of Open MPI and MPICH are skipped (they do not
// compile cleanly under -Wextra -Werror with g++ 12, and autoddl does not use them).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
