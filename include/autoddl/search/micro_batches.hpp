#pragma once
// Choosing the micro-batch count and the recomputation together with the layouts. (Not in the
// umbrella autoddl/search.hpp: <memory> declares glibc's ::link, see mesh/link.hpp.)
//
// A plan_problem prices one setting of plan_options::microbatches and ::recompute (the graph is
// one micro-batch). plan_micro_batched builds and solves the settings worth trying and keeps the
// fastest plan that fits the memory limit. A setting fits where its step's replayed peak
// (search/step_memory.hpp) is within the limit; the layout search inside it bounds the additive
// breakdown (memory_of), which it can update as one coordinate moves.
//   - for each recomputation allowed (none, selective, full, or the pinned one), micro-batch
//     counts are divisors of the batch. m = 1 is solved first; when its plan is over the limit,
//     the next count tried is the smallest divisor m' with
//       fixed + activations / m' <= limit
//     (fixed: what does not shrink with m, activations: what does, both from the plan over the
//     limit), then the divisors above it, one at a time, until a plan fits or none is left
//     (at most 4 per recomputation; where none of them splits, the counts below the predicted
//     one, downwards); where the fitting plan uses over 90 % of the limit, the
//     next divisor is solved too, since the memory freed can buy faster layouts.
//     Where the whole batch fits in under half the limit without recomputation, nothing else
//     is tried: memory does not bind, so recomputation and micro-batches buy nothing. (Not at
//     90 %: the descent under a limit it nearly touches can miss plans a setting with more
//     room finds, and those plans may fit this setting too.)
//   - among the fitting plans the fastest wins (ties: fewer micro-batches, less recomputation).
//   - gathering again for backward (plan_options::regather_inputs, ::reshard_after_forward) is
//     on while settings are tried: it buys memory with communication. Where the winner fits and
//     regathers an input copy, its setting is solved again keeping the copies (the all-gathers
//     once a micro-batch); then, where the winner gathers parameters, again keeping them gathered
//     through the step (one all-gather a step instead of 2 m); each such plan wins where it fits
//     and is faster. A flag the caller pins (step_settings) is not tried the other way; a plan
//     that gathers nothing is not solved again.
// A count whose micro-batch the strategy's layout cannot split (zero over 64 devices, 32
// micro-batches of 32 rows) is skipped; the note names the counts skipped.
// Each setting gets the full search; the gap to the exact optimum is computed for the winner
// only. The plan's search_s is the time of everything tried (building and searching each
// setting), without the gap.
// Nothing fits: the plan with the least memory is returned (feasible == false), and
// largest_memory_term names what to cut.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "autoddl/index.hpp"
#include "autoddl/search/solve.hpp"
#include "autoddl/search/step_memory.hpp"

