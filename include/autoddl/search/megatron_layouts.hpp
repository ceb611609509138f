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
//   ep         not a knob: a model with experts folds them onto tp x cp where that divides the
//              expert count, else onto tp (Megatron-Core's MoE parallel folding)
// The descent starts at tp = the innermost axis, cp = vpp = mbs = 1 and selective recomputation
// at the given stage count and the two next to it on either side, and moves one knob one step
// at a time to the best neighbour (fitting first, then faster) while that improves; where that
// stops, a neighbour that is faster but over the memory limit is tried with one more step of
// cp, pp or recomputation, then one stage more or fewer with every interleaving, then tensor
// parallelism traded for context parallelism at every stage count and interleaving, and single
// moves go on from a better point so found; all within
// max_points plans (a value the mesh, the batch, the sequence or Megatron-LM's rules on the model
// (strategy_model.hpp: tp dividing the heads, pp x vpp the layers) do not take costs nothing and
// is stepped over). Each point is an expert
// plan (make_expert_plan), priced as autoddl-plan prices `--strategy megatron:...`: the search
// cannot do worse than the best layout on that path, and Megatron-LM's published layouts (tp,
// pp, cp, vpp and mbs as its users write them) are on it where the descent reaches them.
// Example: search_megatron_layouts(build, 128, o, {}) on 8x8 dgx-h100 for Llama 3 70B.
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include "autoddl/search/micro_batches.hpp"
#include "autoddl/search/pipeline.hpp"
#include "autoddl/search/strategy.hpp"
#include "autoddl/search/strategy_model.hpp"

namespace autoddl {

/// Which megatron layouts the descent may visit.
struct megatron_layout_space {
  bool pipelines = true;    ///< pp > 1 (search_pipeline's condition: the outermost axis between nodes)
  bool interleaved = true;  ///< vpp > 1 (autoddl-train runs one chunk per device)
  int first_stages = 1;     ///< pp to start from (the layout search's own best pipeline, where it has one)
  /// torchtitan's knobs instead of Megatron-LM's: FSDP (fsdp=1) in the distributed optimizer's
  /// place, sequence parallelism with tensor parallelism, no expert parallelism, tp dividing the
  /// key/value heads (torchtitan/models/common/decoder.py; Megatron-LM may replicate them), no
  /// pipeline with tied embeddings, the sequence a multiple of tp x 2 cp (torchtitan/trainer.py)
  bool torchtitan = false;
  /// A layout to start from instead of the stage counts around first_stages, where the mesh and
  /// the model take it: auto's torchtitan descent starts where the Megatron-LM descent ended (each
  /// torchtitan point is its Megatron-LM twin with FSDP in the distributed optimizer's place, so
  /// both descents would retrace one path; FSDP's smaller state lets it go on where memory binds).
  std::optional<strategy::megatron> start{};
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


// The knob lists of search_megatron_layouts and the points tried (megatron_point: indices into
// them) with the best so far.
class megatron_search {
 public:
  megatron_search(const std::function<graph(int)>& build, std::int64_t batch, const plan_options& base, step_settings pin,
                  std::uint64_t seed, const megatron_layout_space& space, int max_points)
      : build_model_(build), batch_(batch), base_(base), seed_(seed), max_points_(max_points), torchtitan_(space.torchtitan) {
    build_ = [this](int m) { return graph(kept_graph(graphs_, build_model_, m)); };
    const mesh_shape& mesh = base.mesh;
    tps_ = divisors(mesh[mesh.size() - 1]);
    const graph& one = kept_graph(graphs_, build_model_, 1);
    experts_ = experts_of(one);
    std::map<int, int> uses;  // per parameter: the ops that read it (tied embeddings: two)
    for (const op_node& n : one.ops) {
      if (n.kind == op_kind::attention) kv_heads_ = std::gcd(kv_heads_, n.attrs.key_value_heads());  // tp divides them (torchtitan)
      for (int q : n.param_ids) tied_ = ++uses[q] > 1 || tied_;
    }
    if (!one.inputs.empty() && one.inputs[0].rank() >= 2) seq_ = one.inputs[0][1];
    if (space.pipelines && mesh.size() > 1) {
      const int units = int(pipeline_units(one).size());
      for (int d : divisors(mesh[0]))
        if (d > 1 && d <= units) pps_.push_back(d);
    }
    if (space.interleaved)
      for (int v = 2; v <= 8; ++v) vpps_.push_back(v);
    // mbs 0: the micro-batch count a caller pins (--microbatches), else the planner's choice
    mbss_ = pin.microbatches ? std::vector<int>{0} : std::vector<int>{1, 2, 4};
    if (pin.recompute) rs_ = {*pin.recompute};
    pin.with_gap = false;
    pin.runner_ups = false;
    pin.stage_layouts = &stage_layouts_;  // the interleavings of one stage count share their stage layouts
    pin_ = pin;
    sizes_ = {int(tps_.size()), int(pps_.size()), int(cps_.size()), int(vpps_.size()), int(mbss_.size()), int(rs_.size())};
  }

