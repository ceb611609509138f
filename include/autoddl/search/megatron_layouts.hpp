#pragma once
// Megatron-LM's layouts across every parallel dimension, as the auto plan's last starts: a
// coordinate descent over megatron's knobs (strategy.hpp) with the distributed optimizer and
// sequence parallelism on, as the published LLaMA runs configure them:
//   tp         divisors of the innermost axis (largest first)
//   pp         1, and the divisors of the outermost axis up to the pipeline units (pipelines on)
//   cp         1, 2, 4, 8, 16 (those the mesh and the sequence take)
//   vpp        1..8 (interleaving on; pp > 1)
//   mbs        1, 2, 4 (none where the caller pins the micro-batch count)
//   recompute  none, selective, full
// The descent starts at tp = the innermost axis, cp = vpp = mbs = 1 and selective recomputation
// at the given stage count and the two next to it on either side, and moves one knob one step
// at a time to the best neighbour (fitting first, then faster) while that improves; where that
// stops, a neighbour that is faster but over the memory limit is tried with one more step of
// cp, pp or recomputation, and single moves go on from a better point so found; all within
// max_points plans. Each point is an expert
// plan (make_expert_plan), priced as autoddl-plan prices `--strategy megatron:...`: the search
// cannot do worse than the best layout on that path, and Megatron-LM's published layouts (tp,
// pp, cp, vpp and mbs as its users write them) are on it where the descent reaches them.
// Example: search_megatron_layouts(build, 128, o, {}) on 8x8 dgx-h100 for Llama 3 70B.
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "autoddl/search/micro_batches.hpp"
#include "autoddl/search/pipeline.hpp"
#include "autoddl/search/strategy.hpp"

