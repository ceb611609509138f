// autoddl-train: plans a model, then trains it for real on MPI ranks with that plan.
//   mpirun -np 4 build/tools/autoddl-train --model gpt:layers=2,hidden=64,heads=4,seq=32,batch=8,vocab=128
//          --mesh 2x2 [--strategy auto] [--steps 20] [--microbatches auto|N] [--recompute auto|none|selective|full]
//          [--check-serial] [--json] [--device cpu|cuda]
//          [--checkpoint-dir D [--checkpoint-every K] [--keep-last K]] [--resume D] [--plan plan.json] [--data text.txt]
//          [--log-every N]
// --plan runs exactly a plan autoddl-plan --out wrote (its model, mesh, layouts, micro-batches
// and recomputation); --model and --mesh, when given too, must be the plan's.
// Checkpoints (runtime/checkpoint.hpp): every K steps and after the last, each rank writes its
// shards, rank 0 the manifest; --resume D continues from D's newest complete checkpoint up to
// --steps steps in all, on this run's plan and mesh (resharded when they differ).
// A pipeline (--strategy megatron:...,pp=P, or a plan file of several stages) runs each stage's
// layers on its own devices in the 1F1B order (runtime/trainer.hpp); --json adds the stages'
// predicted and measured time, bytes and memory. --strategy auto picks a pipeline where
// autoddl-plan does (the outermost mesh axis between nodes).
// --device cuda (a build with CUDA and NCCL): one GPU per rank, the rank's local index on its
// node choosing the GPU; tensors live on the GPU, collectives go through NCCL, and --check-serial
// still compares with a CPU serial run on rank 0.
// Bad input: one sentence on stderr (rank 0) and exit code 2 on every rank. A rank that fails
// during training aborts the whole job with its message, so the job never hangs.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <memory>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "autoddl/backend/cpu.hpp"
#include "autoddl/backend/cpu/gemm_check.hpp"
#include "autoddl/backend/mpi.hpp"
#include "autoddl/cost/hardware_io.hpp"
#include "autoddl/models/model_file.hpp"
#include "autoddl/models/zoo.hpp"
#include "autoddl/runtime/checkpoint.hpp"
#include "autoddl/runtime/gather.hpp"
#include "autoddl/runtime/trainer.hpp"
#include "autoddl/search/micro_batches.hpp"
#include "autoddl/search/plan_file.hpp"
#include "autoddl/search/solve.hpp"
#if defined(AUTODDL_WITH_CUDA)
#include "autoddl/backend/cuda/device.cuh"
#include "autoddl/backend/nccl/mesh_comm.cuh"
#endif
#include "pipeline_report.hpp"
#include "plan_report.hpp"
#include "support/cli.hpp"
#include "support/profile.hpp"
#include "support/stats.hpp"
#include "train_pipeline.hpp"

using namespace autoddl;

