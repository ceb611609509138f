#pragma once
// autoddl-train's report on rank 0: one JSON object (--json), or a few lines for a person.
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <string>

#include "autoddl/search/report.hpp"
#include "plan_report.hpp"
#include "serial_check.hpp"
#include "support/stats.hpp"
#include "train_pipeline.hpp"
#include "train_setup.hpp"

namespace autoddl::tools::train {

// What a step is predicted to send and hold per device, and what was measured: the whole plan's,
// or with a pipeline the most of any stage.
struct device_figures {
  double bytes = 0, predicted_bytes = 0, predicted_peak = 0;
};
inline device_figures figures_of(const prepared& p, const run_record& run) {
  device_figures f{double(run.bytes), p.plan.totals.bytes, p.peak_bytes};
  if (!p.pipeline) return f;
  f.bytes = f.predicted_bytes = 0;
  for (int i = 0; i < p.stages(); ++i) {
    f.bytes = std::max(f.bytes, at(run.stages, i).bytes);
    f.predicted_bytes = std::max(f.predicted_bytes, at(p.pipeline->stages, i).bytes);
  }
  return f;
}

// The report as one JSON object.
inline nlohmann::json report_json(const settings& s, const prepared& p, const run_record& run, const serial_check* check,
                                  int ranks) {
  const plan_problem& problem = *p.problem;
  const plan_result& plan = p.plan;
  const double med = tools::median(run.secs);
  const device_figures fig = figures_of(p, run);
  nlohmann::json j;
  j["first_step"] = p.first_step;
  j["losses"] = run.losses;
  j["checkpoints"] = run.checkpoints;
  j["resumed_from"] = p.resume_folder.empty() ? nlohmann::json(nullptr) : nlohmann::json(p.resume_folder.string());
  j["step_s"] = run.secs;
  j["step_s_median"] = med;
  j["predicted_step_s"] = plan.time;
  const tools::throughput tp = tools::throughput_of(problem, med, p.stages());
  j["tokens_per_s_per_device"] = tp.tokens_per_s_per_device;  // measured (0 for a model without tokens)
  j["model_flops_per_token"] = tp.model_flops_per_token;
  j["mfu"] = tp.mfu;
  j["bytes_sent_per_device"] = fig.bytes;
  j["predicted_bytes_per_device"] = fig.predicted_bytes;
  j["microbatches"] = p.o.microbatches;
  j["recompute"] = std::string(to_string(p.o.recompute));
  j["peak_bytes_per_device"] = run.peak_bytes;
  j["predicted_peak_bytes_per_device"] = fig.predicted_peak;
  j["pipeline_stages"] = p.stages();
  if (p.pipeline) j["stages"] = tools::stages_json(*p.pipeline, p.g, run.stages);
  j["dtype"] = std::string(to_string(p.o.type));
  if (!run.loss_scales.empty()) {
    j["loss_scale"] = run.loss_scales;
    j["skipped_steps"] = run.skipped_steps;
  }
  j["max_rel_err_vs_serial"] = check ? nlohmann::json(check->worst()) : nlohmann::json(nullptr);
  if (check)
    j["rel_err_vs_serial"] = {{"loss_all_steps", check->err_loss}, {"gradients_step1", check->err_grads},
                              {"gradients_step1_worst", check->worst_grad_name},
                              {"parameters_after_step1", check->err_params},
                              {"parameters_after_step1_worst", check->worst_param_name},
                              {"equal", check->within()},
                              {"verdict", check->verdict()},
                              {"tolerance", {{"loss", check->tolerance.loss}, {"gradients", check->tolerance.gradients},
                                             {"parameters", check->tolerance.parameters}}},
                              {"adam_round_off_elements_not_compared", check->not_compared}};
  j["ranks"] = ranks;
  j["optimizer"] = std::string(to_string(p.to.opt));
  j["hardware"] = s.hardware;
  j["plan"] = tools::plan_json(problem, plan, tools::peak_of(problem, plan, p.pipeline, p.base), plan_rows(problem, plan), s.model,
                               s.hardware);
  if (p.pipeline) tools::add_pipeline_json(j["plan"], p.pipeline, p.g);
  return j;
}

// The report as a few lines for a person.
inline void print_report(const settings& s, const prepared& p, const run_record& run, const serial_check* check,
                         int ranks) {
  const plan_problem& problem = *p.problem;
  const plan_result& plan = p.plan;
  const double med = tools::median(run.secs);
  const device_figures fig = figures_of(p, run);
  fmt::print("trained {} for {} steps on {} ranks (mesh {}, {} plan, {}, {} micro-batch{} per step, recompute {}, "
             "hardware {})\n",
             s.model, s.steps, ranks,
             to_string(p.o.mesh) == s.mesh ? s.mesh : s.mesh + " as " + to_string(p.o.mesh), to_string(plan.strategy), to_string(p.to.opt), p.o.microbatches,
             p.o.microbatches == 1 ? "" : "es", to_string(p.o.recompute), s.hardware);
  fmt::print("parallel  {}\n", tools::parallelism_line(parallelism_of(problem, plan.pick, p.stages()), p.o.mesh));
  if (!p.resume_folder.empty())
    fmt::print("resumed from {} at step {}\n", p.resume_folder.string(), p.first_step + 1);
  fmt::print("loss {:.5f} -> {:.5f}\n", run.losses.front(), run.losses.back());
  if (!run.checkpoints.empty())
    fmt::print("checkpoints: {} written{} (last {})\n", run.checkpoints.size(),
               s.keep_last > 0 && int(run.checkpoints.size()) > s.keep_last
                   ? fmt::format(", the newest {} kept (--keep-last)", s.keep_last)
                   : std::string(),
               run.checkpoints.back());
  fmt::print("step time: measured median {}  predicted {}  (measured/predicted {:.2f})\n", tools::seconds(med),
             tools::seconds(plan.time), med / plan.time);
  if (const std::string t = tools::throughput_line(problem, tools::throughput_of(problem, med, p.stages()), "measured"); !t.empty())
    fmt::print("{}\n", t);
  fmt::print("bytes sent per device per step: {:.0f} (predicted {:.0f}{}){}\n", fig.bytes, fig.predicted_bytes,
             fig.bytes == fig.predicted_bytes ? ", equal" : ", DIFFERENT", p.pipeline ? ", the most of any stage" : "");
  fmt::print("peak memory per device: measured {}  predicted {}  (measured/predicted {:.2f})\n",
             tools::si(double(run.peak_bytes), "B"), tools::si(fig.predicted_peak, "B"), double(run.peak_bytes) / fig.predicted_peak);
  if (p.pipeline) tools::print_stages(*p.pipeline, p.g, run.stages);
  if (!run.loss_scales.empty())
    fmt::print("fp16 loss scale: {:.0f} after the last step; {} of {} steps skipped (gradients overflowed)\n",
               run.loss_scales.back(), run.skipped_steps, run.loss_scales.size());
  if (check)
    fmt::print("largest relative difference from serial{} training: {:.2e} (loss over all steps {:.2e}, gradients "
               "of step 1 {:.2e} at {}, parameters after step 1 {:.2e} at {})\n",
               p.o.type == dtype::fp32 ? "" : " " + std::string(to_string(p.o.type)), check->worst(), check->err_loss, check->err_grads, check->worst_grad_name, check->err_params,
               check->worst_param_name);
  if (check) fmt::print("{}\n", check->verdict());
}

// Rank 0's report: one JSON object (--json), or a few lines for a person.
inline void report(const settings& s, const prepared& p, const run_record& run, const serial_check* check, int ranks) {
  if (s.json) {
    std::puts(report_json(s, p, run, check, ranks).dump(2).c_str());
    return;
  }
  print_report(s, p, run, check, ranks);
}

}  // namespace autoddl::tools::train
