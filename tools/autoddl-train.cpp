// autoddl-train: plans a model, then trains it for real on MPI ranks with that plan.
//   mpirun -np 4 build/tools/autoddl-train --model gpt:layers=2,hidden=64,heads=4,seq=32,batch=8,vocab=128
//          --mesh 2x2 [--strategy auto] [--steps 20] [--microbatches auto|N] [--recompute auto|none|selective|full]
//          [--regather auto|on|off] [--reshard auto|on|off] [--check-serial] [--json] [--device cpu|cuda]
//          [--checkpoint-dir D [--checkpoint-every K] [--keep-last K]] [--resume D] [--plan plan.json] [--data text.txt]
//          [--log-every N] [--init-from model.safetensors] [--export-weights out.safetensors] [--export-grads g.safetensors]
// --plan runs exactly a plan autoddl-plan --out wrote (its model, mesh, layouts, micro-batches
// and recomputation); --model and --mesh, when given too, must be the plan's.
// Checkpoints (runtime/checkpoint.hpp): every K steps and after the last, each rank writes its
// shards, rank 0 the manifest; --resume D continues from D's newest complete checkpoint up to
// --steps steps in all, on this run's plan and mesh (resharded when they differ).
// A pipeline (--strategy megatron:...,pp=P, or a plan file of several stages) runs each stage's
// layers on its own devices in the 1F1B order (runtime/trainer.hpp); --json adds the stages'
// predicted and measured time, bytes and memory. --strategy auto picks a pipeline where
// autoddl-plan does (the outermost mesh axis between nodes).
// Hugging Face weights (train_weights.hpp): --init-from starts from a safetensors file's tensors
// (every parameter present under its Hugging Face name, of its shape); --export-weights writes the
// weights after the last step (--steps 0: the initial ones), --export-grads the first step's
// gradients, rank 0 each, the whole tensors under Hugging Face names.
// --device cuda (a build with CUDA and NCCL): one GPU per rank, the rank's local index on its
// node choosing the GPU; tensors live on the GPU, collectives go through NCCL, and --check-serial
// still compares with a CPU serial run on rank 0 (in bf16 for --dtype bf16: train_cuda.hpp).
// Bad input: one sentence on stderr (rank 0) and exit code 2 on every rank. A rank that fails
// during training aborts the whole job with its message, so the job never hangs.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "autoddl/backend/cpu.hpp"
#include "autoddl/backend/cpu/blas_core.hpp"
#include "autoddl/backend/cpu/gemm_check.hpp"
#include "autoddl/backend/mpi.hpp"
#include "autoddl/cost/hardware_io.hpp"
#include "autoddl/models/model_file.hpp"
#include "autoddl/models/zoo.hpp"
#include "autoddl/runtime/checkpoint.hpp"
#include "autoddl/runtime/gather.hpp"
#include "autoddl/runtime/trainer.hpp"
#include "autoddl/search/plan_of.hpp"
#include "autoddl/search/micro_batches.hpp"
#include "autoddl/search/plan_file.hpp"
#include "autoddl/search/solve.hpp"
#include "autoddl/text_file.hpp"
#if defined(AUTODDL_WITH_CUDA)
#include "autoddl/backend/cuda/device.cuh"
#include "autoddl/backend/nccl/mesh_comm.cuh"
#include "train_cuda.hpp"
#endif
#include "pipeline_report.hpp"
#include "plan_report.hpp"
#include "support/cli.hpp"
#include "support/cli_parse.hpp"
#include "support/profile.hpp"
#include "support/stats.hpp"
#include "serial_check.hpp"
#include "train_checkpoints.hpp"
#include "train_pipeline.hpp"
#include "train_report.hpp"
#include "train_setup.hpp"
#include "train_weights.hpp"

using namespace autoddl;