namespace autoddl {

class stage_layouts_memo;

/// What the caller pins: a micro-batch count and a recomputation, or nothing (the search picks).
struct step_settings {
  std::optional<int> microbatches{};
  std::optional<recompute_mode> recompute{};
  /// Whether gathered input copies and gathered parameters are gathered again for backward
  /// (plan_options::regather_inputs, ::reshard_after_forward); unset: the search chooses
  /// (plan_micro_batched).
  std::optional<bool> regather_inputs{};
  std::optional<bool> reshard_after_forward{};
  /// Whether the auto plan gets its gap to the exact reference (attach_optimal_gap); off where a
  /// caller compares many plans and measures the winner's gap itself (search_pipeline).
  bool with_gap = true;
  /// Whether the auto plan gets its runner-ups (plan_result::runner_up); off where a caller
  /// compares many plans and attaches the winner's itself (search_pipeline). Of the settings
  /// tried, only the plan kept gets them.
  bool runner_ups = true;
  /// Where one setting is all there is to try (both pinned): a plan no faster than this
  /// (seconds) is not replayed, its peak_bytes 0 and feasible false: a caller holding a feasible
  /// plan this fast does not need its memory. -infinity: none is, for a caller that replays the
  /// plan its own way (a pipeline replays each stage, search/pipeline_plan.hpp).
  std::optional<double> replay_below{};
  /// Stage layouts already solved for pipeline plans of another schedule (search/stage_layouts.hpp);
  /// null: each pipeline plan solves its own. Owned by the caller (a search).
  stage_layouts_memo* stage_layouts = nullptr;
};

/// A solved plan with the micro-batch graph and problem it was priced on.
struct micro_batched_plan {
  std::shared_ptr<plan_problem> problem;  ///< its graph is one micro-batch (shared by copies: never changed)
  plan_result result;
  int microbatches = 1;
  recompute_mode recompute = recompute_mode::none;
  int settings_tried = 0;                 ///< plans solved to choose this one
  /// The replayed step's peak per device (replay_step_memory): the figure the memory limit holds
  /// (result.feasible); a pipeline's (search/pipeline.hpp) is its stages' highest.
  double peak_bytes = 0;
};

/// The divisors of n that an int holds (micro-batch counts, axis sizes), ascending, found in
/// O(sqrt n) steps: a batch of 2^32 takes 2^16 trial divisions, not 2^32.
/// divisors(12) == {1, 2, 3, 4, 6, 12}.
inline std::vector<int> divisors(std::int64_t n) {
  std::vector<int> low, high;  // k and n / k for each k <= sqrt(n)
  for (std::int64_t k = 1; k <= n / k; ++k) {
    if (n % k != 0) continue;
    low.push_back(int(k));
    if (const std::int64_t q = n / k; q != k && q <= std::numeric_limits<int>::max()) high.push_back(int(q));
  }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

/// The name of a plan's largest memory term: "activations", "optimizer state", ...
inline std::string largest_memory_term(const memory_breakdown& m) {
  const std::pair<const char*, std::int64_t> terms[] = {{"parameters", m.params}, {"gradients", m.grads},
                                                        {"optimizer state", m.optimizer},
                                                        {"activations", m.activations}, {"transient buffers", m.transient}};
  const auto* best = std::max_element(std::begin(terms), std::end(terms),
                                      [](const auto& a, const auto& b) { return a.second < b.second; });
  return best->first;
}

/// Whether plan `pick` of `problem` gathers something again for backward over the mesh: an input
/// copy it regathers (plan_options::regather_inputs; a sequence-parallel linear's input, a
/// context-parallel attention's k and v), or a parameter use (`param`), whose forward path sends
/// bytes (an all-gather: ZeRO-3, FSDP). Local steps (S -> P) rerun too, at no communication:
/// nothing to choose there.
enum class gathered_kind { input, param };
inline bool gathers_again(const plan_problem& problem, const std::vector<int>& pick, gathered_kind kind) {
  const auto& edges = problem.untied().edges();
  for (int e = 0; e < int(edges.size()); ++e) {
    const int cu = at(pick, edges[std::size_t(e)].u), cv = at(pick, edges[std::size_t(e)].v);
    if (at(problem.edge_infos(), e).param != (kind == gathered_kind::param)) continue;
    if (kind == gathered_kind::input && !problem.regathers(e, cu, cv)) continue;
    if (problem.edge_paths(e, cu, cv).first.bytes_per_device() > 0) return true;
  }
  return false;
}

namespace detail {

/// build(m), made once and kept in `kept`: the settings of one micro-batch count (recomputation
/// modes, pipeline points) copy one graph instead of building it again (a 96-layer GPT: about
/// 3 ms a build, under 1 ms a copy).
inline const graph& kept_graph(std::map<int, graph>& kept, const std::function<graph(int)>& build, int m) {
  auto it = kept.find(m);
  if (it == kept.end()) it = kept.emplace(m, build(m)).first;
  return it->second;
}

// "; the dp layout cannot split the batch into 32, 64 or 128 micro-batches" (empty: none).
inline std::string unsplit_text(const std::set<int>& counts, const std::string& strategy) {
  if (counts.empty()) return "";
  std::string r = "; the " + strategy + " layout cannot split the batch into ";
  int k = 0;
  for (int m : counts) r += (k++ == 0 ? "" : k == int(counts.size()) ? " or " : ", ") + itos(m);
  return r + " micro-batches";
}

}  // namespace detail

/// Sets p.peak_bytes to the replayed step's peak (replay_step_memory) and p.result.feasible to
/// whether it is within p's memory limit (plan_result::memory_limit where set, else the problem's).
inline void price_peak(micro_batched_plan& p) {
  p.peak_bytes = double(replay_step_memory(*p.problem, p.result.pick).peak());
  p.result.feasible = p.peak_bytes <= p.result.memory_limit.value_or(p.problem->make_objective().memory_limit);
}

/// attach_optimal_gap on p, whose peak was replayed: the exact reference's plan, adopted on the
/// additive memory bound, is replayed too, and where the search's plan fit and the adopted one
/// does not, the search's plan stays (with its gap to the reference).
inline void adopt_exact_where_it_fits(micro_batched_plan& p, std::uint64_t seed) {
  const plan_result searched = p.result;
  const double searched_peak = p.peak_bytes;
  attach_optimal_gap(*p.problem, seed, p.result);
  if (p.result.pick == searched.pick) return;
  price_peak(p);
  if (p.result.feasible || !searched.feasible) return;
  p.result = searched;
  p.peak_bytes = searched_peak;
  attach_optimal_gap(*p.problem, seed, p.result, /*adopt=*/false);
}

namespace detail {

// `pin` with the micro-batch count and recomputation a megatron strategy's own knobs fix.
// Throws layout_error where they disagree with what pin asks for.
inline step_settings pinned_by_strategy(const plan_strategy& s, const mesh_shape& mesh, std::int64_t batch,
                                        step_settings pin) {
  const auto* mg = std::get_if<strategy::megatron>(&s);
  if (const std::optional<int> m = megatron_microbatches(s, mesh, batch)) {
    if (pin.microbatches && *pin.microbatches != *m)
      fail<layout_error>(to_string(s) + " means " + itos(*m) + " micro-batches of the batch of " + itos(batch) +
                         ", but --microbatches asks for " + itos(*pin.microbatches) + "; give one of the two");
    pin.microbatches = m;
  }
  if (mg && mg->recompute) {
    if (pin.recompute && *pin.recompute != *mg->recompute)
      fail<layout_error>(to_string(s) + " recomputes " + std::string(to_string(*mg->recompute)) +
                         ", but --recompute asks for " + std::string(to_string(*pin.recompute)) + "; give one of the two");
    pin.recompute = mg->recompute;
  }
  return pin;
}

// plan_micro_batched's choice among settings (micro-batch count, recomputation): each setting
// tried is solved and priced by its replayed peak; the best so far is kept, and a log of them.
class step_settings_choice {
 public:
  step_settings_choice(const std::function<graph(int)>& build, const plan_options& planning, const plan_strategy& s,
                       std::uint64_t seed, const step_settings& pin, bool single)
      : build_(build), planning_(planning), strategy_(s), seed_(seed), pin_(pin), single_(single) {}

  // Every count of `counts` worth trying under recomputation r, fewest first. Whether memory does
  // not bind (the first count fits with half the limit to spare: no other mode needs trying).
  bool try_mode(const std::vector<int>& counts, recompute_mode r) {
    micro_batched_plan first = solve(counts.front(), r);
    const double limit = first.problem->make_objective().memory_limit;
    if (first.result.feasible) {
      const bool more = tight(first, limit);
      const bool roomy = first.peak_bytes < 0.5 * limit;
      consider(std::move(first));
      if (roomy) return true;  // memory does not bind: recomputation and micro-batches buy nothing
      if (more && counts.size() > 1)
        if (auto next = solve_if_splits(counts[1], r)) consider(std::move(*next));
      return false;
    }
    try_over_limit(counts, r, std::move(first), limit);
    return false;
  }

  /// Where the best plan so far fits and gathers again for backward what the caller did not pin:
  /// its setting solved again keeping the input copies, then the parameters, gathered through
  /// the step; each kept where it fits and is faster. Auto solves again with the parameters kept
  /// even where its best gathers none: ZeRO-3's start is priced resharded in the search, and kept
  /// gathered it may win (GPT-2 medium, batch 4, on piz-daint mesh 4 without overlap: 294.3 ms
  /// against the 295.3 ms of auto's best while resharded, as the zero strategy alone found). A
  /// caller that replays the plan itself (replay_below set: a pipeline's stages, plan_pipeline)
  /// makes that choice itself.
  void try_keeping_gathered() {
    if (!pin_.regather_inputs && best_.problem && best_.result.feasible && gathers_again(*best_.problem, best_.result.pick, gathered_kind::input))
      solve_best_again(kept_through_step::copies);
    const bool automatic = std::holds_alternative<strategy::automatic>(strategy_) && !pin_.replay_below;
    if (!pin_.reshard_after_forward && best_.problem && best_.result.feasible && best_.problem->options().reshard_after_forward &&
        (automatic || gathers_again(*best_.problem, best_.result.pick, gathered_kind::param)))
      solve_best_again(kept_through_step::parameters);
  }

  /// The best setting, with a note of what was tried where several were.
  micro_batched_plan take_best() {
    if (!single_)
      best_.result.notes.push_back("chose " + itos(best_.microbatches) + " micro-batch" +
                                   (best_.microbatches == 1 ? "" : "es") + " and recompute " +
                                   std::string(to_string(best_.recompute)) +
                                   kept_text(best_.problem->options()) +
                                   " among " + itos(tried_) +
                                   " settings tried (micro-batches/recompute: " + log_ + ")" +
                                   unsplit_text(unsplit_, to_string(strategy_)));
    best_.settings_tried = tried_;
    return std::move(best_);
  }

 private:
  // The first count over the limit: what shrinks with m (activations, and the transient buffers,
  // mostly an op's backward working set) and what does not, from this plan, predict the count
  // that fits; tried from there up, and where none of those splits, down from it (the additive
  // prediction is an upper bound: a smaller count may fit the replayed peak).
  void try_over_limit(const std::vector<int>& counts, recompute_mode r, micro_batched_plan&& first, double limit) {
    if (counts.size() == 1) {  // no other count to predict (a pipeline's stage layouts, an mbs)
      consider(std::move(first));
      return;
    }
    const memory_breakdown mem = first.problem->memory_of(first.result.pick);
    const double fixed = double(mem.total() - mem.activations - mem.transient);
    const double act = double(mem.activations + mem.transient) * double(counts.front());
    consider(std::move(first));
    std::size_t k = 1;
    while (k < counts.size() && fixed + act / double(counts[k]) > limit) ++k;
    if (k == counts.size()) k = counts.size() - 1;  // nothing predicted to fit: the most
    std::vector<std::size_t> order;
    for (std::size_t i = k; i < counts.size(); ++i) order.push_back(i);
    const std::size_t up = order.size();
    for (std::size_t i = k; i-- > 1;) order.push_back(i);
    bool any_split = false;
    for (std::size_t n = 0, extra = 0; n < order.size() && extra < 4; ++n) {
      const std::size_t i = order[n];
      if (counts[i] == counts.front() || (n >= up && any_split)) continue;
      std::optional<micro_batched_plan> p = solve_if_splits(counts[i], r);
      if (!p) continue;
      any_split = true;
      ++extra;
      const bool more = tight(*p, limit);
      if (consider(std::move(*p))) {
        if (more && n < up && i + 1 < counts.size())
          if (auto next = solve_if_splits(counts[i + 1], r)) consider(std::move(*next));
        break;
      }
    }
  }

  static bool tight(const micro_batched_plan& p, double limit) { return p.peak_bytes > 0.9 * limit; }

  enum class kept_through_step { copies, parameters };
  // The best plan's setting again with its gathered input copies, or its parameters, kept.
  void solve_best_again(kept_through_step k) {
    const plan_options& b = best_.problem->options();
    regather_ = b.regather_inputs && k != kept_through_step::copies;
    reshard_ = b.reshard_after_forward && k != kept_through_step::parameters;
    if (auto kept = solve_if_splits(best_.microbatches, best_.recompute)) consider(std::move(*kept));
    regather_ = planning_.regather_inputs;
    reshard_ = planning_.reshard_after_forward;
  }

  micro_batched_plan solve(int m, recompute_mode r) {
    plan_options o = planning_;
    o.microbatches = m;
    o.recompute = r;
    o.regather_inputs = regather_;
    o.reshard_after_forward = reshard_;
    micro_batched_plan p;
    p.problem = std::make_unique<plan_problem>(single_ ? build_(m) : graph(kept_graph(graphs_, build_, m)), o);
    // while choosing, the search skips its exact reference and runner-ups (the winner gets them after)
    p.result = solve_plan(*p.problem, strategy_, seed_, /*with_gap=*/single_ && pin_.with_gap,
                          /*runner_ups=*/single_ && pin_.runner_ups);
    if (single_ && pin_.replay_below && !(p.result.time < *pin_.replay_below)) {
      p.result.feasible = false;  // not replayed (step_settings::replay_below)
    } else {
      price_peak(p);  // the descent bounded the additive breakdown; the setting fits where the replay does
    }
    p.microbatches = m;
    p.recompute = r;
    ++tried_;
    const bool again = regather_ != planning_.regather_inputs || reshard_ != planning_.reshard_after_forward;
    log_ += (log_.empty() ? "" : ", ") + itos(m) + "/" + std::string(to_string(r)) + (again ? kept_text(o) : "") + " " +
            (p.result.feasible ? "fits" : "over");
    return p;
  }
  // A setting whose micro-batch the strategy's layout cannot split (zero over 64 devices, 32
  // micro-batches of 32 rows) is no plan: it is skipped, and the log says so.
  std::optional<micro_batched_plan> solve_if_splits(int m, recompute_mode r) {
    try {
      return solve(m, r);
    } catch (const layout_error&) {
      unsplit_.insert(m);
      return std::nullopt;
    }
  }
  // a strictly better than b
  static bool better(const micro_batched_plan& a, const micro_batched_plan& b) {
    if (!b.problem) return true;
    if (a.result.feasible != b.result.feasible) return a.result.feasible;
    if (!a.result.feasible) return a.peak_bytes < b.peak_bytes;
    return a.result.time < b.result.time * (1 - 1e-9);
  }
  // p kept where it beats the best so far; whether p fits.
  bool consider(micro_batched_plan&& p) {
    const bool fits = p.result.feasible;
    if (better(p, best_)) best_ = std::move(p);
    return fits;
  }

  const std::function<graph(int)>& build_;
  const plan_options& planning_;
  const plan_strategy& strategy_;
  std::uint64_t seed_;
  const step_settings& pin_;
  bool single_;
  bool regather_ = planning_.regather_inputs;  ///< the settings being solved gather copies again
  bool reshard_ = planning_.reshard_after_forward;  ///< and parameters
  // ", copies kept, parameters kept gathered" where o keeps them through the step ("": gathers again).
  static std::string kept_text(const plan_options& o) {
    return std::string(o.regather_inputs ? "" : ", copies kept") + (o.reshard_after_forward ? "" : ", parameters kept gathered");
  }
  micro_batched_plan best_;
  std::map<int, graph> graphs_;  ///< per micro-batch count, where several settings are tried
  int tried_ = 0;
  std::string log_;       ///< "1/none over, 4/none fits, ..."
  std::set<int> unsplit_;  ///< counts the layout cannot split
};

}  // namespace detail

/// Plans the model `build(m)` makes (one micro-batch of a step of m, batch `batch` in all) by
/// strategy s, choosing the micro-batch count and the recomputation where `pin` leaves them open.
/// Throws error when a pinned count does not divide the batch.
inline micro_batched_plan plan_micro_batched(const std::function<graph(int)>& build, std::int64_t batch,
                                             const plan_options& base, const plan_strategy& s, step_settings pin,
                                             std::uint64_t seed = 1) {
  const planning_clock::scope timing(planning_phase::layout_search);
  check_strategy(s, base.mesh);
  if (pipeline_stages(s) > 1)
    detail::fail<layout_error>(to_string(s) + " has " + detail::itos(pipeline_stages(s)) +
                               " pipeline stages, which this planner does not lay out; plan it with "
                               "plan_pipeline (search/pipeline.hpp, as autoddl-plan and autoddl-train do) or leave pp out");
  pin = detail::pinned_by_strategy(s, base.mesh, batch, pin);
  plan_options planning = base;
  planning.regather_inputs = pin.regather_inputs.value_or(base.regather_inputs);  // base off: nothing to choose
  planning.reshard_after_forward = pin.reshard_after_forward.value_or(base.reshard_after_forward);
  planning.mesh = planning_mesh(s, base.mesh);
  planning.zero1_layouts = base.zero1_layouts || uses_zero1_layouts(s);
  planning.zero2_layouts = base.zero2_layouts || uses_zero2_layouts(s);
  if (pin.microbatches) check_microbatches(*pin.microbatches, batch);
  const std::vector<int> counts = pin.microbatches ? std::vector<int>{*pin.microbatches} : divisors(batch);
  std::vector<recompute_mode> modes{recompute_mode::none, recompute_mode::selective, recompute_mode::full};
  if (pin.recompute) modes = {*pin.recompute};
  const bool searching = std::holds_alternative<strategy::automatic>(s);
  const bool single = counts.size() == 1 && modes.size() == 1;

  const auto t0 = std::chrono::steady_clock::now();
  detail::step_settings_choice choice(build, planning, s, seed, pin, single);
  for (recompute_mode r : modes)
    if (choice.try_mode(counts, r)) break;
  choice.try_keeping_gathered();
  micro_batched_plan best = choice.take_best();
  if (searching && !single) {  // search_s: everything tried, the winner's runner-ups; then its gap
    if (pin.runner_ups) attach_runner_ups(*best.problem, best.result);
    best.result.search_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (pin.with_gap) adopt_exact_where_it_fits(best, seed);
  }
  return best;
}

/// The smallest mesh like base.mesh, with its outermost axis doubled up to max_doublings times,
/// on which the search finds a plan that fits; nullopt when none does. (For the message of a
/// model that fits no plan.)
inline std::optional<mesh_shape> smallest_fitting_mesh(const std::function<graph(int)>& build, std::int64_t batch,
                                                       const plan_options& base, step_settings pin,
                                                       std::uint64_t seed = 1, int max_doublings = 6) {
  plan_options o = base;
  for (int k = 0; k < max_doublings; ++k) {
    mesh_shape m;
    m.push_back(o.mesh[0] * 2);
    for (int a = 1; a < o.mesh.size(); ++a) m.push_back(o.mesh[a]);
    o.mesh = m;
    try {
      if (plan_micro_batched(build, batch, o, strategy::automatic{}, pin, seed).result.feasible) return o.mesh;
    } catch (const error&) {
      return std::nullopt;  // the batch no longer divides, or the like: no such mesh
    }
  }
  return std::nullopt;
}

}  // namespace autoddl