namespace {

using cpu_trainer = trainer<float, cpu_device, mpi::mpi_mesh_comm>;


struct settings {
  std::string model, mesh = tools::default_mesh, strategy = "auto", hardware = tools::default_hardware, optimizer_s;  ///< empty: the --plan file's, else adam
  std::string recompute = "auto", microbatches = "auto", device = "cpu";
  int steps = 20;
  double lr = 1e-3;
  bool lr_given = false;  ///< --lr on the command line (else --data trains with 3e-3)
  std::uint64_t seed = 1;
  bool check_serial = false, json = false, no_check_finite = false;
  int inject_failure = -1;  ///< testing the abort path: this rank throws during step 2
  std::string checkpoint_dir, resume, plan_path, data;
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
step_size step_size_of(const graph& g, int microbatches) {
  step_size z;
  if (g.inputs.empty() || g.ops.empty()) return z;
  z.samples = double(g.inputs[0][0]) * microbatches;
  const bool tokens = g.ops.front().kind == op_kind::embedding && g.inputs[0].rank() == 2;
  z.tokens = tokens ? z.samples * double(g.inputs[0][1]) : 0;
  return z;
}

/// One progress line on stderr (rank 0, every --log-every steps and after the last), flushed so
/// that a run killed early has said how far it got:
///   "autoddl-train: step 20/2000  loss 4.1234  12.3 ms/step  650 samples/s  20.8 k tokens/s"
/// `secs`: the mean step time since the last line.
void progress(int step, int steps, double loss, double secs, const step_size& z) {
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
  std::unique_ptr<plan_problem> pp;
  plan_result plan;
  std::optional<pipeline_plan> pipeline;  ///< its stages (the layouts are in pp and plan)
  double peak_bytes = 0;                  ///< the plan's replayed step peak per device (a pipeline's highest stage)
  int stages() const { return pipeline ? pipeline->shape.stages : 1; }
  std::int64_t first_step = 0;
  std::filesystem::path resume_folder;   ///< the checkpoint resumed from (empty: none)
  checkpoint_manifest resume_manifest;
};

// The checkpoint --resume names (a checkpoint folder, or a folder of them: its newest complete
// one), checked against this run: same model, dtype and optimizer; every shard file present
// and of the manifest's size.
void check_resume(const settings& s, prepared& p) {
  const std::filesystem::path dir = s.resume;
  if (!std::filesystem::is_directory(dir)) throw error("--resume " + s.resume + ": no such folder");
  p.resume_folder = std::filesystem::exists(dir / "manifest.json") ? dir : latest_checkpoint(dir);
  if (p.resume_folder.empty())
    throw error("--resume " + s.resume + ": no complete checkpoint in it (no step-*/manifest.json)");
  checkpoint_manifest m = read_manifest(p.resume_folder);
  const std::string manifest = (p.resume_folder / "manifest.json").string();
  if (m.model != s.model)
    throw error("checkpoint " + manifest + " was written for model '" + m.model + "', not '" + s.model + "'");
  if (m.dtype != "fp32") throw error("checkpoint " + manifest + " holds " + m.dtype + " values; autoddl-train trains fp32");
  if (parse_optimizer(m.optimizer) != p.to.opt)
    throw error("checkpoint " + manifest + " was written with optimizer " + m.optimizer + "; resume with --optimizer " +
                m.optimizer);
  if (m.param_names.size() != p.g.params.size())
    throw error("checkpoint " + manifest + " holds " + std::to_string(m.param_names.size()) + " parameters; the model has " +
                std::to_string(p.g.params.size()));
  for (std::size_t q = 0; q < p.g.params.size(); ++q)
    if (m.param_names[q] != p.g.params[q].name ||
        m.shapes[q] != std::vector<std::int64_t>(p.g.params[q].shape.begin(), p.g.params[q].shape.end()))
      throw error("checkpoint " + manifest + ": parameter " + std::to_string(q) + " is '" + m.param_names[q] +
                  "' there but '" + p.g.params[q].name + "' " + to_string(p.g.params[q].shape) + " in this model");
  for (const checkpoint_rank_file& rf : m.ranks) {
    const std::filesystem::path f = p.resume_folder / rf.file;
    std::error_code ec;
    if (!std::filesystem::exists(f, ec)) throw error("checkpoint shard file " + f.string() + " is missing");
    if (const auto size = std::int64_t(std::filesystem::file_size(f, ec)); ec || size != rf.bytes)
      throw error("checkpoint shard file " + f.string() + " is truncated or damaged (" + std::to_string(size) +
                  " bytes; the manifest says " + std::to_string(rf.bytes) + ")");
  }
  if (m.steps_done >= s.steps)
    throw error("checkpoint " + manifest + " has " + std::to_string(m.steps_done) + " steps done already; --steps (" +
                std::to_string(s.steps) + ") counts all steps, give more");
  p.first_step = m.steps_done;
  p.resume_manifest = std::move(m);
}

// The plan: exactly the --plan file's (a pipeline priced at its own cuts), else the strategy's as
// autoddl-plan chooses it (tools::plan_with_pipelines).
void choose_plan(const settings& s, const plan_strategy& strategy, const step_settings& pin, prepared& p) {
  if (!s.plan) {
    tools::chosen_plan chosen = tools::plan_with_pipelines([&](int m) { return load_model(s.model, m); },
                                                    graph_batch(load_model(s.model)), p.o, strategy, pin, s.seed,
                                                    /*interleaved=*/false);  // one model chunk per device
    p.peak_bytes = chosen.plan.peak_bytes;
    p.pp = std::move(chosen.plan.problem);
    p.plan = std::move(chosen.plan.result);
    p.pipeline = std::move(chosen.pipeline);
    return;
  }
  plan_options o = p.o;  // exactly the file's layouts and schedule
  o.mesh = s.plan->mesh;
  o.microbatches = s.plan->microbatches;
  o.recompute = s.plan->recompute;
  o.zero1_layouts = uses_zero1_layouts(strategy);
  o.zero2_layouts = uses_zero2_layouts(strategy);
  check_microbatches(o.microbatches, graph_batch(load_model(s.model)));
  micro_batched_plan layouts{std::make_unique<plan_problem>(load_model(s.model, o.microbatches), o), {}, o.microbatches,
                             o.recompute};
  layouts.result = result_of(*layouts.problem, pick_of(*layouts.problem, *s.plan), strategy);
  price_peak(layouts);  // feasible where the replayed step fits
  if (s.plan->stages > 1) {
    tools::chosen_plan c = tools::file_pipeline(std::move(layouts), *s.plan, p.o);
    layouts = std::move(c.plan);
    p.pipeline = std::move(c.pipeline);
  }
  p.peak_bytes = layouts.peak_bytes;
  p.pp = std::move(layouts.problem);
  p.plan = std::move(layouts.result);
}

// The CPU device's GEMMs checked on every rank before training (backend/cpu/gemm_check.hpp):
// a BLAS that computes a wrong value on this CPU is refused with the sentence of the lowest
// failing rank, on every rank alike, instead of training a wrong model.
void check_blas_on_every_rank() {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  std::string sentence;
  try {
    check_cpu_gemm<float>();
  } catch (const error& e) {
    sentence = e.what();
  }
  int first_failing = sentence.empty() ? ranks : rank;
  MPI_Allreduce(MPI_IN_PLACE, &first_failing, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first_failing == ranks) return;
  if (first_failing != 0) {  // its sentence to every rank, so that rank 0 prints it
    int length = int(sentence.size());
    MPI_Bcast(&length, 1, MPI_INT, first_failing, MPI_COMM_WORLD);
    sentence.resize(std::size_t(length));
    MPI_Bcast(sentence.data(), length, MPI_CHAR, first_failing, MPI_COMM_WORLD);
    sentence = "on rank " + std::to_string(first_failing) + ", " + sentence;
  }
  throw error(sentence);
}

prepared prepare(const settings& s, int ranks) {
  prepared p;
  p.o.mesh = p.mesh = parse_mesh(s.mesh);
  if (p.o.mesh.devices() != ranks)
    throw error("mesh " + s.mesh + " has " + std::to_string(p.o.mesh.devices()) + " devices but the job has " +
                std::to_string(ranks) + " ranks; run mpirun -np " + std::to_string(p.o.mesh.devices()) +
                " or choose a mesh of " + std::to_string(ranks) + " devices");
  p.o.hw = load_hardware(s.hardware);
  p.to.opt = parse_optimizer(s.optimizer_s.empty() ? "adam" : s.optimizer_s);
  p.o.opt = p.to.opt;  // the plan is priced with the optimizer state this run keeps
  p.to.lr = s.lr_given || s.data.empty() ? s.lr : 3e-3;  // --data: a small GPT learns visibly in a few hundred steps
  p.to.seed = s.seed;
  p.to.check_finite = !s.no_check_finite;
  if (!s.data.empty()) {  // a byte-level text for a GPT with vocab 256
    std::ifstream in(s.data, std::ios::binary);
    if (!in) throw error("cannot read the --data file '" + s.data + "'");
    p.text = std::make_shared<text_corpus>();
    p.text->bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    p.to.text = p.text.get();
  }
  if (s.device != "cpu" && s.device != "cuda")
    throw error("unknown --device '" + s.device + "'; use cpu or cuda");
#if !defined(AUTODDL_WITH_CUDA)
  if (s.device == "cuda")
    throw error("this autoddl-train was built without CUDA and NCCL; rebuild with them (meson -Dcuda=enabled) or use --device cpu");
#endif
  if (s.device == "cpu") check_blas_on_every_rank();
  if (s.steps < 1) throw error("--steps must be at least 1, got " + std::to_string(s.steps));
  if (!(s.lr > 0)) throw error("--lr must be positive, got " + std::to_string(s.lr));
  step_settings pin;
  if (s.microbatches != "auto") pin.microbatches = tools::parse_count("--microbatches", s.microbatches);
  if (s.recompute != "auto") pin.recompute = parse_recompute(s.recompute);
  const plan_strategy strategy = parse_strategy(s.plan ? s.plan->strategy : s.strategy);
  if (std::holds_alternative<strategy::exhaustive>(strategy)) throw error("--strategy exhaustive is for tiny planning problems; use autoddl-plan");
  choose_plan(s, strategy, pin, p);
  if (p.pipeline && p.pipeline->shape.chunks > 1)
    throw error("the plan interleaves " + std::to_string(p.pipeline->shape.chunks) +
                " model chunks per device (vpp); autoddl-train runs the 1F1B schedule with one chunk per device, drop vpp");
  if (p.pipeline && s.device != "cpu")
    throw error("pipelines run on MPI ranks with --device cpu; --device " + s.device + " runs plans of one stage");
  p.base = p.o;
  p.o = p.pp->options();  // the micro-batches, recomputation and (stage) mesh the plan runs with
  p.g = p.pp->model();    // one micro-batch
  if (!p.plan.feasible)  // refused before any tensor is allocated
    throw error("the " + to_string(strategy) + " plan peaks at " + tools::si(p.peak_bytes, "B") +
                " per device, over the memory limit of " +
                tools::si(p.plan.memory_limit.value_or(p.pp->make_objective().memory_limit), "B") + " of hardware '" +
                s.hardware + "'; use a larger mesh or a smaller model");
  if (p.text) check_text_model(p.g, *p.text);
  if (s.checkpoint_every < 0) throw error("--checkpoint-every must be positive, got " + std::to_string(s.checkpoint_every));
  if (s.checkpoint_every > 0 && s.checkpoint_dir.empty()) throw error("--checkpoint-every needs --checkpoint-dir");
  if (s.keep_last < 0) throw error("--keep-last must be positive, got " + std::to_string(s.keep_last));
  if (s.keep_last > 0 && s.checkpoint_dir.empty()) throw error("--keep-last needs --checkpoint-dir");
  if (s.log_every < 0) throw error("--log-every must be 0 (no progress lines) or positive, got " + std::to_string(s.log_every));
  if (!s.resume.empty()) check_resume(s, p);
  return p;
}

// --plan: reads the plan file into s (its model, mesh and hardware), refusing one that does not
// match what the command line also says.
void read_plan_option(settings& s, const CLI::App& app) {
  if (s.plan_path.empty()) {
    if (s.model.empty()) s.model = tools::default_model;
    s.model = resize_model_spec(s.model, s.seq, s.batch);
    return;
  }
  plan_file f = read_plan_file(s.plan_path);
  const std::string where = "plan file " + s.plan_path;
  if (!s.model.empty() && s.model != f.model)
    throw error(where + " is for model '" + f.model + "', not '" + s.model + "'");
  if (app.count("--mesh") && parse_mesh(s.mesh) != f.pipeline_mesh)
    throw error(where + " is for mesh " + to_string(f.pipeline_mesh) + ", not " + s.mesh);
  for (const char* knob : {"--strategy", "--microbatches", "--recompute", "--seq", "--batch"})
    if (app.count(knob)) throw error(std::string(knob) + " and --plan both choose the plan; drop " + knob);
  if (f.dtype != "fp32") throw error(where + " was made for " + f.dtype + "; autoddl-train trains fp32 (plan with --dtype fp32)");
  if (!s.optimizer_s.empty() && parse_optimizer(f.optimizer) != parse_optimizer(s.optimizer_s))
    throw error(where + " was priced for optimizer " + f.optimizer + "; drop --optimizer " + s.optimizer_s +
                " (the plan's is used) or plan again with --optimizer " + s.optimizer_s);
  s.optimizer_s = f.optimizer;
  s.model = f.model;
  s.mesh = to_string(f.pipeline_mesh);
  if (!app.count("--hardware")) s.hardware = f.hardware;
  s.plan = std::move(f);
}

/// Parameter q's value and optimizer state for the block `want`, from a checkpoint.
struct restored {
  std::vector<float> param, m, v;
};
/// `want`: the parameter's block in storage; `state`: the optimizer state's (update layout).
restored read_state(checkpoint_reader<float>& r, int q, const shard_info& want, const shard_info& state, optimizer opt) {
  restored x{r.read(q, "param", want), r.read(q, "m", state), {}};
  if (opt == optimizer::adam) x.v = r.read(q, "v", state);
  return x;
}

/// Loads a checkpoint into trainer t (whose storage layouts may differ from the checkpoint's).
template <class Trainer>
void restore(Trainer& t, const prepared& p, const graph& g, const mesh_shape& mesh, const mesh_coord& coords) {
  checkpoint_reader<float> r(p.resume_folder, p.resume_manifest);
  for (std::size_t q = 0; q < g.params.size(); ++q) {
    if (!t.holds_param(int(q))) continue;  // another pipeline stage's
    const restored x = read_state(r, int(q), make_shard(g.params[q].shape, t.storage(int(q)), mesh, coords),
                                  make_shard(g.params[q].shape, t.update_layout(int(q)), mesh, coords), p.to.opt);
    t.restore_shard(int(q), x.param, x.m, x.v);
  }
  t.restore_steps_done(p.resume_manifest.steps_done);
}

/// Runs f on every rank; if it throws on any, every rank learns it, the lowest failing rank prints
/// its message, and all return false (so they exit together with code 2).
template <class F>
bool on_every_rank(int rank, F&& f) {
  std::string failure;
  try {
    f();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  int mine = failure.empty() ? ranks : rank, first = ranks;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == rank) std::fprintf(stderr, "autoddl-train: %s\n", failure.c_str());
  return first == ranks;
}

// --check-serial: rank 0 trains the same model serially, step for step, with the same
// micro-batches and no recomputation (recomputing changes no number); the loss is compared every
// step, gradients and parameters after the first step, before differences compound.
class serial_check {
 public:
  serial_check(const prepared& p, int rank) : g_(p.g), rank_(rank) {
    if (rank != 0) return;
    plan_options so = p.o;
    so.mesh = mesh_shape{1};
    so.recompute = recompute_mode::none;
    problem_ = std::make_unique<plan_problem>(p.g, so);
    self_ = std::make_unique<mpi::mpi_mesh_comm>(mesh_shape{1}, MPI_COMM_SELF);
    serial_ = std::make_unique<cpu_trainer>(*problem_, solve_plan(*problem_, strategy::dp{}).pick, dev_, *self_, p.to);
    if (!p.resume_folder.empty()) restore(*serial_, p, g_, mesh_shape{1}, mesh_coord{});
  }