namespace {

using namespace autoddl::tools::train;

// The checkpoint --resume names (a checkpoint folder, or a folder of them: its newest complete
// one), checked against this run: same model, dtype and optimizer; every shard file present
// and of the manifest's size.
// The checkpoint folder --resume names: the folder itself, or its newest complete checkpoint.
std::filesystem::path resume_folder_of(const std::string& resume) {
  const std::filesystem::path dir = resume;
  if (!std::filesystem::is_directory(dir)) throw error("--resume " + resume + ": no such folder");
  const std::filesystem::path f = std::filesystem::exists(dir / "manifest.json") ? dir : latest_checkpoint(dir);
  if (f.empty()) throw error("--resume " + resume + ": no complete checkpoint in it (no step-*/manifest.json)");
  return f;
}

// Whether two model specs name one model: the same text, or the same graph (a zoo spec with its
// keys in another order, a model file and the spec it was exported from).
bool same_model(const std::string& a, const std::string& b) {
  if (a == b) return true;
  try {
    return model_file_json(load_model(a)) == model_file_json(load_model(b));
  } catch (const error&) {  // one does not load here (a model file moved): not provably one
    return false;
  }
}

// The manifest's record of the layouts it was written with (plan.pick): one choice per node of
// the model's plan (every op and parameter), none negative; where this run's plan is the same
// strategy on the same stage mesh, each within the layouts this run's planner offers there.
// (The shards are read by each parameter's stored layout, so a resume may change the plan.)
void check_manifest_pick(const checkpoint_manifest& m, const prepared& p, const std::string& manifest) {
  const choice_problem& c = p.problem->untied();
  if (int(m.pick.size()) != c.nodes())
    throw error("checkpoint " + manifest + ": field 'plan.pick' holds " + std::to_string(m.pick.size()) +
                " layout choices; the model's plan has " + std::to_string(c.nodes()) + " (one per op and parameter)");
  const bool same_plan = m.stage_mesh == to_string(p.o.mesh) && m.strategy == to_string(p.plan.strategy);
  for (int n = 0; n < c.nodes(); ++n)
    if (at(m.pick, n) < 0 || (same_plan && at(m.pick, n) >= c.candidates(n)))
      throw error("checkpoint " + manifest + ": field 'plan.pick' gives node " + std::to_string(n) + " layout " +
                  std::to_string(at(m.pick, n)) + ", but it has layouts 0 to " + std::to_string(c.candidates(n) - 1) +
                  " on mesh " + to_string(p.o.mesh) + "; the manifest is damaged");
}

void check_resume(const settings& s, prepared& p) {
  p.resume_folder = resume_folder_of(s.resume);
  checkpoint_manifest m = read_manifest(p.resume_folder);
  const std::string manifest = (p.resume_folder / "manifest.json").string();
  if (!same_model(m.model, s.model))
    throw error("checkpoint " + manifest + " was written for model '" + m.model + "', not '" + s.model + "'");
  if (m.dtype != s.dtype)
    throw error("checkpoint " + manifest + " was written by a " + m.dtype + " run; resume with --dtype " + m.dtype);
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
  check_manifest_pick(m, p, manifest);
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
    p.problem = std::move(chosen.plan.problem);
    p.plan = std::move(chosen.plan.result);
    p.pipeline = std::move(chosen.pipeline);
    return;
  }
  tools::chosen_plan c = tools::plan_of_file(*s.plan, s.model, p.o);  // exactly the file's layouts and schedule
  p.peak_bytes = c.plan.peak_bytes;
  p.problem = std::move(c.plan.problem);
  p.plan = std::move(c.plan.result);
  p.pipeline = std::move(c.pipeline);
  // what trains is the file's own plan value, its boxing paths as written (a version 1 file has
  // none: it runs as priced above)
  if (!s.plan->boxing.is_null())
    p.runs = plan_value_of(*s.plan, shared_graph(load_model(s.model, s.plan->microbatches)));
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
  if (first_failing == ranks) {
    if (const auto advice = cpu_blas_core_advice(); advice && rank == 0)
      std::fprintf(stderr, "autoddl-train note: %s\n", advice->c_str());  // not an error line "autoddl-train: ..."
    return;
  }
  if (first_failing != 0) {  // its sentence to every rank, so that rank 0 prints it
    int length = int(sentence.size());
    MPI_Bcast(&length, 1, MPI_INT, first_failing, MPI_COMM_WORLD);
    sentence.resize(std::size_t(length));
    MPI_Bcast(sentence.data(), length, MPI_CHAR, first_failing, MPI_COMM_WORLD);
    sentence = "on rank " + std::to_string(first_failing) + ", " + sentence;
  }
  throw error(sentence);
}

// The --data file's bytes. @throws error naming the file where it is a folder or unreadable.
std::shared_ptr<text_corpus> read_corpus(const std::string& path) {
  const std::optional<std::string> bytes = read_text_file(path, "--data file");
  if (!bytes) throw error("cannot read the --data file '" + path + "'");
  auto text = std::make_shared<text_corpus>();
  text->bytes.assign(bytes->begin(), bytes->end());
  return text;
}

