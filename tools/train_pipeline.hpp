#pragma once
// autoddl-train's pipelines (search/pipeline.hpp, runtime/trainer.hpp): a plan file's pipeline
// priced again at its own cuts, the stage that owns each parameter, gathers of a stage's shards
// to world rank 0, and each stage's measured figures against its predicted ones.
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "autoddl/backend/mpi.hpp"
#include "autoddl/runtime/gather.hpp"
#include "autoddl/search/pipeline.hpp"
#include "autoddl/search/plan_file.hpp"
#include "pipeline_report.hpp"

namespace autoddl::tools {

/// The pipeline a plan file describes: its stage layouts (`layouts`, on the file's stage mesh)
/// priced at the file's cuts on `base` (the whole mesh). Throws error when a cut is not at a
/// layer boundary (pipeline_units) or the whole mesh does not split into the file's stages.
inline chosen_plan file_pipeline(micro_batched_plan&& layouts, const plan_file& f, const plan_options& base) {
  if (!(stage_mesh(base.mesh, f.stages) == f.mesh))
    throw error("the plan file's stage mesh " + to_string(f.mesh) + " is not " + std::to_string(f.stages) + " stages of mesh " +
                to_string(base.mesh));
  const std::vector<int> first = pipeline_units(layouts.problem->model());
  std::vector<int> units;
  for (int op : f.cuts) {
    const auto it = std::find(first.begin(), first.end(), op);
    if (it == first.end())
      throw error("the plan file cuts the model before op " + std::to_string(op) +
                  ", which is not the first op of a layer (pipeline stages begin at layer boundaries)");
    units.push_back(int(it - first.begin()));
  }
  const pipeline_shape shape{f.stages, layouts.microbatches, f.chunks};
  return detail::from_pipeline(price_pipeline_at(std::move(layouts), shape, base, units));
}

/// Per parameter: the first stage whose ops use it (the stage whose copy is gathered and saved).
inline std::vector<int> param_owner_stages(const graph& g, const std::vector<int>& cut_ops) {
  std::vector<int> owner(g.params.size(), int(cut_ops.size()));
  for (int i = 0; i < int(g.ops.size()); ++i) {
    const int s = int(std::upper_bound(cut_ops.begin(), cut_ops.end(), i) - cut_ops.begin()) - 1;
    for (int q : at(g.ops, i).param_ids) at(owner, q) = std::min(at(owner, q), s);
  }
  return owner;
}

/// The whole tensor on world rank 0 from stage `owner`'s shards (gather_to_root over the stage
/// mesh, then sent by the stage's first rank); empty elsewhere. Every rank calls it alike.
inline std::vector<float> gather_stage_to_zero(mpi::pipeline_comms& pc, int owner, const std::vector<float>& shard,
                                               const tensor_shape& shape, const nd_sbp& layout) {
  std::vector<float> whole;
  if (pc.stage() == owner) whole = gather_to_root(pc.mesh(), shard, shape, layout);
  if (owner == 0) return whole;
  const int root = pc.first_rank_of_stage(owner);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  constexpr int tag = 7401;
  if (rank == root) MPI_Send(whole.data(), int(whole.size()), MPI_FLOAT, 0, tag, MPI_COMM_WORLD);
  if (rank == 0) {
    whole.resize(std::size_t(shape.elements()));
    MPI_Recv(whole.data(), int(whole.size()), MPI_FLOAT, root, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  return whole;
}

/// One stage's measured figures per step: the most any of its devices sent, the median over
/// steps of its busiest device's time not waiting for other stages, its highest peak memory.
struct stage_measure {
  double bytes = 0, busy_s = 0, peak_bytes = 0;
};

/// Every rank's (bytes, busy, peak) gathered to world rank 0 and reduced per stage (max over a
/// stage's devices). `stages` and `per_stage` ranks each; world rank r is in stage r / per_stage.
inline std::vector<stage_measure> gather_stage_measures(const stage_measure& mine, int stages, int per_stage) {
  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const double x[3] = {mine.bytes, mine.busy_s, mine.peak_bytes};
  std::vector<double> all(std::size_t(3 * ranks), 0.0);
  MPI_Gather(x, 3, MPI_DOUBLE, all.data(), 3, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  std::vector<stage_measure> r(static_cast<std::size_t>(stages));
  if (rank != 0) return r;
  for (int k = 0; k < ranks; ++k) {
    stage_measure& s = at(r, k / per_stage);
    s.bytes = std::max(s.bytes, at(all, 3 * k));
    s.busy_s = std::max(s.busy_s, at(all, 3 * k + 1));
    s.peak_bytes = std::max(s.peak_bytes, at(all, 3 * k + 2));
  }
  return r;
}

/// Stage i's predicted busy time per step: m micro-batches of its slot, then its step work.
inline double predicted_busy_s(const pipeline_plan& p, int i) {
  const stage_figures& f = at(p.stages, i);
  return p.shape.microbatches * f.slot_s + f.step_s;
}

/// --json's "stages": per stage its ops and predicted against measured time, bytes and memory.
inline nlohmann::json stages_json(const pipeline_plan& p, const graph& g, const std::vector<stage_measure>& m) {
  nlohmann::json a = nlohmann::json::array();
  for (int i = 0; i < int(p.stages.size()); ++i)
    a.push_back({{"stage", i},
                  {"ops", stage_ops(p, g, i)},
                  {"predicted_busy_s", predicted_busy_s(p, i)},
                  {"busy_s_median", at(m, i).busy_s},
                  {"predicted_bytes_per_device", at(p.stages, i).bytes},
                  {"bytes_sent_per_device", at(m, i).bytes},
                  {"predicted_peak_bytes_per_device", at(p.stages, i).peak},
                  {"peak_bytes_per_device", at(m, i).peak_bytes}});
  return a;
}

/// The stages' lines of the report for a person.
inline void print_stages(const pipeline_plan& p, const graph& g, const std::vector<stage_measure>& m) {
  fmt::print("pipeline: {} stages x {} micro-batches, 1F1B, bubble {:.0f}% of the predicted step\n", p.shape.stages,
             p.shape.microbatches, 100 * p.bubble);
  for (int i = 0; i < int(p.stages.size()); ++i)
    fmt::print("  stage {} ({}): busy {} (predicted {}), bytes {:.0f} (predicted {:.0f}{}), peak memory {} (predicted {})\n",
               i, stage_ops(p, g, i), seconds(at(m, i).busy_s), seconds(predicted_busy_s(p, i)), at(m, i).bytes,
               at(p.stages, i).bytes, at(m, i).bytes == at(p.stages, i).bytes ? ", equal" : ", DIFFERENT",
               si(at(m, i).peak_bytes, "B"), si(at(p.stages, i).peak, "B"));
}

}  // namespace autoddl::tools
