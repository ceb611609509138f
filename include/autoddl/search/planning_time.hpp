#pragma once
// Where planning time goes, by phase, for a report (autoddl-plan's search_s and search_parts_s).
// A figure, never an input: no search reads it, so the same inputs give the same plan at any load;
// search budgets are counted in units of work, never in seconds.
//   layout_search     plan_micro_batched at the top: the layout search over the settings tried
//   pipeline_search   search_pipeline: stage counts, micro-batches, recomputation and cuts
//   megatron_layouts  search_megatron_layouts: the descent over Megatron-LM's knobs
//   exact_reference   attach_optimal_gap: the series-parallel DP and the descent it is compared with
// A phase opened inside another counts towards the outer one (a megatron point's layout search
// is the megatron descent's time), except exact_reference, which counts on its own wherever it
// runs. Per thread.
//   planning_clock::reset();  ... plan ...;  planning_clock::seconds(planning_phase::exact_reference)
#include <array>
#include <chrono>
#include <cstddef>

namespace autoddl {

enum class planning_phase { layout_search, pipeline_search, megatron_layouts, exact_reference };
inline constexpr std::size_t planning_phases = 4;

constexpr const char* to_string(planning_phase p) {
  return p == planning_phase::layout_search      ? "layout_search"
         : p == planning_phase::pipeline_search  ? "pipeline_search"
         : p == planning_phase::megatron_layouts ? "megatron_layouts"
                                                 : "exact_reference";
}

/// The seconds spent in each phase on this thread since reset().
class planning_clock {
 public:
  static void reset() { state() = {}; }
  static double seconds(planning_phase p) { return state().total[std::size_t(p)]; }

  /// Times phase p while it lives, where it counts (see the header).
  class scope {
   public:
    explicit scope(planning_phase p) {
      running& s = state();
      if (s.open >= 0 && p != planning_phase::exact_reference) return;  // counts towards the open phase
      outer_ = s.open;
      if (outer_ >= 0) s.total[std::size_t(outer_)] += since(s.since);  // the outer phase pauses
      s.open = int(p);
      s.since = clock::now();
      active_ = true;
    }
    ~scope() {
      if (!active_) return;
      running& s = state();
      s.total[std::size_t(s.open)] += since(s.since);
      s.open = outer_;
      s.since = clock::now();
    }
    scope(const scope&) = delete;
    scope& operator=(const scope&) = delete;

   private:
    bool active_ = false;
    int outer_ = -1;
  };

 private:
  using clock = std::chrono::steady_clock;
  struct running {
    std::array<double, planning_phases> total{};
    int open = -1;  ///< the phase counting now (-1: none)
    clock::time_point since{};
  };
  static running& state() {
    thread_local running s;
    return s;
  }
  static double since(clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); }
};

}  // namespace autoddl