  // starts: `from` where given and it makes a plan; else tp the innermost axis, selective
  // recomputation, at the stage counts nearest `first_stages` (its index, and up to two on either side)
  void start(int first_stages, const std::optional<strategy::megatron>& from) {
    if (from)
      if (const std::optional<megatron_point> x = point_of(*from)) eval(*x);
    if (best_) return;
    int at_pp = int(std::find(pps_.begin(), pps_.end(), first_stages) - pps_.begin());
    if (at_pp >= sizes_[1]) at_pp = 0;
    const int r0 = rs_.size() == 3 ? 1 : 0;
    for (int d : {0, 1, -1, 2, -2})
      if (at_pp + d >= 0 && at_pp + d < sizes_[1]) eval({sizes_[0] - 1, at_pp + d, 0, 0, 0, r0});
    if (!best_) eval({sizes_[0] - 1, 0, 0, 0, 0, int(rs_.size()) - 1});  // no pipeline, full recomputation
    // none of those splits the model (tp not dividing the heads, the batch not the data-parallel
    // devices): the largest tp, then cp, that does, without a pipeline
    for (int t = sizes_[0] - 1; t >= 0 && !best_; --t)
      for (int c = 0; c < sizes_[2] && !best_; ++c) eval({t, 0, c, 0, 0, r0});
  }

  // One round from the best point. Whether the descent goes on.
  bool round() {
    const megatron_point from = *best_;
    const std::vector<megatron_point> near = neighbours(from);
    if (!(*best_ == from)) return true;
    // Where single moves stop: a neighbour faster but over the memory limit, with one or two
    // steps more of a knob that saves memory (more context parallelism, more stages, more
    // recomputation) or of the knob that moved: Llama 3 70B on 8x8 goes from tp=8,pp=2 through
    // tp=4,pp=2 (faster, over) to tp=4,pp=2,cp=2, and from tp=4,pp=4,cp=2 through vpp=2 (faster,
    // over) to vpp=4
    const double here = seen_.at(from)->time;
    for (const auto& x : near) {
      const auto got = seen_.find(x);
      if (got == seen_.end() || !got->second) continue;
      // over the limit and faster; or fitting only by gathering again, where keeping is faster but over
      const megatron_layout_plan& n = *got->second;
      const bool over_faster = !n.feasible && n.time < here;
      if (!over_faster && !(n.pipeline && n.pipeline->faster_over && *n.pipeline->faster_over < here)) continue;
      const int moved = int(std::find_if(x.begin(), x.end(), [&, k = 0](int v) mutable { return v != from[std::size_t(k++)]; }) - x.begin());
      const int way = x[std::size_t(moved)] - from[std::size_t(moved)];
      for (int k : {2, 1, 5, moved})
        for (int steps : {1, 2}) {
          megatron_point y = x;
          y[std::size_t(k)] += k == moved ? steps * way : steps;
          if (y[std::size_t(k)] >= 0 && y[std::size_t(k)] < sizes_[std::size_t(k)]) eval(y);
        }
    }
    if (!(*best_ == from)) return true;
    // Where that stops too: one pipeline stage more or fewer with every interleaving, a move of
    // two knobs (Llama 3.1 70B on 8x8 at batch 128: from tp=4,pp=2,cp=2 to tp=4,pp=4,cp=2,vpp=5,
    // whose bubble interleaving shrinks)
    for (int step : {1, -1})
      for (int v = 0; v < sizes_[3]; ++v) {
        megatron_point y = from;
        y[1] += step;
        y[3] = v;
        if (y[1] >= 0 && y[1] < sizes_[1]) eval(y);
      }
    if (!(*best_ == from)) return true;
    // and tensor parallelism traded for context parallelism (tp one step down, cp one up) at every
    // stage count and interleaving: Llama 3.1 70B on 4x8 at batch 128 goes from tp=8,pp=4 to
    // tp=4,pp=4,cp=2,vpp=5, and on 8x8 at batch 64 from tp=8 to the same, which no single move
    // nor the stage moves reach (the values Megatron-LM's rules refuse cost nothing)
    for (int p = 0; p < sizes_[1]; ++p)
      for (int v = 0; v < sizes_[3]; ++v) {
        megatron_point y = from;
        y[0] -= 1;
        y[1] = p;
        y[2] += 1;
        y[3] = v;
        if (y[0] >= 0 && y[2] < sizes_[2]) eval(y);
      }
    return !(*best_ == from);
  }

