#pragma once
// MPI_COMM_WORLD as the p stages of a pipeline (search/pipeline.hpp), in Megatron-LM's rank
// order: the stage outermost, so world rank r of N is in stage r / (N / p) at rank r % (N / p)
// of that stage's mesh. Each device gets its stage's mesh communicator and the stage axis: the
// devices with its stage coordinates, rank s of which is the one in stage s. On 4 ranks as 2
// stages of mesh 2: stage 0 = {0, 1}, stage 1 = {2, 3}; world rank 3's stage axis is {1, 3}.
#include "autoddl/backend/mpi/c_api.hpp"

#include <string>
#include <utility>

#include "autoddl/backend/mpi/error.hpp"
#include "autoddl/backend/mpi/mesh_comm.hpp"
#include "autoddl/backend/mpi/ring_comm.hpp"
#include "autoddl/sbp/mesh_shape.hpp"

namespace autoddl::mpi {

class pipeline_comms {
 public:
  /// @pre MPI is initialised; the job has stages x stage_mesh.devices() ranks (else the job
  /// aborts with a message naming both counts).
  pipeline_comms(const mesh_shape& stage_mesh, int stages, MPI_Comm parent = MPI_COMM_WORLD)
      : ranks_per_stage_(stage_mesh.devices()),
        stage_(checked_rank(parent, stages, stage_mesh) / ranks_per_stage_),
        mesh_(stage_mesh, split(parent, stage_, rank_of(parent)).comm),
        pipe_(split(parent, rank_of(parent) % ranks_per_stage_, stage_).release(), true) {}

  int stage() const { return stage_; }
  int stages() const { return pipe_.size(); }
  /// The stage's mesh communicator (its world is the stage's devices).
  mpi_mesh_comm& mesh() { return mesh_; }
  /// The stage axis: rank s is this device's peer in stage s.
  ring_comm& pipe() { return pipe_; }
  /// The parent rank of the device of stage s with this device's stage coordinates.
  int parent_rank_in_stage(int s) const { return s * ranks_per_stage_ + mesh_.rank(); }
  /// The parent rank of stage s's first device.
  int first_rank_of_stage(int s) const { return s * ranks_per_stage_; }
  /// Devices per stage.
  int per_stage() const { return ranks_per_stage_; }

 private:
  // An owned communicator, freed unless released.
  struct owned {
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Comm release() { return std::exchange(comm, MPI_COMM_NULL); }
    ~owned() {
      if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
    }
  };
  static owned split(MPI_Comm parent, int colour, int key) {
    owned o;
    check(MPI_Comm_split(parent, colour, key, &o.comm), "MPI_Comm_split", parent);
    return o;
  }
  static int rank_of(MPI_Comm c) {
    int r = 0;
    MPI_Comm_rank(c, &r);
    return r;
  }
  static int checked_rank(MPI_Comm parent, int stages, const mesh_shape& stage_mesh) {
    int n = 0;
    MPI_Comm_size(parent, &n);
    if (stages < 1 || n != stages * stage_mesh.devices())
      abort_job(parent, "the MPI job has " + std::to_string(n) + " ranks but " + std::to_string(stages) +
                            " pipeline stages of mesh " + to_string(stage_mesh) + " need " +
                            std::to_string(stages * stage_mesh.devices()));
    return rank_of(parent);
  }

  int ranks_per_stage_;
  int stage_;
  mpi_mesh_comm mesh_;
  ring_comm pipe_;
};

}  // namespace autoddl::mpi