  /// After step k of the distributed trainer t; gather(q, shard, layout) assembles parameter q's
  /// whole tensor on rank 0 from every device's shard (called alike on every rank).
  template <class Trainer, class Gather>
  void after_step(int k, double loss, const Trainer& t, Gather&& gather) {
    if (rank_ == 0) {
      const double sl = serial_->train_step(k);
      err_loss = std::max(err_loss, std::abs(loss - sl) / std::max(1e-12, std::abs(sl)));
    }
    if (!compared_) compare_tensors(t, gather);
    compared_ = true;
  }

  double worst() const { return std::max({err_loss, err_grads, err_params}); }

  double err_loss = 0, err_grads = 0, err_params = 0;
  std::string worst_grad_name, worst_param_name;

 private:
  // Every parameter and gradient gathered to rank 0 and compared with the serial run's.
  template <class Trainer, class Gather>
  void compare_tensors(const Trainer& t, Gather& gather) {
    std::vector<std::vector<float>> sp, sg;
    if (rank_ == 0)
      for (std::size_t q = 0; q < g_.params.size(); ++q) {
        sp.push_back(serial_->param_shard(int(q)));
        sg.push_back(serial_->grad_shard(int(q)));
      }
    const double gfloor = rank_ == 0 ? 1e-3 * max_abs(sg) : 0, pfloor = rank_ == 0 ? 1e-3 * max_abs(sp) : 0;
    for (std::size_t q = 0; q < g_.params.size(); ++q) {
      auto gp = gather(int(q), t.param_shard(int(q)), t.storage(int(q)));
      auto gg = gather(int(q), t.grad_shard(int(q)), t.update_layout(int(q)));
      if (rank_ != 0) continue;
      const double ep = max_rel_error(gp, sp[q], pfloor), eg = max_rel_error(gg, sg[q], gfloor);
      if (ep >= err_params) { err_params = ep; worst_param_name = g_.params[q].name; }
      if (eg >= err_grads) { err_grads = eg; worst_grad_name = g_.params[q].name; }
    }
  }