// --dtype: the plan priced in it; fp16 trains with a dynamic loss scale from 2^15 (the loss
// gradient, scale / micro-batches, is itself an fp16 value), doubled after 1000 clean steps.
void set_dtype(const settings& s, prepared& p) {
  p.o.type = parse_dtype(s.dtype);
  p.o.fp32_gradient_sums = tools::parse_fp32_gradient_sums(s.grad_sums, s.dtype);  // as the trainer keeps them
  if (!p.o.fp32_gradient_sums && p.o.type == dtype::fp16)
    throw error("autoddl-train keeps an fp16 run's gradient sums in fp32 only; use --grad-sums fp32 (bf16 sums: --dtype bf16)");
  if (p.o.type == dtype::fp64) throw error("autoddl-train trains fp32, bf16 or fp16, not fp64; use --dtype fp32");
  if (s.device != "cpu" && (p.o.type == dtype::fp16 || !p.o.fp32_gradient_sums))
    throw error("--device " + s.device + " trains fp32, or bf16 with fp32 gradient sums; --dtype fp16 and --grad-sums bf16 "
                "run on --device cpu");
  if (p.o.type == dtype::fp16) {
    p.to.loss_scale = 32768;
    p.to.loss_scale_window = 1000;
  }
}

// --device: cpu (its BLAS checked) or cuda (a build with CUDA, a GPU for every rank).
void check_device(const settings& s) {
  if (s.device != "cpu" && s.device != "cuda")
    throw error("unknown --device '" + s.device + "'; use cpu or cuda");
#if !defined(AUTODDL_WITH_CUDA)
  if (s.device == "cuda")
    throw error("this autoddl-train was built without CUDA and NCCL; rebuild with them (meson -Dcuda=enabled) or use --device cpu");
#else
  if (s.device == "cuda") check_gpus_on_every_rank();
#endif
  if (s.device == "cpu") check_blas_on_every_rank();
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
  set_dtype(s, p);
  if (!s.data.empty()) {  // a byte-level text for a GPT with vocab 256
    p.text = read_corpus(s.data);
    p.to.text = p.text.get();
  }
  check_device(s);
  if (!(s.lr > 0)) throw error("--lr must be positive, got " + std::to_string(s.lr));
  step_settings pin;
  if (s.microbatches != "auto") pin.microbatches = tools::parse_count("--microbatches", s.microbatches);
  if (s.recompute != "auto") pin.recompute = parse_recompute(s.recompute);
  pin.regather_inputs = tools::parse_auto_on_off("--regather", s.regather);
  pin.reshard_after_forward = tools::parse_auto_on_off("--reshard", s.reshard);
  const plan_strategy strategy = parse_strategy(s.plan ? s.plan->strategy : s.strategy);
  if (std::holds_alternative<strategy::exhaustive>(strategy)) throw error("--strategy exhaustive is for tiny planning problems; use autoddl-plan");
  auto interleaved = [](int chunks) {
    return error("the plan interleaves " + std::to_string(chunks) +
                 " model chunks per device (vpp); autoddl-train runs the 1F1B schedule with one chunk per device, drop vpp");
  };
  if (const auto* m = std::get_if<strategy::megatron>(&strategy); m && m->vpp > 1) throw interleaved(m->vpp);  // before planning
  choose_plan(s, strategy, pin, p);
  if (p.pipeline && p.pipeline->shape.chunks > 1) throw interleaved(p.pipeline->shape.chunks);
  if (p.pipeline && s.device != "cpu")
    throw error("pipelines run on MPI ranks with --device cpu; --device " + s.device + " runs plans of one stage");
  p.base = p.o;
  p.o = p.problem->options();  // the micro-batches, recomputation and (stage) mesh the plan runs with
  p.g = p.problem->model();    // one micro-batch
  if (!p.plan.feasible)  // refused before any tensor is allocated
    throw error("the " + to_string(strategy) + " plan peaks at " + tools::si(p.peak_bytes, "B") +
                " per device, over the memory limit of " +
                tools::si(p.plan.memory_limit.value_or(p.problem->make_objective().memory_limit), "B") + " of hardware '" +
                s.hardware + "'; use a larger mesh or a smaller model");
  if (p.text) check_text_model(p.g, *p.text);
  if (s.checkpoint_every < 0) throw error("--checkpoint-every must be positive, got " + std::to_string(s.checkpoint_every));
  if (s.checkpoint_every > 0 && s.checkpoint_dir.empty()) throw error("--checkpoint-every needs --checkpoint-dir");
  if (s.keep_last < 0) throw error("--keep-last must be positive, got " + std::to_string(s.keep_last));
  if (s.keep_last > 0 && s.checkpoint_dir.empty()) throw error("--keep-last needs --checkpoint-dir");
  if (s.log_every < 0) throw error("--log-every must be 0 (no progress lines) or positive, got " + std::to_string(s.log_every));
  if (!s.resume.empty()) check_resume(s, p);
  check_hf_options(s, p);
  return p;
}

