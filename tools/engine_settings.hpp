#pragma once
// A plan as the training engines people run launch it (autoddl-plan --emit):
//   megatron    the command-line flags of Megatron-LM's pretrain_gpt.py (flag names as
//               Megatron-LM core_v0.16.1's megatron/training/arguments.py declares them: most are
//               generated from the fields of megatron-core's TransformerConfig and Megatron-LM's
//               TrainingConfig, `num_layers` -> --num-layers, a bool field that defaults to true
//               as --disable-..., `add_bias_linear` -> --disable-bias-linear)
//   megatron    with fsdp=1, Megatron-FSDP (`--use-megatron-fsdp --data-parallel-sharding-strategy
//               optim_grads_params` and the other flags Megatron-LM core_v0.16.1's Megatron-FSDP guide requires)
//   torchtitan  torchtitan 0.3.0's command line (`--module llama3 --config llama3_70b`, or qwen3's, and
//               `--section.key value` overrides of its Trainer.Config: torchtitan/config/configs.py's
//               ParallelismConfig and TrainingConfig, then the activation_checkpoint subcommand;
//               0.3.0 reads no job TOML file)
// Only a plan the engine can express has settings: a megatron layout (--strategy megatron:...,
// auto where it took one, --engine megatron) for Megatron-LM; for torchtitan a layout of its
// parallelisms (--engine torchtitan, --strategy zero, or a megatron layout with sp=1 and
// fsdp=1). autoddl's own per-weight layouts are none of them.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "autoddl/error.hpp"
#include "autoddl/models/hf_config.hpp"
#include "autoddl/models/llama.hpp"
#include "autoddl/models/zoo.hpp"
#include "autoddl/search/strategy.hpp"

