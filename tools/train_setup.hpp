#pragma once
// autoddl-train's run: what the command line says (settings), what is prepared from it before
// any communication (prepared: the plan, the model, the options), the progress line, and what a
// run records (run_record).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autoddl/models/hf_weights.hpp"
#include "autoddl/runtime/checkpoint.hpp"
#include "autoddl/runtime/data.hpp"
#include "autoddl/runtime/train_options.hpp"
#include "autoddl/search/pipeline.hpp"
#include "autoddl/search/plan_file.hpp"
#include "autoddl/search/solve.hpp"
#include "pipeline_report.hpp"
#include "support/cli.hpp"
#include "train_pipeline.hpp"

namespace autoddl::tools::train {

struct settings {
  std::string model, mesh = tools::default_mesh, strategy = "auto", hardware = tools::default_hardware, optimizer_s;  ///< empty: the --plan file's, else adam
  std::string recompute = "auto", microbatches = "auto", regather = "auto", reshard = "auto", device = "cpu";
  std::string dtype = "fp32";  ///< --dtype: fp32, bf16 or fp16
  std::string grad_sums = "fp32";  ///< --grad-sums: fp32, or bf16 with --dtype bf16
  int steps = 20;
  double lr = 1e-3;
  bool lr_given = false;  ///< --lr on the command line (else --data trains with 3e-3)
  std::uint64_t seed = 1;
  bool check_serial = false, json = false, no_check_finite = false;
  int inject_failure = -1;  ///< testing the abort path: this rank throws during step 2
  std::string checkpoint_dir, resume, plan_path, data;
  std::string init_from, export_weights, export_grads;  ///< safetensors files of Hugging Face names (train_weights.hpp)
  std::optional<plan_file> plan;  ///< --plan, read (main, before prepare)
  int checkpoint_every = 0;  ///< 0: only after the last step (when checkpoint_dir is set)
  int keep_last = 0;         ///< checkpoints kept under checkpoint_dir, the newest (0: all)
  int log_every = 10;        ///< a progress line on stderr every this many steps (and after the last)
  std::optional<std::int64_t> seq, batch;  ///< --seq, --batch
};

/// What a progress line counts per step: the samples (sequences, images, rows) of the global
/// batch and, for a model of token sequences, their tokens (0 otherwise).
struct step_size {
  double samples = 0, tokens = 0;
};
inline step_size step_size_of(const graph& g, int microbatches) {
  step_size z;
  if (g.inputs.empty() || g.ops.empty()) return z;
  z.samples = double(g.inputs[0][0]) * microbatches;
  const bool tokens = g.ops.front().kind == op_kind::embedding && g.inputs[0].rank() == 2;
  z.tokens = tokens ? z.samples * double(g.inputs[0][1]) : 0;
  return z;
}

/// One progress line on stderr (rank 0, every --log-every steps and after the last), flushed so
/// that a run killed early has said how far it got:
///   "autoddl-train: step 20/2000  loss 4.1234  12.3 ms/step  650 samples/s  20.8 K tokens/s"
/// `secs`: the mean step time since the last line.
inline void progress(int step, int steps, double loss, double secs, const step_size& z) {
  auto per_s = [secs](double n, const char* what) {  // "617 samples/s", "19.7 K tokens/s"
    std::string v = tools::si(n / secs, "");
    while (!v.empty() && v.back() == ' ') v.pop_back();
    return v + " " + what + "/s";
  };
  std::string rate = per_s(z.samples, "samples");
  if (z.tokens > 0) rate += "  " + per_s(z.tokens, "tokens");
  std::fprintf(stderr, "autoddl-train: step %d/%d  loss %.4f  %s/step  %s\n", step + 1, steps, loss,
               tools::seconds(secs).c_str(), rate.c_str());
  std::fflush(stderr);
}

// Everything that can be wrong with the input, checked on every rank before any communication,
// so every rank leaves with the same exit code.
struct prepared {
  std::shared_ptr<text_corpus> text;  ///< --data (train_options::text points at it)
  plan_options o;                         ///< the plan's options; o.mesh is one stage's with a pipeline
  plan_options base;                      ///< the options as given (every device, the memory limit's default)
  mesh_shape mesh;                        ///< every device (--mesh)
  train_options to;
  graph g;
  std::shared_ptr<plan_problem> problem;
  plan_result plan;
  std::optional<pipeline_plan> pipeline;  ///< its stages (the layouts are in problem and plan)
  /// What the trainer runs: --plan's file as read (plan_value_of: its own boxing paths, nothing
  /// priced), else the chosen plan (plan_of). The reports price it again (problem, plan).
  std::optional<autoddl::plan> runs;
  double peak_bytes = 0;                  ///< the plan's replayed step peak per device (a pipeline's highest stage)
  int stages() const { return pipeline ? pipeline->shape.stages : 1; }
  std::int64_t first_step = 0;
  std::filesystem::path resume_folder;   ///< the checkpoint resumed from (empty: none)
  checkpoint_manifest resume_manifest;
  std::vector<std::vector<float>> initial_weights;  ///< --init-from: every parameter's global value (empty: none)
  hf_experts_naming hf_naming = hf_experts_naming::mixtral;  ///< a mixture's Hugging Face names (an hf config's model_type)
};

struct run_record {
  std::vector<double> losses, secs;
  std::vector<std::string> checkpoints;  ///< folders written
  std::int64_t bytes = 0;       ///< the most any step sent from this device
  std::int64_t peak_bytes = 0;  ///< the highest step peak memory of any device (trainer::last_step_peak_bytes)
  std::vector<double> busy_s;   ///< per step: this device's time not waiting for other pipeline stages
  std::vector<tools::stage_measure> stages;  ///< a pipeline's stages, measured (rank 0)
  std::vector<double> loss_scales;  ///< fp16: the dynamic loss scale after each step
  int skipped_steps = 0;            ///< fp16: steps whose update an overflow skipped
};

}  // namespace autoddl::tools::train