// --resume: what the command line leaves out is the checkpoint's: its model, mesh and optimizer,
// and on its mesh its strategy, micro-batches and recomputation (the plan it was written on: on
// the same mesh the planner finds it again). On another mesh the plan is chosen anew.
void take_from_checkpoint(settings& s, const CLI::App& app) {
  const checkpoint_manifest m = read_manifest(resume_folder_of(s.resume));
  if (s.model.empty()) s.model = m.model;
  if (!app.count("--mesh")) s.mesh = m.mesh;
  if (!app.count("--strategy") && s.mesh == m.mesh) s.strategy = m.strategy;
  const bool same_plan = s.mesh == m.mesh && s.strategy == m.strategy && !app.count("--seq") && !app.count("--batch");
  if (same_plan && !app.count("--microbatches")) s.microbatches = std::to_string(m.microbatches);
  if (same_plan && !app.count("--recompute")) s.recompute = m.recompute;
  if (s.optimizer_s.empty()) s.optimizer_s = m.optimizer;
}

// A resume onto another micro-batch count of a model with dropout: one line (dropout draws its
// masks per micro-batch, so the steps from here draw other masks than the uninterrupted run).
std::string resume_warning(const prepared& p) {
  if (p.resume_folder.empty() || p.resume_manifest.microbatches == p.o.microbatches) return "";
  bool dropout = false;
  for (const op_node& n : p.g.ops) dropout = dropout || (n.kind == op_kind::dropout && n.attrs.dropout > 0);
  if (!dropout) return "";
  return "autoddl-train: resuming with " + std::to_string(p.o.microbatches) + " micro-batches where " +
         p.resume_folder.string() + " ran " + std::to_string(p.resume_manifest.microbatches) +
         ": the model's dropout masks are drawn per micro-batch, so the steps from here differ from an uninterrupted "
         "run's (--microbatches " + std::to_string(p.resume_manifest.microbatches) + " keeps them)";
}

// --plan: reads the plan file into s (its model, mesh and hardware), refusing one that does not
// match what the command line also says.
void read_plan_option(settings& s, const CLI::App& app) {
  if (s.plan_path.empty()) {
    if (!s.resume.empty()) take_from_checkpoint(s, app);
    if (s.model.empty()) s.model = tools::default_model;
    s.model = resize_model_spec(s.model, s.seq, s.batch);
    return;
  }
  plan_file f = read_plan_file(s.plan_path);
  const std::string where = "plan file " + s.plan_path;
  const std::string spec = plan_model_spec(f);  // beside the plan file; refused where it changed since
  if (!s.model.empty() && !same_model(s.model, spec))
    throw error(where + " is for model '" + f.model + "', not '" + s.model + "'");
  if (app.count("--mesh") && parse_mesh(s.mesh) != f.pipeline_mesh)
    throw error(where + " is for mesh " + to_string(f.pipeline_mesh) + ", not " + s.mesh);
  for (const char* knob : {"--strategy", "--microbatches", "--recompute", "--seq", "--batch"})
    if (app.count(knob)) throw error(std::string(knob) + " and --plan both choose the plan; drop " + knob);
  if (app.count("--dtype") && s.dtype != f.dtype)
    throw error(where + " was priced in " + f.dtype + "; drop --dtype " + s.dtype + " (the plan's is used) or plan again with --dtype " + s.dtype);
  s.dtype = f.dtype;
  if (f.grad_sums == "fp16")
    throw error(where + " was priced with fp16 gradient sums, which autoddl-train does not keep; plan again with --grad-sums fp32");
  if (!f.grad_sums.empty() && app.count("--grad-sums") && s.grad_sums != f.grad_sums)
    throw error(where + " was priced with " + f.grad_sums + " gradient sums; drop --grad-sums " + s.grad_sums);
  if (!f.grad_sums.empty()) s.grad_sums = f.grad_sums;
  if (!s.optimizer_s.empty() && parse_optimizer(f.optimizer) != parse_optimizer(s.optimizer_s))
    throw error(where + " was priced for optimizer " + f.optimizer + "; drop --optimizer " + s.optimizer_s +
                " (the plan's is used) or plan again with --optimizer " + s.optimizer_s);
  s.optimizer_s = f.optimizer;
  s.model = spec;
  s.mesh = to_string(f.pipeline_mesh);
  if (!app.count("--hardware")) s.hardware = f.hardware;
  s.plan = std::move(f);
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
  template <class U>  // float, or a 16-bit type's values widened (exactly)
  std::vector<float> operator()(int q, const std::vector<U>& shard, const nd_sbp& layout) {
    const tensor_shape& shape = at(p.g.params, q).shape;
    const std::vector<float> values(shard.begin(), shard.end());
    if (!pc) return gather_to_root(host, values, shape, layout);
    return tools::gather_stage_to_zero(*pc, at(owner, q), values, shape, layout);
  }
};