  bool found() const { return best_.has_value(); }
  bool budget_left() const { return priced_ < max_points_; }
  megatron_layout_plan take_best() {
    megatron_layout_plan r = std::move(*seen_[*best_]);
    r.points = priced_;
    return r;
  }

 private:
  // The point of knobs m (its knobs' indices), where every knob is on the lists.
  std::optional<megatron_point> point_of(const strategy::megatron& m) const {
    const auto index = [](const auto& list, const auto& value) {
      const auto it = std::find(list.begin(), list.end(), value);
      return it == list.end() ? -1 : int(it - list.begin());
    };
    const megatron_point x{index(tps_, m.tp), index(pps_, std::max(m.pp, 1)), index(cps_, std::max(m.cp, 1)),
                           index(vpps_, std::max(m.vpp, 1)), index(mbss_, m.mbs),
                           m.recompute ? index(rs_, *m.recompute) : -1};
    if (std::find(x.begin(), x.end(), -1) != x.end()) return std::nullopt;
    return x;
  }
  // Whether torchtitan 0.3.0 runs knobs m on this model (tools/engine_settings.hpp's rules): tp
  // dividing the key/value heads (it shards whole ones, never replicates them), no pipeline with
  // tied embeddings, the sequence a multiple of tp (sequence parallelism) x 2 cp.
  bool torchtitan_takes(const strategy::megatron& m) const {
    if (kv_heads_ % m.tp != 0 || (tied_ && m.pp > 1)) return false;
    const std::int64_t split = std::int64_t(m.tp > 1 ? m.tp : 1) * (m.cp > 1 ? 2 * m.cp : 1);
    return seq_ == 0 || seq_ % split == 0;
  }
  // The knobs of point x.
  strategy::megatron knobs(const megatron_point& x) const {
    strategy::megatron m;
    m.tp = at(tps_, x[0]);
    m.pp = at(pps_, x[1]) > 1 ? at(pps_, x[1]) : 0;
    m.cp = at(cps_, x[2]) > 1 ? at(cps_, x[2]) : 0;
    m.vpp = at(vpps_, x[3]) > 1 ? at(vpps_, x[3]) : 0;
    m.mbs = at(mbss_, x[4]);  // 0: pin.microbatches
    m.recompute = at(rs_, x[5]);
    m.sp = m.tp > 1;
    m.dopt = !torchtitan_;
    m.fsdp = torchtitan_;
    if (torchtitan_) return m;
    // experts folded onto the tensor- and context-parallel devices where they divide, else onto
    // the tensor-parallel ones (Megatron-Core's MoE parallel folding)
    const int folded = m.tp * std::max(m.cp, 1);
    if (experts_ > 0 && folded > 1 && experts_ % folded == 0) m.ep = folded;
    else if (experts_ > 0 && m.tp > 1 && m.cp <= 1 && experts_ % m.tp == 0) m.ep = m.tp;
    return m;
  }
  // The expert count of the model's experts ops (0: none).
  static std::int64_t experts_of(const graph& g) {
    for (const op_node& n : g.ops)
      if (n.kind == op_kind::experts || n.kind == op_kind::routed_experts) return n.params[0][0];
    return 0;
  }
  // The plan of knobs m: a pipeline where m.pp > 1, else a flat plan. Throws error where the
  // mesh, the batch or the sequence does not split that way.
  // A plan no faster than the best point's, where that fits, is not replayed
  // (plan_megatron_pipeline's rival, step_settings::replay_below): it does not become the best
  // (better_megatron), and round() reads no memory of a point at least as slow as the best.
  megatron_layout_plan plan_of(const strategy::megatron& m) const {
    megatron_layout_plan r;
    r.knobs = m;
    const megatron_layout_plan* best = best_ ? &*seen_.at(*best_) : nullptr;
    const std::optional<double> rival = best && best->feasible ? std::optional<double>(best->time) : std::nullopt;
    if (m.pp > 1) {
      r.pipeline = plan_megatron_pipeline(build_, batch_, base_, m, pin_, seed_, rival);
      r.time = r.pipeline->time;
      r.feasible = r.pipeline->feasible;
      r.peak_memory = r.pipeline->peak_memory();
    } else {
      step_settings pin = pin_;
      pin.replay_below = rival;  // mbs and recompute pin one setting
      r.flat = plan_micro_batched(build_, batch_, base_, m, pin, seed_);
      r.time = r.flat->result.time;
      r.feasible = r.flat->result.feasible;
      r.peak_memory = r.flat->peak_bytes;
    }
    return r;
  }
  void eval(const megatron_point& x) {
    if (seen_.count(x) || priced_ >= max_points_) return;
    std::optional<megatron_layout_plan>& slot = seen_[x];  // nullopt: no plan
    const strategy::megatron m = knobs(x);
    if (m.vpp > 0 && m.pp == 0) return;  // interleaving needs stages
    if (torchtitan_ && !torchtitan_takes(m)) return;
    try {
      // whole heads per device, even model chunks; on the kept graph, not a copy of it per point
      check_strategy_on_model(m, kept_graph(graphs_, build_model_, 1), base_.mesh);
      slot = plan_of(m);
      ++priced_;
    } catch (const error&) {  // the mesh, the batch or the sequence does not split that way
      return;
    }
    if (best_ && !better_megatron(*slot, *seen_[*best_])) {
      lighten(*slot);
      return;
    }
    if (best_) lighten(*seen_[*best_]);
    best_ = x;
  }
  // A point that is not the best keeps what round() and plan_of read of it (its time,
  // feasibility, peak and faster_over), not its layouts: their problem is most of its bytes (a
  // GPT of 2048 layers: tens of MB a point), and freeing it makes room for the next point's.
  static void lighten(megatron_layout_plan& p) {
    p.flat.reset();
    if (p.pipeline) p.pipeline->layouts = micro_batched_plan{};
  }
  // The nearest point that makes a plan in each direction of each knob from `from`, priced:
  // a value the mesh, the batch or the sequence does not take is stepped over (Llama 3.1 405B on
  // 72x8 with 126 layers goes from pp=6 past pp=8 to pp=9).
  std::vector<megatron_point> neighbours(const megatron_point& from) {
    std::vector<megatron_point> r;
    for (int k = 0; k < 6; ++k)
      for (int step : {-1, 1}) {
        megatron_point x = from;
        for (x[std::size_t(k)] += step; x[std::size_t(k)] >= 0 && x[std::size_t(k)] < sizes_[std::size_t(k)];
             x[std::size_t(k)] += step) {
          eval(x);
          const auto got = seen_.find(x);
          if (got == seen_.end()) break;  // out of budget
          if (got->second) {
            r.push_back(x);
            break;
          }
        }
      }
    return r;
  }