namespace autoddl::tools {

/// Which engine's layouts auto searches (--engine) and whose settings are written (--emit).
enum class engine { autoddl, megatron, torchtitan };

inline engine parse_engine(const std::string& s, const char* option) {
  if (s == "autoddl") return engine::autoddl;
  if (s == "megatron") return engine::megatron;
  if (s == "torchtitan") return engine::torchtitan;
  throw error(std::string(option) + " takes autoddl, megatron or torchtitan, got '" + s + "'");
}
inline std::string engine_name(engine e) {
  return e == engine::megatron ? "megatron" : e == engine::torchtitan ? "torchtitan" : "autoddl";
}

/// A LLaMA-family model's configuration from its spec (llama:... or hf:...); nullopt for any other model.
inline std::optional<llama_config> llama_config_of(const std::string& spec) {
  if (is_hf_spec(spec)) return load_hf_config(parse_hf_spec(spec));
  const autoddl::detail::model_spec s = autoddl::detail::parse_spec(spec);
  if (s.model != "llama") return std::nullopt;
  return autoddl::detail::read_llama(s);
}

/// A megatron layout with every knob resolved for one step: what the engines' flags say.
struct engine_layout {
  strategy::megatron knobs;     ///< tp, pp, cp, ep, etp, vpp, sp, dopt, fsdp as planned
  int tp = 1, pp = 1, cp = 1, dp = 1, ep = 1, etp = 1, vpp = 1;
  std::int64_t global_batch = 0;
  int microbatches = 1;         ///< per step (gradient accumulation x pipeline micro-batches)
  std::int64_t micro_batch = 0; ///< sequences per data-parallel rank per micro-batch
  recompute_mode recompute = recompute_mode::none;
  int first_stage_layers = 0, last_stage_layers = 0;  ///< an uneven pipeline's first and last stage (0: even)
  std::vector<int> stage_layers;  ///< layers per pipeline stage as planned (empty: none or even)
};

/// torchtitan's split of `layers` over `stages` with the first and last stage `in` and `out`
/// layers lighter (torchtitan 0.3.0, torchtitan/distributed/pipeline_parallel.py: (layers + in +
/// out) / stages each, the remainder one more to each of the first stages, less in and out at the ends).
inline std::vector<int> torchtitan_split(int layers, int stages, int in, int out) {
  const int effective = layers + in + out, per = effective / stages, extra = effective % stages;
  std::vector<int> r;
  for (int k = 0; k < stages; ++k) r.push_back(per + (k < extra ? 1 : 0) - (k == 0 ? in : 0) - (k == stages - 1 ? out : 0));
  return r;
}

/// The first and last stages' lighter counts (pipeline_parallel_first/last_stage_less_layers)
/// that make torchtitan split `layers` as `split`, or nullopt where none does.
inline std::optional<std::pair<int, int>> torchtitan_less_layers(const std::vector<int>& split, int layers) {
  for (int in = 0; in <= layers; ++in)
    for (int out = 0; out <= layers; ++out)
      if (torchtitan_split(layers, int(split.size()), in, out) == split) return std::pair{in, out};
  return std::nullopt;
}

/// The layout of knobs m on `mesh` for a step of `batch` in `microbatches` micro-batches.
/// Throws error where the batch does not split into whole per-rank micro-batches.
inline engine_layout resolve_layout(const strategy::megatron& m, const mesh_shape& mesh, std::int64_t batch, int microbatches,
                                    recompute_mode recompute) {
  engine_layout l;
  l.knobs = m;
  l.tp = tensor_parallel_size(m, mesh);
  l.pp = std::max(1, m.pp);
  l.cp = std::max(1, m.cp);
  l.vpp = std::max(1, m.vpp);
  l.dp = int(mesh.devices() / (std::int64_t(l.tp) * l.pp * l.cp));
  l.ep = std::max(1, m.ep);
  l.etp = m.etp > 0 ? m.etp : (folded_experts(m, mesh) ? 1 : l.tp);
  l.global_batch = batch;
  l.microbatches = microbatches;
  l.recompute = recompute;
  if (batch % (std::int64_t(microbatches) * l.dp) != 0)
    throw error("the batch of " + std::to_string(batch) + " does not split into " + std::to_string(microbatches) +
                " micro-batches over " + std::to_string(l.dp) + " data-parallel ranks");
  l.micro_batch = batch / (std::int64_t(microbatches) * l.dp);
  return l;
}

/// One flag and its value ("" for a switch).
using engine_flag = std::pair<std::string, std::string>;

namespace detail {

// A number as a flag's value: whole numbers without an exponent (--rotary-base takes an int).
inline std::string fmt_number(double x) {
  if (x == double(std::int64_t(x)) && x < 1e15) return std::to_string(std::int64_t(x));
  return fmt::format("{:g}", x);
}

inline std::vector<engine_flag> megatron_model_flags(const llama_config& c) {
  std::vector<engine_flag> f{{"--num-layers", std::to_string(c.layers)},
                             {"--hidden-size", std::to_string(c.hidden)},
                             {"--ffn-hidden-size", std::to_string(c.ffn)},
                             {"--num-attention-heads", std::to_string(c.heads)}};
  if (c.kv_heads != c.heads) f.insert(f.end(), {{"--group-query-attention", ""}, {"--num-query-groups", std::to_string(c.kv_heads)}});
  if (c.head_dim > 0 && c.head_dim * c.heads != c.hidden) f.push_back({"--kv-channels", std::to_string(c.head_dim)});
  f.insert(f.end(), {{"--swiglu", ""}, {"--normalization", "RMSNorm"}, {"--layernorm-epsilon", fmt_number(c.eps)},
                     {"--position-embedding-type", "rope"}, {"--rotary-base", fmt_number(c.rope_theta)},
                     {"--disable-bias-linear", ""}});
  if (c.qkv_bias) f.push_back({"--add-qkv-bias", ""});
  if (c.qk_norm) f.push_back({"--qk-layernorm", ""});
  if (!c.tied) f.push_back({"--untie-embeddings-and-output-weights", ""});
  f.insert(f.end(), {{"--seq-length", std::to_string(c.seq)}, {"--max-position-embeddings", std::to_string(c.seq)},
                     {"--vocab-size", std::to_string(c.vocab)}, {"--make-vocab-size-divisible-by", "1"}});
  if (c.experts > 0) {
    f.insert(f.end(), {{"--num-experts", std::to_string(c.experts)},
                       {"--moe-router-topk", std::to_string(c.topk)},
                       {"--moe-ffn-hidden-size", std::to_string(c.expert_ffn())},
                       {"--moe-aux-loss-coeff", fmt_number(c.aux_coef)}});
    if (c.shared_expert_ffn() > 0) f.push_back({"--moe-shared-expert-intermediate-size", std::to_string(c.shared_expert_ffn())});
    if (c.capacity > 0)
      f.insert(f.end(), {{"--moe-expert-capacity-factor", fmt_number(c.capacity)}, {"--moe-pad-expert-input-to-capacity", ""}});
  }
  return f;
}

}  // namespace detail

/// Megatron-LM's flags for layout l of model c in type `dtype` ("bf16", "fp16", "fp32").
inline std::vector<engine_flag> megatron_flags(const engine_layout& l, const llama_config& c, const std::string& dtype) {
  std::vector<engine_flag> f{{"--tensor-model-parallel-size", std::to_string(l.tp)},
                             {"--pipeline-model-parallel-size", std::to_string(l.pp)},
                             {"--context-parallel-size", std::to_string(l.cp)}};
  if (c.experts > 0)
    f.insert(f.end(), {{"--expert-model-parallel-size", std::to_string(l.ep)}, {"--expert-tensor-parallel-size", std::to_string(l.etp)}});
  if (l.knobs.sp && l.tp > 1) f.push_back({"--sequence-parallel", ""});
  if (l.knobs.dopt) f.push_back({"--use-distributed-optimizer", ""});
  if (l.knobs.fsdp) {  // Megatron-FSDP sharding parameters, gradients and optimizer states: the flags its guide requires
    f.insert(f.end(), {{"--use-megatron-fsdp", ""}, {"--data-parallel-sharding-strategy", "optim_grads_params"},
                       {"--use-distributed-optimizer", ""}, {"--no-gradient-accumulation-fusion", ""},
                       {"--ckpt-format", "fsdp_dtensor"}});
  }
  if (l.vpp > 1) f.push_back({"--num-layers-per-virtual-pipeline-stage", std::to_string(c.layers / (l.pp * l.vpp))});
  if (l.first_stage_layers > 0)
    f.insert(f.end(), {{"--decoder-first-pipeline-num-layers", std::to_string(l.first_stage_layers)},
                       {"--decoder-last-pipeline-num-layers", std::to_string(l.last_stage_layers)}});
  f.insert(f.end(), {{"--micro-batch-size", std::to_string(l.micro_batch)}, {"--global-batch-size", std::to_string(l.global_batch)}});
  if (l.recompute == recompute_mode::selective) f.push_back({"--recompute-granularity", "selective"});
  if (l.recompute == recompute_mode::full)
    f.insert(f.end(), {{"--recompute-granularity", "full"}, {"--recompute-method", "uniform"}, {"--recompute-num-layers", "1"}});
  if (dtype == "bf16" || dtype == "fp16") f.push_back({"--" + dtype, ""});
  const std::vector<engine_flag> model = detail::megatron_model_flags(c);
  f.insert(f.end(), model.begin(), model.end());
  return f;
}

/// A model torchtitan 0.3.0 launches by name: its --module, the --config function of that module's
/// config_registry.py, and the shape of the flavor that function builds (torchtitan/models/llama3/
/// and qwen3/__init__.py: llama3's MLP widths are its multiple_of / ffn_dim_multiplier rounding of
/// 8/3 x hidden, as published; Qwen3's heads are 128 wide, its small flavors tie the embeddings).
struct torchtitan_flavor {
  const char* module;
  const char* config;
  std::int64_t layers, hidden, heads, kv_heads, head_dim, ffn, vocab;
  bool tied, qk_norm;
  double rope_theta;
};

/// The dense flavors that have a --config (llama3's 1B and 3B and qwen3's 4B and 8B have none;
/// its mixtures of experts are not planned for torchtitan here).
inline constexpr torchtitan_flavor torchtitan_flavors[] = {
    {"llama3", "llama3_8b", 32, 4096, 32, 8, 128, 14336, 128256, false, false, 500000},
    {"llama3", "llama3_70b", 80, 8192, 64, 8, 128, 28672, 128256, false, false, 500000},
    {"llama3", "llama3_405b", 126, 16384, 128, 8, 128, 53248, 128256, false, false, 500000},
    {"qwen3", "qwen3_0_6b", 28, 1024, 16, 8, 128, 3072, 151936, true, true, 1000000},
    {"qwen3", "qwen3_1_7b", 28, 2048, 16, 8, 128, 6144, 151936, true, true, 1000000},
    {"qwen3", "qwen3_14b", 40, 5120, 40, 8, 128, 17408, 151936, false, true, 1000000},
    {"qwen3", "qwen3_32b", 64, 5120, 64, 8, 128, 25600, 151936, false, true, 1000000},
};

/// The torchtitan flavor whose shape model c has (its layers, widths, heads, vocabulary, tied
/// embeddings, q/k norms and RoPE base). Throws error, one sentence, for any other model: torchtitan
/// 0.3.0 builds a model only from a flavor of its own, so no setting launches another shape.
inline const torchtitan_flavor& torchtitan_config_of(const llama_config& c) {
  for (const torchtitan_flavor& f : torchtitan_flavors)
    if (c.layers == f.layers && c.hidden == f.hidden && c.heads == f.heads && c.kv_heads == f.kv_heads &&
        c.dims_per_head() == f.head_dim && c.ffn == f.ffn && c.vocab == f.vocab && c.tied == f.tied && c.qk_norm == f.qk_norm &&
        c.rope_theta == f.rope_theta && !c.qkv_bias && !c.o_bias && c.experts == 0)
      return f;
  throw error(fmt::format("torchtitan 0.3.0 builds only its own model flavors, and no --config of its dense ones (llama3_8b, "
                          "llama3_70b, llama3_405b, qwen3_0_6b, qwen3_1_7b, qwen3_14b, qwen3_32b) has this model's shape "
                          "({} layers, hidden {}, {} heads of {}, {} key/value heads, MLP {}, vocabulary {}{}{}, RoPE base {})",
                          c.layers, c.hidden, c.heads, c.dims_per_head(), c.kv_heads, c.ffn, c.vocab, c.tied ? ", tied" : "",
                          c.qk_norm ? ", q/k norms" : "", detail::fmt_number(c.rope_theta)));
}

/// torchtitan 0.3.0's own rules for layout l of model c, each broken one a sentence (error):
/// tensor parallelism divides the key/value heads (torchtitan/models/common/decoder.py shards whole
/// ones; Megatron-LM would replicate them), no pipeline with tied embeddings (the same file), and
/// the sequence a multiple of tp (sequence parallelism) x 2 cp (torchtitan/trainer.py).
inline void check_torchtitan_rules(const engine_layout& l, const llama_config& c) {
  if (l.tp > 1 && c.kv_heads % l.tp != 0)
    throw error(fmt::format("torchtitan 0.3.0 needs tensor_parallel_degree to divide the key/value heads, and {} does "
                            "not divide this model's {}; plan with a smaller tp or emit for Megatron-LM", l.tp, c.kv_heads));
  if (c.tied && l.pp > 1)
    throw error("torchtitan 0.3.0 runs no pipeline for a model with tied embeddings, and this plan has " + std::to_string(l.pp) +
                " stages; plan with --strategy megatron:...,fsdp=1 and no pp, or emit for Megatron-LM");
  const std::int64_t divisor = std::int64_t(l.tp > 1 ? l.tp : 1) * (l.cp > 1 ? 2 * l.cp : 1);
  if (c.seq % divisor != 0)
    throw error(fmt::format("torchtitan 0.3.0 needs the sequence to be a multiple of {} (tp x 2 cp), and {} is not", divisor,
                            c.seq));
}

/// torchtitan's name of recomputation r: the subcommand of Trainer.Config's activation_checkpoint
/// (torchtitan 0.3.0, torchtitan/distributed/activation_checkpoint.py: selective = SelectiveAC, its
/// per-operator policy; full = FullAC; none = no checkpointing).
inline std::string torchtitan_checkpointing(recompute_mode r) {
  return r == recompute_mode::full ? "full" : r == recompute_mode::selective ? "selective" : "none";
}

/// torchtitan's command-line overrides for layout l of model c: its module and config, the
/// parallel degrees (FSDP over the data-parallel devices, or DDP for a plain data-parallel plan),
/// the pipeline schedule, the batch, and the activation checkpointing (its subcommand
/// `activation-checkpoint:full`, which overrides the config's own choice). A step without a pipeline accumulates gradients over
/// micro-batches of local_batch_size sequences per rank; with one, each rank's share of the
/// batch is local_batch_size, split into pipeline micro-batches.
inline std::vector<engine_flag> torchtitan_flags(const engine_layout& l, const llama_config& c, const std::string& dtype) {
  const bool ddp = !l.knobs.fsdp;
  const torchtitan_flavor& flavor = torchtitan_config_of(c);
  check_torchtitan_rules(l, c);
  std::vector<engine_flag> f{{"--module", flavor.module}, {"--config", flavor.config},
                             {"--parallelism.data_parallel_replicate_degree", std::to_string(ddp ? l.dp : 1)},
                             {"--parallelism.data_parallel_shard_degree", std::to_string(ddp ? 1 : l.dp)},
                             {"--parallelism.tensor_parallel_degree", std::to_string(l.tp)},
                             {"--parallelism.context_parallel_degree", std::to_string(l.cp)},
                             {"--parallelism.pipeline_parallel_degree", std::to_string(l.pp)}};
  if (l.pp > 1) {
    const int layers = int(c.layers), stages = l.pp * l.vpp;
    const std::vector<int> split = l.stage_layers.empty() || l.vpp > 1 ? std::vector<int>(std::size_t(stages), layers / stages)
                                                                         : l.stage_layers;
    const std::optional<std::pair<int, int>> less = torchtitan_less_layers(split, layers);
    if (!less) throw error("no first and last stage counts make torchtitan split the layers as the plan's stages hold them");
    f.insert(f.end(), {{"--parallelism.pipeline_parallel_schedule", l.vpp > 1 ? "Interleaved1F1B" : "1F1B"},
                       {"--parallelism.pipeline_parallel_first_stage_less_layers", std::to_string(less->first)},
                       {"--parallelism.pipeline_parallel_last_stage_less_layers", std::to_string(less->second)},
                       {"--parallelism.pipeline_parallel_microbatch_size", std::to_string(l.micro_batch)}});
    if (l.vpp > 1)  // looped: pp x vpp stages of this many layers
      f.push_back({"--parallelism.pipeline_parallel_layers_per_stage", std::to_string(layers / stages)});
  }
  const std::int64_t local = l.pp > 1 ? l.global_batch / l.dp : l.micro_batch;
  f.insert(f.end(), {{"--training.local_batch_size", std::to_string(local)},
                     {"--training.global_batch_size", std::to_string(l.global_batch)},
                     {"--training.seq_len", std::to_string(c.seq)},
                     {"--training.mixed_precision_param", dtype == "bf16" ? "bfloat16" : "float32"}});
  // a subcommand, not a flag: last, since the parser reads the flags before it as Trainer.Config's
  f.push_back({"activation-checkpoint:" + torchtitan_checkpointing(l.recompute), ""});
  return f;
}

/// Flags as one shell command line, one flag a line.
inline std::string command_text(const std::string& program, const std::vector<engine_flag>& flags) {
  std::string r = program;
  for (const auto& [flag, value] : flags) r += " \\\n    " + flag + (value.empty() ? "" : " " + value);
  return r + "\n";
}

/// Flags as a JSON object: {"--tensor-model-parallel-size": 4, "--sequence-parallel": true, ...};
/// a subcommand ("activation-checkpoint:full") is a switch of its own name.
inline nlohmann::json flags_json(const std::vector<engine_flag>& flags) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [flag, value] : flags) {
    if (value.empty()) j[flag] = true;
    else if (value.find_first_not_of("0123456789") == std::string::npos) j[flag] = std::stoll(value);
    else j[flag] = value;
  }
  return j;
}

}  // namespace autoddl::tools