  const graph& g_;
  int rank_;
  bool compared_ = false;
  std::unique_ptr<plan_problem> problem_;
  cpu_device dev_;
  std::unique_ptr<mpi::mpi_mesh_comm> self_;
  std::unique_ptr<cpu_trainer> serial_;
};

struct run_record {
  std::vector<double> losses, secs;
  std::vector<std::string> checkpoints;  ///< folders written
  std::int64_t bytes = 0;       ///< the most any step sent from this device
  std::int64_t peak_bytes = 0;  ///< the highest step peak memory of any device (trainer::last_step_peak_bytes)
  std::vector<double> busy_s;   ///< per step: this device's time not waiting for other pipeline stages
  std::vector<tools::stage_measure> stages;  ///< a pipeline's stages, measured (rank 0)
};

// Rank 0's report: one JSON object, or a few lines for a person.
// What a step is predicted to send and hold per device, and what was measured: the whole plan's,
// or with a pipeline the most of any stage.
struct device_figures {
  double bytes = 0, predicted_bytes = 0, predicted_peak = 0;
};
device_figures figures_of(const prepared& p, const run_record& run) {
  device_figures f{double(run.bytes), p.plan.totals.bytes, p.peak_bytes};
  if (!p.pipeline) return f;
  f.bytes = f.predicted_bytes = 0;
  for (int i = 0; i < p.stages(); ++i) {
    f.bytes = std::max(f.bytes, at(run.stages, i).bytes);
    f.predicted_bytes = std::max(f.predicted_bytes, at(p.pipeline->stages, i).bytes);
  }
  return f;
}

void report(const settings& s, const prepared& p, const run_record& run, const serial_check* check, int ranks) {
  const plan_problem& pp = *p.pp;
  const plan_result& plan = p.plan;
  const double med = tools::median(run.secs);
  const device_figures fig = figures_of(p, run);
  if (s.json) {
    nlohmann::json j;
    j["first_step"] = p.first_step;
    j["losses"] = run.losses;
    j["checkpoints"] = run.checkpoints;
    j["resumed_from"] = p.resume_folder.empty() ? nlohmann::json(nullptr) : nlohmann::json(p.resume_folder.string());
    j["step_s"] = run.secs;
    j["step_s_median"] = med;
    j["predicted_step_s"] = plan.time;
    j["bytes_sent_per_device"] = fig.bytes;
    j["predicted_bytes_per_device"] = fig.predicted_bytes;
    j["microbatches"] = p.o.microbatches;
    j["recompute"] = std::string(to_string(p.o.recompute));
    j["peak_bytes_per_device"] = run.peak_bytes;
    j["predicted_peak_bytes_per_device"] = fig.predicted_peak;
    j["pipeline_stages"] = p.stages();
    if (p.pipeline) j["stages"] = tools::stages_json(*p.pipeline, p.g, run.stages);
    j["max_rel_err_vs_serial"] = check ? nlohmann::json(check->worst()) : nlohmann::json(nullptr);
    if (check)
      j["rel_err_vs_serial"] = {{"loss_all_steps", check->err_loss}, {"gradients_step1", check->err_grads},
                                {"gradients_step1_worst", check->worst_grad_name},
                                {"parameters_after_step1", check->err_params},
                                {"parameters_after_step1_worst", check->worst_param_name}};
    j["ranks"] = ranks;
    j["optimizer"] = std::string(to_string(p.to.opt));
    j["hardware"] = s.hardware;
    j["plan"] = tools::plan_json(pp, plan, tools::peak_of(pp, plan, p.pipeline, p.base), plan_rows(pp, plan), s.model,
                                 s.hardware);
    if (p.pipeline) tools::add_pipeline_json(j["plan"], p.pipeline, p.g);
    std::puts(j.dump(2).c_str());
    return;
  }
  fmt::print("trained {} for {} steps on {} ranks (mesh {}, {} plan, {}, {} micro-batch{} per step, recompute {}, "
             "hardware {})\n",
             s.model, s.steps, ranks,
             to_string(p.o.mesh) == s.mesh ? s.mesh : s.mesh + " as " + to_string(p.o.mesh), to_string(plan.strategy), to_string(p.to.opt), p.o.microbatches,
             p.o.microbatches == 1 ? "" : "es", to_string(p.o.recompute), s.hardware);
  fmt::print("parallel  {}\n", tools::parallelism_line(parallelism_of(pp, plan.pick, p.stages()), p.o.mesh));
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
  fmt::print("bytes sent per device per step: {:.0f} (predicted {:.0f}{}){}\n", fig.bytes, fig.predicted_bytes,
             fig.bytes == fig.predicted_bytes ? ", equal" : ", DIFFERENT", p.pipeline ? ", the most of any stage" : "");
  fmt::print("peak memory per device: measured {}  predicted {}  (measured/predicted {:.2f})\n",
             tools::si(double(run.peak_bytes), "B"), tools::si(fig.predicted_peak, "B"), double(run.peak_bytes) / fig.predicted_peak);
  if (p.pipeline) tools::print_stages(*p.pipeline, p.g, run.stages);
  if (check)
    fmt::print("largest relative difference from serial training: {:.2e} (loss over all steps {:.2e}, gradients "
               "of step 1 {:.2e} at {}, parameters after step 1 {:.2e} at {})\n",
               check->worst(), check->err_loss, check->err_grads, check->worst_grad_name, check->err_params,
               check->worst_param_name);
}

// Writes the checkpoint after `steps_done` steps: every rank its shards, rank 0 (after all are
// in place) the manifest. Returns the folder.
// A pipeline's stages save the parameters they own (the first stage using each: one copy of a tied one).
template <class Trainer>
std::string save_checkpoint(const settings& s, const prepared& p, const Trainer& t, std::int64_t steps_done,
                            const mesh_coord& coords, int rank, int ranks) {
  const std::filesystem::path folder = checkpoint_folder(s.checkpoint_dir, steps_done);
  std::vector<shard_to_write<float>> shards;
  const std::vector<int> owner = p.pipeline ? tools::param_owner_stages(p.g, p.pipeline->cut_ops)
                                            : std::vector<int>(p.g.params.size(), 0);
  for (std::size_t q = 0; q < p.g.params.size(); ++q) {
    if (owner[q] != t.stage()) continue;
    const shard_info block = make_shard(p.g.params[q].shape, t.storage(int(q)), p.o.mesh, coords);
    shards.push_back({int(q), "param", block, t.param_shard(int(q))});
    const shard_info state = make_shard(p.g.params[q].shape, t.update_layout(int(q)), p.o.mesh, coords);
    shards.push_back({int(q), "m", state, t.moment_shard(int(q), 0)});
    if (p.to.opt == optimizer::adam) shards.push_back({int(q), "v", state, t.moment_shard(int(q), 1)});
  }
  const std::string mine = to_json(write_rank_shards(folder, rank, shards)).dump();
  // rank 0 gathers every rank's record, then writes the manifest last
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
  if (rank == 0) {
    checkpoint_manifest m;
    m.model = s.model;
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
    for (int r = 0; r < ranks; ++r) {
      const nlohmann::json j = nlohmann::json::parse(all.substr(std::size_t(displs[std::size_t(r)]), std::size_t(lens[std::size_t(r)])));
      checkpoint_rank_file rf{j.at("rank").get<int>(), j.at("file").get<std::string>(), j.at("bytes").get<std::int64_t>(), {}};
      for (const auto& sj : j.at("shards"))
        rf.shards.push_back({sj.at("param").get<int>(), sj.at("tensor").get<std::string>(),
                             sj.at("offset").get<std::vector<std::int64_t>>(), sj.at("shape").get<std::vector<std::int64_t>>(),
                             sj.at("byte_offset").get<std::int64_t>(), sj.at("bytes").get<std::int64_t>(),
                             std::stoull(sj.at("fnv1a64").get<std::string>())});
      m.ranks.push_back(std::move(rf));
    }
    write_manifest(folder, m);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return folder.string();
}

// --keep-last K: the complete checkpoints under `dir` beyond the newest K are removed (rank 0,
// after the newest is complete: save_checkpoint ends with a barrier). Other folders stay.
void remove_older_checkpoints(const std::filesystem::path& dir, int keep) {
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

// This device's stage for the trainer (nullopt without a pipeline).
template <class Pipe>
std::optional<pipeline_stage<Pipe>> stage_of(const prepared& p, mpi::pipeline_comms* pc) {
  if constexpr (std::is_same_v<Pipe, mpi::ring_comm>)
    if (pc) return pipeline_stage<Pipe>{pc->stage(), p.pipeline->cut_ops, &pc->pipe()};
  return std::nullopt;
}

// Parameter q's whole tensor on rank 0 (--check-serial): over the mesh, or a pipeline's owning stage.
struct whole_tensor {
  const prepared& p;
  mpi::mpi_mesh_comm& host;
  mpi::pipeline_comms* pc;
  std::vector<int> owner;  ///< per parameter: the stage gathered (a pipeline's)
  std::vector<float> operator()(int q, const std::vector<float>& shard, const nd_sbp& layout) {
    const tensor_shape& shape = at(p.g.params, q).shape;
    if (!pc) return gather_to_root(host, shard, shape, layout);
    return tools::gather_stage_to_zero(*pc, at(owner, q), shard, shape, layout);
  }
};

// Trains on `dev` with `comm` (its MPI mesh `host` gathers for --check-serial; a pipeline's
// stages are `pc`'s); from here on ranks communicate, so a failure aborts the job (main).
template <Device D, MeshCommunicator M>
int train(const settings& s, const prepared& p, int rank, int ranks, D& dev, M& comm, mpi::mpi_mesh_comm& host,
          mpi::pipeline_comms* pc) {
  using trainer_t = trainer<float, D, M>;
  trainer_t t(*p.pp, p.plan.pick, dev, comm, p.to, stage_of<typename trainer_t::pipe_comm>(p, pc));
  if (!p.resume_folder.empty() &&
      !on_every_rank(rank, [&] { restore(t, p, p.g, p.o.mesh, comm.coords()); }))
    return 2;  // a shard missing, damaged or short: one sentence, nothing overwritten
  std::unique_ptr<serial_check> check = s.check_serial ? std::make_unique<serial_check>(p, rank) : nullptr;
  whole_tensor gather{p, host, pc, p.pipeline ? tools::param_owner_stages(p.g, p.pipeline->cut_ops) : std::vector<int>{}};
  const step_size z = step_size_of(p.g, p.o.microbatches);
  double since_log_s = 0;  // step time since the last progress line
  int since_log = 0;
  run_record run;
  for (int k = int(p.first_step); k < s.steps; ++k) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    if (k == 1 && rank == s.inject_failure) throw error("injected failure (--inject-failure " + std::to_string(rank) + ")");
    run.losses.push_back(t.train_step(k));
    run.secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    run.busy_s.push_back(t.last_step_profile().total_s - t.last_step_profile().pipe_wait_s);
    run.bytes = std::max(run.bytes, t.last_step_bytes());
    since_log_s += run.secs.back();
    ++since_log;
    if (rank == 0 && s.log_every > 0 && ((k + 1) % s.log_every == 0 || k + 1 == s.steps)) {
      progress(k, s.steps, run.losses.back(), since_log_s / since_log, z);
      since_log_s = 0;
      since_log = 0;
    }
    run.peak_bytes = std::max(run.peak_bytes, t.last_step_peak_bytes());
    if (check) check->after_step(k, run.losses.back(), t, gather);
    const bool due = s.checkpoint_every > 0 && (k + 1) % s.checkpoint_every == 0;
    if (!s.checkpoint_dir.empty() && (due || k + 1 == s.steps)) {
      run.checkpoints.push_back(save_checkpoint(s, p, t, k + 1, comm.coords(), rank, ranks));
      if (rank == 0 && s.keep_last > 0) remove_older_checkpoints(s.checkpoint_dir, s.keep_last);
    }
  }
  if (p.pipeline)
    run.stages = tools::gather_stage_measures({double(run.bytes), tools::median(run.busy_s), double(run.peak_bytes)},
                                              p.stages(), ranks / p.stages());
  MPI_Allreduce(MPI_IN_PLACE, &run.peak_bytes, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) report(s, p, run, check.get(), ranks);
  return 0;
}

// The device --device names, and its communicator; a pipeline's stages on MPI ranks.
int train_on_device(const settings& s, const prepared& p, int rank, int ranks) {
#if defined(AUTODDL_WITH_CUDA)
  if (s.device == "cuda") {
    const int ordinal = nccl::local_device_ordinal();
    cuda::cuda_device dev(ordinal);
    nccl::nccl_mesh_comm comm(p.o.mesh, ordinal, dev.stream());
    return train(s, p, rank, ranks, dev, comm, comm.mpi(), nullptr);
  }
#endif
  cpu_device dev;
  if (p.pipeline) {
    mpi::pipeline_comms pc(p.o.mesh, p.stages());
    return train(s, p, rank, ranks, dev, pc.mesh(), pc.mesh(), &pc);
  }
  mpi::mpi_mesh_comm comm(p.o.mesh);
  return train(s, p, rank, ranks, dev, comm, comm, nullptr);
}

// The command line's options, read into s.
void add_options(CLI::App& app, settings& s) {
  app.add_option("--model", s.model,
                 std::string("NAME:key=value,... (gpt, bert, llama, vgg11, vgg13, vgg16, vgg19, mlp), a model file m.json "
                             "or hf:config.json; default ") +
                     tools::default_model + "; optional with --plan");
  app.add_option("--seq", s.seq, "sequence length of the model (a zoo transformer or an hf config)");
  app.add_option("--batch", s.batch, "global batch of the model (sequences, images or rows per step)");
  app.add_option("--mesh", s.mesh, "device mesh, one device per MPI rank, e.g. 4 or 2x2");
  app.add_option("--strategy", s.strategy,
                 std::string(autoddl::tools::strategies_help) + " or exact (megatron with pp > 1 runs a pipeline, 1F1B)");
  app.add_option("--hardware", s.hardware,
                 std::string("the profile the plan is priced with, a preset name or a hardware JSON file (default ") +
                     tools::default_hardware + ", as autoddl-plan's)");
  app.add_option("--steps", s.steps, "training steps");
  app.add_option("--lr", s.lr, "learning rate (default 1e-3; 3e-3 with --data)");
  app.add_option("--optimizer", s.optimizer_s,
                 std::string(tools::optimizers_help) + " (default: a --plan file's, else adam)");
  app.add_option("--microbatches", s.microbatches,
                 "micro-batches per step (gradient accumulation): auto (the planner's choice) or a divisor of the batch");
  app.add_option("--recompute", s.recompute, tools::recompute_help);
  app.add_option("--seed", s.seed, "seed of the data, the initial parameters and the search");
  app.add_option("--device", s.device, "cpu (default) or cuda (one GPU per rank; a build with CUDA and NCCL)");
  app.add_flag("--check-serial", s.check_serial, "also train serially on rank 0 and report the largest difference");
  app.add_flag("--json", s.json, "print one JSON object on rank 0");
  app.add_flag("--no-check-finite", s.no_check_finite,
               "do not stop when the loss or a gradient turns NaN or Inf (by default training stops, naming the parameter)");
  app.add_option("--data", s.data,
                 "train a byte-level language model on this text file (a GPT with vocab=256): windows of seq+1 bytes");
  app.add_option("--plan", s.plan_path, "run exactly this plan file (autoddl-plan --out): its model, mesh, layouts and schedule");
  app.add_option("--checkpoint-dir", s.checkpoint_dir,
                 "write checkpoints under this folder (step-<k>/: a shard file per rank and a manifest)");
  app.add_option("--checkpoint-every", s.checkpoint_every,
                 "write a checkpoint every K steps (and after the last); default: after the last only");
  app.add_option("--keep-last", s.keep_last,
                 "keep only the newest K complete checkpoints under --checkpoint-dir (default: all)");
  app.add_option("--log-every", s.log_every,
                 "a progress line on stderr every N steps and after the last: loss, step time, samples and tokens "
                 "per second (default 10; 0: none)");
  app.add_option("--resume", s.resume,
                 "continue from a checkpoint folder, or the newest complete one under a folder; --steps counts all steps");
  app.add_option("--inject-failure", s.inject_failure, "make this rank fail during step 2 (tests the abort path)")
      ->group("");  // hidden
}

}  // namespace

int main(int argc, char** argv) {
  const auto [rank, ranks] = autoddl::mpi::init(&argc, &argv);
  settings s;
  CLI::App app{"autoddl-train: plan a model and train it on MPI ranks with that plan"};
  add_options(app, s);
  int code = 0;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    if (rank == 0) std::fputs(app.help().c_str(), stdout);
    MPI_Finalize();
    return 0;
  } catch (const CLI::ParseError& e) {
    if (rank == 0) std::fprintf(stderr, "autoddl-train: %s\n", e.what());
    MPI_Finalize();
    return 2;
  }
  std::optional<prepared> p;
  try {
    s.lr_given = app.count("--lr") > 0;
    read_plan_option(s, app);
    p.emplace(prepare(s, ranks));
    if (rank == 0) tools::warn_if_other_cpu("autoddl-train", s.hardware, p->o.hw);
  } catch (const std::exception& e) {
    if (rank == 0) std::fprintf(stderr, "autoddl-train: %s\n", e.what());
    MPI_Finalize();
    return 2;
  }
  try {
    code = train_on_device(s, *p, rank, ranks);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autoddl-train: rank %d failed, aborting the job: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Finalize();
  return code;
}