  const std::function<graph(int)>& build_model_;
  std::map<int, graph> graphs_;  ///< points of one micro-batch count copy one graph (kept_graph)
  std::function<graph(int)> build_;
  std::int64_t experts_ = 0;
  int kv_heads_ = 0;  ///< the greatest common divisor of the attentions' key/value heads (0: no attention)
  bool tied_ = false;        ///< a parameter read by two ops (tied embeddings)
  std::int64_t seq_ = 0;     ///< the model input's dim 1 (the sequence), 0 where it has none
  std::int64_t batch_;
  const plan_options& base_;
  step_settings pin_;
  std::uint64_t seed_;
  int max_points_;
  bool torchtitan_ = false;
  std::vector<int> tps_, pps_{1}, cps_{1, 2, 4, 8, 16}, vpps_{1}, mbss_;
  std::vector<recompute_mode> rs_{recompute_mode::none, recompute_mode::selective, recompute_mode::full};
  std::array<int, 6> sizes_{};
  std::map<megatron_point, std::optional<megatron_layout_plan>> seen_;
  stage_layouts_memo stage_layouts_;
  std::optional<megatron_point> best_;
  int priced_ = 0;  ///< points that made a plan
};

}  // namespace detail

/// The descent over megatron's knobs (see the header); nullopt where no knob setting makes a
/// plan (the batch or the sequence split no way the mesh asks).
inline std::optional<megatron_layout_plan> search_megatron_layouts(const std::function<graph(int)>& build,
                                                                   std::int64_t batch, const plan_options& base,
                                                                   step_settings pin, std::uint64_t seed = 1,
                                                                   megatron_layout_space space = {}, int max_points = 64) {
  const planning_clock::scope timing(planning_phase::megatron_layouts);
  detail::megatron_search search(build, batch, base, pin, seed, space, max_points);
  search.start(space.first_stages, space.start);
  while (search.found() && search.budget_left())
    if (!search.round()) break;
  if (!search.found()) return std::nullopt;
  return search.take_best();
}

}  // namespace autoddl