// Trains on `dev` with `comm` (its MPI mesh `host` gathers for --check-serial; a pipeline's
// stages are `pc`'s); from here on ranks communicate, so a failure aborts the job (main).
template <class T, class Sum, Device D, MeshCommunicator M>
int train(const settings& s, const prepared& p, int rank, int ranks, D& dev, M& comm, mpi::mpi_mesh_comm& host,
          mpi::pipeline_comms* pc) {
  using trainer_t = trainer<T, D, M, Sum>;
  trainer_t t(p.runs ? *p.runs : plan_of(*p.problem, p.plan.pick, p.pipeline ? p.pipeline->cut_ops : std::vector<int>{0}), dev,
              comm, p.to, stage_of<typename trainer_t::pipe_comm>(p, pc));
  if (!p.resume_folder.empty() &&
      !on_every_rank(rank, [&] { restore(t, p, p.g, p.o.mesh, comm.coords()); }))
    return 2;  // a shard missing, damaged or short: one sentence, nothing overwritten
  if (!p.initial_weights.empty()) load_initial_weights(t, p, p.initial_weights, comm.coords());
  std::unique_ptr<serial_run_check<T, Sum>> check = s.check_serial ? std::make_unique<serial_run_check<T, Sum>>(p, rank) : nullptr;
  whole_tensor gather{p, host, pc, p.pipeline ? tools::param_owner_stages(p.g, p.pipeline->cut_ops) : std::vector<int>{}};
  const step_size z = step_size_of(p.g, p.o.microbatches);
  double since_log_s = 0;  // step time since the last progress line
  int since_log = 0;
  run_record run;
  for (int k = int(p.first_step); k < s.steps; ++k) {
    host.world().barrier();
    const auto t0 = std::chrono::steady_clock::now();
    if (k == 1 && rank == s.inject_failure) throw error("injected failure (--inject-failure " + std::to_string(rank) + ")");
    run.losses.push_back(t.train_step(k));
    if (k == p.first_step && !s.export_grads.empty())
      export_hf(s.export_grads, p, t, gather, /*grads=*/true, safetensors_dtype::f32, rank);
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
    if (p.to.loss_scale > 0) run.loss_scales.push_back(t.loss_scale()), run.skipped_steps += t.last_step_skipped();
    if (check) check->after_step(k, run.losses.back(), t, gather);
    const bool due = s.checkpoint_every > 0 && (k + 1) % s.checkpoint_every == 0;
    if (!s.checkpoint_dir.empty() && (due || k + 1 == s.steps)) {
      run.checkpoints.push_back(save_checkpoint(s, p, t, k + 1, comm.coords(), rank, ranks));
      if (rank == 0 && s.keep_last > 0) remove_older_checkpoints(s.checkpoint_dir, s.keep_last);
    }
  }
  if (p.pipeline && !run.losses.empty())
    run.stages = tools::gather_stage_measures({double(run.bytes), tools::median(run.busy_s), double(run.peak_bytes)},
                                              p.stages(), ranks / p.stages());
  MPI_Allreduce(MPI_IN_PLACE, &run.peak_bytes, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  if (!s.export_weights.empty()) {
    const std::size_t n = export_hf(s.export_weights, p, t, gather, /*grads=*/false, export_dtype(p.o.type), rank);
    if (rank == 0 && run.losses.empty()) std::printf("wrote %zu tensors to %s\n", n, s.export_weights.c_str());
  }
  if (rank == 0 && !run.losses.empty()) report(s, p, run, check.get(), ranks);
  return check && rank == 0 && !check->within() ? 1 : 0;  // --check-serial: a difference past the tolerance fails
}

// The CPU device in T (--dtype), its gradient sums in Sum (--grad-sums): its MPI mesh, or a
// pipeline's stages on MPI ranks.
template <class T, class Sum = autoddl::detail::master_t<T>>
int train_on_cpu(const settings& s, const prepared& p, int rank, int ranks) {
  cpu_device dev;
  if (p.pipeline) {
    mpi::pipeline_comms pc(p.o.mesh, p.stages());
    return train<T, Sum>(s, p, rank, ranks, dev, pc.mesh(), pc.mesh(), &pc);
  }
  mpi::mpi_mesh_comm comm(p.o.mesh);
  return train<T, Sum>(s, p, rank, ranks, dev, comm, comm, nullptr);
}

// The device --device names, and its communicator; a pipeline's stages on MPI ranks.
int train_on_device(const settings& s, const prepared& p, int rank, int ranks) {
#if defined(AUTODDL_WITH_CUDA)
  if (s.device == "cuda") {
    const int ordinal = nccl::local_device_ordinal();
    cuda::cuda_device dev(ordinal);
    nccl::nccl_mesh_comm comm(p.o.mesh, ordinal, dev.stream());
    if (p.o.type == dtype::bf16) return train<__nv_bfloat16, float>(s, p, rank, ranks, dev, comm, comm.mpi(), nullptr);
    return train<float, float>(s, p, rank, ranks, dev, comm, comm.mpi(), nullptr);
  }
#endif
  if (p.o.type == dtype::bf16 && !p.o.fp32_gradient_sums) return train_on_cpu<bf16, bf16>(s, p, rank, ranks);
  return p.o.type == dtype::bf16   ? train_on_cpu<bf16>(s, p, rank, ranks)
         : p.o.type == dtype::fp16 ? train_on_cpu<fp16>(s, p, rank, ranks)
                                   : train_on_cpu<float>(s, p, rank, ranks);
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
  app.add_option("--regather", s.regather, tools::regather_help);
  app.add_option("--reshard", s.reshard, tools::reshard_help);
  app.add_option("--seed", s.seed, "seed of the data, the initial parameters and the search");
  app.add_option("--device", s.device, "cpu (default) or cuda (one GPU per rank; a build with CUDA and NCCL)");
  app.add_option("--dtype", s.dtype,
                 "fp32 (default; a --plan file's dtype), bf16 or fp16: parameters and activations in it, fp32 master "
                 "weights, gradient sums and optimizer state; fp16 with a dynamic loss scale");
  app.add_option("--grad-sums", s.grad_sums, std::string(tools::grad_sums_help) + "; default fp32, bf16 trains with --dtype bf16");
  app.add_flag("--check-serial", s.check_serial, "also train serially on rank 0 (in the same dtype), report the largest "
               "difference and a verdict against the dtype's round-off tolerances (exit 1 where they are exceeded)");
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
  app.add_option("--init-from", s.init_from,
                 "start from the weights of this safetensors file, every parameter under its Hugging Face name "
                 "(the LLaMA family: model.layers.N.self_attn.q_proj.weight, ...), instead of the seed's");
  app.add_option("--export-weights", s.export_weights,
                 "after the last step, rank 0 writes the weights to this safetensors file under Hugging Face names "
                 "(in --dtype bf16 or fp16, else fp32); with --steps 0 the initial weights");
  app.add_option("--export-grads", s.export_grads,
                 "rank 0 writes the first step's synchronised gradients (of the loss autoddl prints) to this "
                 "safetensors file under Hugging Face names, in fp32");
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
    if (rank == 0) std::fprintf(stderr, "autoddl-train: %s\n", autoddl::tools::command_line_error(app, e).c_str());
    MPI_Finalize();
    return 2;
  }
  std::optional<prepared> p;
  try {
    s.lr_given = app.count("--lr") > 0;
    if (app.count("--checkpoint-every") && s.checkpoint_every < 1)  // (left out, 0 means after the last step only)
      throw error("--checkpoint-every takes a positive number of steps, got " + std::to_string(s.checkpoint_every));
    read_plan_option(s, app);
    p.emplace(prepare(s, ranks));
    if (rank == 0) tools::warn_if_other_cpu("autoddl-train", s.hardware, p->o.hw);
    if (const std::string w = resume_warning(*p); rank == 0 && !w.empty()) std::fprintf(stderr, "%s\n", w.c_str());
    if (const std::string w = weights_warning(s); rank == 0 && !w.empty()) std::fprintf(stderr, "autoddl-train note: %s\n", w.c_str());
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
