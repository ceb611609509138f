#pragma once
// autoddl-train's checkpoints (runtime/checkpoint.hpp): a trainer restored from one, whatever
// plan wrote it; one written after a step (every rank its shards, rank 0 the manifest); the
// older ones beyond --keep-last removed.
#include <mpi.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "autoddl/backend/shard.hpp"
#include "autoddl/json_input.hpp"
#include "autoddl/runtime/checkpoint.hpp"
#include "train_pipeline.hpp"
#include "train_setup.hpp"

namespace autoddl::tools::train {

/// Parameter q's value, optimizer state and (a 16-bit run's) fp32 master weights for the block
/// `want`, from a checkpoint.
struct restored {
  std::vector<float> param, m, v, master;
};
/// `want`: the parameter's block in storage; `state`: the optimizer state's (update layout).
inline restored read_state(checkpoint_reader<float>& r, int q, const shard_info& want, const shard_info& state, optimizer opt,
                           bool master) {
  restored x{r.read(q, "param", want), r.read(q, "m", state), {}, {}};
  if (opt == optimizer::adam) x.v = r.read(q, "v", state);
  if (master) x.master = r.read(q, "master", state);
  return x;
}

/// Loads a checkpoint into trainer t (whose storage layouts may differ from the checkpoint's). A
/// 16-bit run's checkpoint holds its values widened to fp32 (exactly) and its fp32 master weights.
template <class Trainer>
void restore(Trainer& t, const prepared& p, const graph& g, const mesh_shape& mesh, const mesh_coord& coords) {
  checkpoint_reader<float> r(p.resume_folder, p.resume_manifest);
  const bool master = p.resume_manifest.dtype != "fp32";
  for (std::size_t q = 0; q < g.params.size(); ++q) {
    if (!t.holds_param(int(q))) continue;  // another pipeline stage's
    const restored x = read_state(r, int(q), make_shard(g.params[q].shape, t.storage(int(q)), mesh, coords),
                                  make_shard(g.params[q].shape, t.update_layout(int(q)), mesh, coords), p.to.opt, master);
    using value = typename decltype(t.param_shard(0))::value_type;
    t.restore_shard(int(q), std::vector<value>(x.param.begin(), x.param.end()), x.m, x.v, x.master);
  }
  t.restore_steps_done(p.resume_manifest.steps_done);
}
/// What rank `rank` saves of trainer t: the storage shard and optimizer state of every parameter
/// its stage owns (a pipeline's stages save the parameters they own, the first stage using each:
/// one copy of a tied one).
template <class Trainer>
std::vector<shard_to_write<float>> shards_to_save(const prepared& p, const Trainer& t, const mesh_coord& coords) {
  std::vector<shard_to_write<float>> shards;
  const std::vector<int> owner = p.pipeline ? tools::param_owner_stages(p.g, p.pipeline->cut_ops)
                                            : std::vector<int>(p.g.params.size(), 0);
  for (std::size_t q = 0; q < p.g.params.size(); ++q) {
    if (owner[q] != t.stage()) continue;
    const shard_info block = make_shard(p.g.params[q].shape, t.storage(int(q)), p.o.mesh, coords);
    const auto value = t.param_shard(int(q));
    shards.push_back({int(q), "param", block, std::vector<float>(value.begin(), value.end())});
    const shard_info state = make_shard(p.g.params[q].shape, t.update_layout(int(q)), p.o.mesh, coords);
    shards.push_back({int(q), "m", state, t.moment_shard(int(q), 0)});
    if (p.to.opt == optimizer::adam) shards.push_back({int(q), "v", state, t.moment_shard(int(q), 1)});
    if (p.o.type != dtype::fp32) shards.push_back({int(q), "master", state, t.moment_shard(int(q), 2)});
  }
  return shards;
}

/// Every rank's record (JSON text) gathered on rank 0, in rank order (empty elsewhere).
inline std::vector<std::string> gather_records(const std::string& mine, int rank, int ranks) {
  int len = int(mine.size());
  std::vector<int> lens(static_cast<std::size_t>(ranks), 0), displs(static_cast<std::size_t>(ranks), 0);
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  int total = 0;
  for (int r = 0; r < ranks; ++r) {
    displs[std::size_t(r)] = total;
    total += lens[std::size_t(r)];
  }
  std::string all(std::size_t(rank == 0 ? total : 0), '\0');
  MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
  std::vector<std::string> records;
  if (rank == 0)
    for (int r = 0; r < ranks; ++r)
      records.push_back(all.substr(std::size_t(displs[std::size_t(r)]), std::size_t(lens[std::size_t(r)])));
  return records;
}

/// A rank's record (write_rank_shards' result as JSON text) read back.
inline checkpoint_rank_file rank_file_of(const std::string& record) {
  const nlohmann::json j = parse_json(record, "a rank's checkpoint record");
  checkpoint_rank_file rf{j.at("rank").get<int>(), j.at("file").get<std::string>(), j.at("bytes").get<std::int64_t>(), {}};
  for (const auto& sj : j.at("shards"))
    rf.shards.push_back({sj.at("param").get<int>(), sj.at("tensor").get<std::string>(),
                         sj.at("offset").get<std::vector<std::int64_t>>(), sj.at("shape").get<std::vector<std::int64_t>>(),
                         sj.at("byte_offset").get<std::int64_t>(), sj.at("bytes").get<std::int64_t>(),
                         std::stoull(sj.at("fnv1a64").get<std::string>())});
  return rf;
}

/// The manifest of this run after `steps_done` steps, its ranks' files still to add.
template <class Trainer>
checkpoint_manifest manifest_of(const settings& s, const prepared& p, const Trainer& t, std::int64_t steps_done) {
  checkpoint_manifest m;
  m.model = s.model;
  m.dtype = std::string(to_string(p.o.type));
  m.optimizer = std::string(to_string(p.to.opt));
  m.lr = p.to.lr;
  m.seed = p.to.seed;
  m.steps_done = steps_done;
  m.strategy = to_string(p.plan.strategy);
  m.recompute = std::string(to_string(p.o.recompute));
  m.microbatches = p.o.microbatches;
  m.mesh = to_string(p.mesh);
  m.stages = p.stages();
  m.stage_mesh = to_string(p.o.mesh);
  if (p.pipeline) m.cuts = p.pipeline->cut_ops;
  m.pick = p.plan.pick;
  for (std::size_t q = 0; q < p.g.params.size(); ++q) {
    m.param_names.push_back(p.g.params[q].name);
    m.shapes.emplace_back(p.g.params[q].shape.begin(), p.g.params[q].shape.end());
    m.storage.push_back(to_string(t.storage(int(q))));
  }
  return m;
}

/// Writes the checkpoint after `steps_done` steps: every rank its shards, rank 0 (after all are
/// in place) the manifest. Returns the folder.
template <class Trainer>
std::string save_checkpoint(const settings& s, const prepared& p, const Trainer& t, std::int64_t steps_done,
                            const mesh_coord& coords, int rank, int ranks) {
  const std::filesystem::path folder = checkpoint_folder(s.checkpoint_dir, steps_done);
  const std::string mine = to_json(write_rank_shards(folder, rank, shards_to_save(p, t, coords))).dump();
  // rank 0 gathers every rank's record, then writes the manifest last
  const std::vector<std::string> records = gather_records(mine, rank, ranks);
  if (rank == 0) {
    checkpoint_manifest m = manifest_of(s, p, t, steps_done);
    for (const std::string& record : records) m.ranks.push_back(rank_file_of(record));
    write_manifest(folder, m);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return folder.string();
}

// --keep-last K: the complete checkpoints under `dir` beyond the newest K are removed (rank 0,
// after the newest is complete: save_checkpoint ends with a barrier). Other folders stay.
inline void remove_older_checkpoints(const std::filesystem::path& dir, int keep) {
  std::vector<std::filesystem::path> complete;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.rfind("step-", 0) == 0 && std::filesystem::exists(e.path() / "manifest.json"))
      complete.push_back(e.path());
  }
  std::sort(complete.begin(), complete.end());  // step-<zero-padded k>: oldest first
  for (std::size_t i = 0; i + std::size_t(keep) < complete.size(); ++i) std::filesystem::remove_all(complete[i], ec);
}
}  // namespace autoddl::tools::train