namespace autoddl {

/// Which megatron layouts the descent may visit.
struct megatron_layout_space {
  bool pipelines = true;    ///< pp > 1 (search_pipeline's condition: the outermost axis between nodes)
  bool interleaved = true;  ///< vpp > 1 (autoddl-train runs one chunk per device)
  int first_stages = 1;     ///< pp to start from (the layout search's own best pipeline, where it has one)
};

/// The best megatron layout found: its strategy and its plan, a pipeline (pp > 1) or not.
struct megatron_layout_plan {
  strategy::megatron knobs;
  std::optional<pipeline_plan> pipeline;  ///< pp > 1
  std::optional<micro_batched_plan> flat;  ///< pp = 1
  double time = 0;
  bool feasible = false;
  double peak_memory = 0;
  int points = 0;  ///< layouts priced
};

namespace detail {

// One point: indices into the knob lists tp, pp, cp, vpp, mbs, recompute.
using megatron_point = std::array<int, 6>;

inline bool better_megatron(const megatron_layout_plan& a, const megatron_layout_plan& b) {
  if (a.feasible != b.feasible) return a.feasible;
  if (!a.feasible) return a.peak_memory < b.peak_memory;
  return a.time < b.time * (1 - 1e-9);
}

}  // namespace detail

/// The descent over megatron's knobs (see the header); nullopt where no knob setting makes a
/// plan (the batch or the sequence split no way the mesh asks).
inline std::optional<megatron_layout_plan> search_megatron_layouts(const std::function<graph(int)>& build,
                                                                   std::int64_t batch, const plan_options& base,
                                                                   step_settings pin, std::uint64_t seed = 1,
                                                                   megatron_layout_space space = {}, int max_points = 40) {
  const mesh_shape& mesh = base.mesh;
  std::vector<int> tps = divisors(mesh[mesh.size() - 1]);
  std::vector<int> pps{1};
  if (space.pipelines && mesh.size() > 1) {
    const int units = int(pipeline_units(build(1)).size());
    for (int d : divisors(mesh[0]))
      if (d > 1 && d <= units) pps.push_back(d);
  }
  const std::vector<int> cps{1, 2, 4, 8, 16};
  std::vector<int> vpps{1};
  if (space.interleaved)
    for (int v = 2; v <= 8; ++v) vpps.push_back(v);
  // mbs 0: the micro-batch count a caller pins (--microbatches), else the planner's choice
  const std::vector<int> mbss = pin.microbatches ? std::vector<int>{0} : std::vector<int>{1, 2, 4};
  std::vector<recompute_mode> rs{recompute_mode::none, recompute_mode::selective, recompute_mode::full};
  if (pin.recompute) rs = {*pin.recompute};
  pin.with_gap = false;
  pin.runner_ups = false;

  const std::array<int, 6> sizes{int(tps.size()), int(pps.size()), int(cps.size()), int(vpps.size()), int(mbss.size()),
                                 int(rs.size())};
  std::map<detail::megatron_point, std::optional<megatron_layout_plan>> seen;
  std::optional<detail::megatron_point> best;
  auto eval = [&](const detail::megatron_point& x) {
    if (seen.count(x) || int(seen.size()) >= max_points) return;
    std::optional<megatron_layout_plan>& slot = seen[x];
    strategy::megatron m;
    m.tp = at(tps, x[0]);
    m.pp = at(pps, x[1]) > 1 ? at(pps, x[1]) : 0;
    m.cp = at(cps, x[2]) > 1 ? at(cps, x[2]) : 0;
    m.vpp = at(vpps, x[3]) > 1 ? at(vpps, x[3]) : 0;
    m.mbs = at(mbss, x[4]);  // 0: pin.microbatches
    m.recompute = at(rs, x[5]);
    m.sp = m.tp > 1;
    m.dopt = true;
    if (m.vpp > 0 && m.pp == 0) return;  // interleaving needs stages
    try {
      megatron_layout_plan r;
      r.knobs = m;
      if (m.pp > 1) {
        r.pipeline = plan_megatron_pipeline(build, batch, base, m, pin, seed);
        r.time = r.pipeline->time;
        r.feasible = r.pipeline->feasible;
        r.peak_memory = r.pipeline->peak_memory();
      } else {
        r.flat = plan_micro_batched(build, batch, base, m, pin, seed);
        r.time = r.flat->result.time;
        r.feasible = r.flat->result.feasible;
        r.peak_memory = r.flat->peak_bytes;
      }
      slot = std::move(r);
    } catch (const error&) {  // the mesh, the batch or the sequence does not split that way
      return;
    }
    if (!best || detail::better_megatron(*slot, *seen[*best])) best = x;
  };
  // starts: tp the innermost axis, selective recomputation, at the stage counts nearest the
  // given one (its index, and up to two on either side)
  int at_pp = int(std::find(pps.begin(), pps.end(), space.first_stages) - pps.begin());
  if (at_pp >= sizes[1]) at_pp = 0;
  const int r0 = rs.size() == 3 ? 1 : 0;
  for (int d : {0, 1, -1, 2, -2})
    if (at_pp + d >= 0 && at_pp + d < sizes[1]) eval({sizes[0] - 1, at_pp + d, 0, 0, 0, r0});
  if (!best) eval({sizes[0] - 1, 0, 0, 0, 0, int(rs.size()) - 1});  // no pipeline, full recomputation
  auto neighbours = [&sizes](const detail::megatron_point& from) {
    std::vector<detail::megatron_point> r;
    for (int k = 0; k < 6; ++k)
      for (int step : {-1, 1}) {
        detail::megatron_point x = from;
        x[std::size_t(k)] += step;
        if (x[std::size_t(k)] >= 0 && x[std::size_t(k)] < sizes[std::size_t(k)]) r.push_back(x);
      }
    return r;
  };
  while (best && int(seen.size()) < max_points) {
    const detail::megatron_point from = *best;
    for (const auto& x : neighbours(from)) eval(x);
    if (!(*best == from)) continue;
    // Where single moves stop: a neighbour faster but over the memory limit, with one move that
    // saves memory (more context parallelism, more stages, more recomputation): Llama 3 70B on
    // 8x8 goes from tp=8,pp=2 through tp=4,pp=2 (faster, over) to tp=4,pp=2,cp=2
    const double here = seen.at(from)->time;
    for (const auto& x : neighbours(from)) {
      const auto got = seen.find(x);
      if (got == seen.end() || !got->second || got->second->feasible || got->second->time >= here) continue;
      for (int k : {2, 1, 5}) {
        detail::megatron_point y = x;
        y[std::size_t(k)] += 1;
        if (y[std::size_t(k)] < sizes[std::size_t(k)]) eval(y);
      }
    }
    if (*best == from) break;
  }
  if (!best) return std::nullopt;
  megatron_layout_plan r = std::move(*seen[*best]);
  r.points = int(seen.size());
  return r;
}

}  // namespace autoddl
