#!/usr/bin/env python3
"""autoddl-plan --engine and --emit, checked by the engines themselves: the Megatron-LM flags a plan
emits build megatron-core's own TransformerConfig (its __post_init__ checks heads, query groups,
sequence parallelism and pipeline splits), DistributedDataParallelConfig (the distributed optimizer,
Megatron-FSDP and its sharding strategy) and micro-batch calculator, each flag mapped to its field as
Megatron-LM's arguments.py maps it (core_v0.16.1: a flag is its field's name with dashes, a
default-true bool is --disable-<name> or --no-<name>, and the few it declares by hand below);
torchtitan's command line is parsed by torchtitan's own parser (tyro with torchtitan's
ConfigManager rules) into its own ParallelismConfig, TrainingConfig and activation checkpointing
choice, under the field names torchtitan/trainer.py's Trainer.Config declares. Each must carry the
plan's degrees and recomputation, and re-planning the emitted settings as --strategy megatron:...
must give the same predicted step. Exit 77 (skipped) with the reason where .venv or a package is missing.

Usage: engine_settings.py AUTODDL_PLAN VENV_PYTHON"""
import json
import os
import subprocess
import sys

# the shipped config.json files; the plans run here, so that hf:llama-3.1-70b/config.json names one
MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "data", "models")

ENGINE_SIDE = r'''
import json, sys
cases = json.load(sys.stdin)
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator
from torchtitan.config import ParallelismConfig, TrainingConfig
import torch
import torch.nn.functional as F
import ast, dataclasses, importlib.util, os
import torchtitan, tyro
from torchtitan.config.manager import ConfigManager, custom_registry
ConfigManager()  # registers its parsing rules in custom_registry, as its parse_args uses them
# torchtitan's activation checkpointing choices, from its own module loaded by path (the package
# torchtitan.distributed imports spmd_types, which is not installed here)
root = os.path.dirname(torchtitan.__file__)
spec = importlib.util.spec_from_file_location("torchtitan_activation_checkpoint",
                                              os.path.join(root, "distributed", "activation_checkpoint.py"))
ac = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = ac
spec.loader.exec_module(ac)
# Trainer.Config's fields of those types, by the names torchtitan/trainer.py declares them
known = {"ParallelismConfig": ParallelismConfig, "TrainingConfig": TrainingConfig,
         "ActivationCheckpointingConfig": ac.ActivationCheckpointingConfig}
trainer_fields = []
for node in ast.walk(ast.parse(open(os.path.join(root, "trainer.py")).read())):
    if isinstance(node, ast.ClassDef) and node.name == "Trainer":
        for c in node.body:
            if isinstance(c, ast.ClassDef) and c.name == "Config":
                trainer_fields = [(s.target.id, known[ast.unparse(s.annotation)]) for s in c.body
                                  if isinstance(s, ast.AnnAssign) and ast.unparse(s.annotation) in known]
assert len(trainer_fields) == 3, f"torchtitan's Trainer.Config fields changed: {trainer_fields}"
TitanConfig = dataclasses.make_dataclass(
    "TitanConfig", [(n, t, dataclasses.field(default_factory=ac.FullAC.Config if t is ac.ActivationCheckpointingConfig else t))
                    for n, t in trainer_fields], kw_only=True)
titan_modes = {ac.FullAC.Config: "full", ac.SelectiveAC.Config: "selective", type(None): "none"}


def titan_flavor(module, config):
    """The shape of the model torchtitan builds for --module/--config, read from its own sources: the
    config function's model_registry("FLAVOR"), the module's FLAVOR -> builder table and the builder's
    literals (llama3's MLP width from its multiple_of and ffn_dim_multiplier, as Meta's Llama 3 code
    rounds 8/3 x hidden)."""
    where = os.path.join(root, "models", module)
    registry = ast.parse(open(os.path.join(where, "config_registry.py")).read())
    fn = next(n for n in registry.body if isinstance(n, ast.FunctionDef) and n.name == config)
    flavor = next(c.args[0].value for c in ast.walk(fn) if isinstance(c, ast.Call)
                  and getattr(c.func, "id", "") == "model_registry")
    init = ast.parse(open(os.path.join(where, "__init__.py")).read())
    table = next(n.value for n in init.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict)
                 and any(isinstance(k, ast.Constant) and k.value == flavor for k in n.value.keys))
    builder = next(v.id for k, v in zip(table.keys, table.values) if k.value == flavor)
    lit = {}
    for n in ast.walk(next(n for n in init.body if isinstance(n, ast.FunctionDef) and n.name == builder)):
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.Constant):
            lit[n.targets[0].id] = n.value.value
        if isinstance(n, ast.keyword) and n.arg and isinstance(n.value, ast.Constant):
            lit.setdefault(n.arg, n.value.value)
    ffn = lit.get("hidden_dim")
    if ffn is None:
        ffn = int(lit.get("ffn_dim_multiplier", 1.0) * int(2 * 4 * lit["dim"] / 3))
        ffn = lit["multiple_of"] * -(-ffn // lit["multiple_of"])
    return {"layers": lit["n_layers"], "hidden": lit["dim"], "heads": lit["n_heads"], "kv_heads": lit["n_kv_heads"],
            "head_dim": lit.get("head_dim", lit["dim"] // lit["n_heads"]), "ffn": ffn, "vocab": lit["vocab_size"],
            "tied": lit.get("enable_weight_tying", False), "rope_theta": float(lit["theta"])}
# the flags Megatron-LM's arguments.py declares by hand, and what core_transformer_config_from_args makes of them
by_hand = {"--num-experts": "num_moe_experts", "--swiglu": None, "--group-query-attention": None,
           "--untie-embeddings-and-output-weights": None, "--position-embedding-type": None, "--rotary-base": None,
           "--seq-length": None, "--max-position-embeddings": None, "--vocab-size": None,
           "--make-vocab-size-divisible-by": None, "--ckpt-format": None,
           "--num-layers-per-virtual-pipeline-stage": None, "--micro-batch-size": None, "--global-batch-size": None,
           "--moe-aux-loss-coeff": "moe_aux_loss_coeff",
           "--decoder-first-pipeline-num-layers": "num_layers_in_first_pipeline_stage",
           "--decoder-last-pipeline-num-layers": "num_layers_in_last_pipeline_stage"}
fields = TransformerConfig.__dataclass_fields__
ddp_fields = DistributedDataParallelConfig.__dataclass_fields__
out = []
for case in cases:
    flags, want = case["settings"], case["degrees"]
    if case["engine"] == "megatron":
        kw, ddp_kw = {}, {}
        for flag, value in flags.items():
            if flag in by_hand:
                if by_hand[flag]: kw[by_hand[flag]] = value
                continue
            name = flag[2:].replace("-", "_")
            if name in ddp_fields and name not in fields:
                ddp_kw[name] = value
                continue
            if name.startswith("disable_") and name[8:] not in fields and "add_" + name[8:] in fields:
                kw["add_" + name[8:]] = False  # --disable-bias-linear -> add_bias_linear
                continue
            if name.startswith("no_") and name[3:] in fields:
                kw[name[3:]] = False  # --no-gradient-accumulation-fusion -> gradient_accumulation_fusion
                continue
            if name not in fields:
                raise SystemExit(f"{case['name']}: {flag} is no field of TransformerConfig nor a flag arguments.py declares")
            try:  # argparse's type=float for a number written with a point or an exponent
                kw[name] = float(value) if isinstance(value, str) else value
            except ValueError:
                kw[name] = value
        if flags.get("--swiglu"):
            kw.update(gated_linear_unit=True, activation_func=F.silu)
        pp = kw.get("pipeline_model_parallel_size", 1)
        if "--num-layers-per-virtual-pipeline-stage" in flags:
            kw["virtual_pipeline_model_parallel_size"] = kw["num_layers"] // pp // flags["--num-layers-per-virtual-pipeline-stage"]
        if kw.get("bf16") or kw.get("fp16"):  # as arguments.py: the parameters and pipeline sends in that type
            kw["params_dtype"] = torch.bfloat16 if kw.get("bf16") else torch.float16
        kw["pipeline_dtype"] = kw.get("params_dtype", torch.float32)
        cfg = TransformerConfig(**kw)
        ddp = DistributedDataParallelConfig(**ddp_kw)
        # Megatron-FSDP sharding parameters, gradients and optimizer states is fsdp=1 (it runs on the
        # distributed optimizer's code, which its guide requires); the distributed optimizer alone is dopt=1
        fsdp = ddp.use_megatron_fsdp and ddp.data_parallel_sharding_strategy == "optim_grads_params"
        world = want["devices"]
        dp = world // (cfg.tensor_model_parallel_size * cfg.pipeline_model_parallel_size * cfg.context_parallel_size)
        calc = ConstantNumMicroBatchesCalculator(flags["--global-batch-size"], flags["--micro-batch-size"], dp, False, 0)
        model = {"layers": cfg.num_layers, "hidden": cfg.hidden_size, "heads": cfg.num_attention_heads,
                 "kv_heads": cfg.num_query_groups or cfg.num_attention_heads, "head_dim": cfg.kv_channels,
                 "ffn": cfg.ffn_hidden_size, "vocab": flags["--vocab-size"],
                 "tied": not flags.get("--untie-embeddings-and-output-weights", False),
                 "rope_theta": float(flags["--rotary-base"])}
        got = {"model": model, "tp": cfg.tensor_model_parallel_size, "pp": cfg.pipeline_model_parallel_size,
               "cp": cfg.context_parallel_size, "dp": dp, "vpp": cfg.virtual_pipeline_model_parallel_size or 1,
               "sp": bool(cfg.sequence_parallel), "dopt": ddp.use_distributed_optimizer and not fsdp, "fsdp": fsdp,
               "microbatches": calc.get(), "recompute": cfg.recompute_granularity or "none"}
    else:
        argv = []
        for k, v in flags.items():
            if k in ("--module", "--config"):
                continue  # ConfigManager's own: they pick the config registry function the flags override
            argv += [k] if v is True else [k, str(v)]
        parsed = tyro.cli(TitanConfig, args=argv, registry=custom_registry)
        p, t = parsed.parallelism, parsed.training
        dp = p.data_parallel_shard_degree * p.data_parallel_replicate_degree
        accumulation = t.global_batch_size // (t.local_batch_size * dp)
        pipe = t.local_batch_size // p.pipeline_parallel_microbatch_size if p.pipeline_parallel_degree > 1 else 1
        got = {"tp": p.tensor_parallel_degree, "pp": p.pipeline_parallel_degree, "cp": p.context_parallel_degree,
               "dp": dp, "fsdp": p.data_parallel_shard_degree > 1 or dp == 1,
               "microbatches": accumulation * pipe, "sp": p.enable_sequence_parallel and p.tensor_parallel_degree > 1,
               "devices": dp * p.tensor_parallel_degree * p.pipeline_parallel_degree * p.context_parallel_degree,
               "recompute": titan_modes[type(parsed.activation_checkpoint)],
               "model": titan_flavor(flags["--module"], flags["--config"])}
    out.append({"name": case["name"], "got": got})
json.dump(out, sys.stdout)
'''


# Llama 3.1 8B as published (meta-llama/Llama-3.1-8B's config.json: hidden 4096, 32 layers, 32 heads,
# 8 key/value heads, MLP 14336, vocabulary 128256, RoPE theta 500000, untied)
LLAMA31_8B = {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128, "ffn": 14336, "vocab": 128256,
              "tied": False, "rope_theta": 500000.0}


def published_shape(model):
    """The shape of a run's model from its published source: a shipped config.json, or Llama 3.1 8B's figures."""
    if model.startswith("hf:"):
        c = json.load(open(os.path.join(MODELS, model[3:])))
        return {"layers": c["num_hidden_layers"], "hidden": c["hidden_size"], "heads": c["num_attention_heads"],
                "kv_heads": c["num_key_value_heads"], "head_dim": c.get("head_dim", c["hidden_size"] // c["num_attention_heads"]),
                "ffn": c["intermediate_size"], "vocab": c["vocab_size"], "tied": c["tie_word_embeddings"],
                "rope_theta": float(c["rope_theta"])}
    if model == "llama:size=llama3-8b":
        return LLAMA31_8B
    return {"layers": int(dict(kv.split("=") for kv in model.split(":", 1)[1].split(","))["layers"])}


def main():
    plan, python = os.path.abspath(sys.argv[1]), sys.argv[2]
    if not os.path.exists(python):
        print(f"SKIP: no Python virtual environment at {python} (scripts/setup-python makes it)")
        sys.exit(77)
    probe = subprocess.run([python, "-c", "import megatron.core, torchtitan.config"], capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"SKIP: megatron-core or torchtitan is not importable in {python}: {probe.stderr.strip().splitlines()[-1]}")
        sys.exit(77)
    h100 = ["--hardware", "dgx-h100", "--dtype", "bf16", "--json"]
    runs = [("Llama 3.1 8B, megatron, 1 node", ["--model", "llama:size=llama3-8b", "--seq", "8192", "--batch", "128", "--mesh", "8",
                                               "--engine", "megatron", "--emit", "megatron"]),
            # the Llama 3.1 70B config.json that data/models ships, named from that folder as a user names it
            ("Llama 3.1 70B config.json, megatron, 8 nodes", ["--model", "hf:llama-3.1-70b/config.json", "--seq", "8192",
                                                              "--batch", "512", "--mesh", "8x8", "--engine", "megatron",
                                                              "--emit", "megatron"]),
            ("a small mixture of experts, megatron", ["--model", "llama:layers=4,hidden=512,heads=8,kv_heads=4,ffn=1024,experts=8,"
                                                      "topk=2,vocab=4096,seq=1024,batch=32", "--mesh", "2x4",
                                                      "--engine", "megatron", "--emit", "megatron"]),
            ("Llama 3.1 8B, torchtitan, 1 node", ["--model", "llama:size=llama3-8b", "--seq", "8192", "--batch", "128",
                                                  "--mesh", "8", "--engine", "torchtitan", "--emit", "torchtitan"]),
            ("Llama 3.1 70B config.json, torchtitan, 8 nodes", ["--model", "hf:llama-3.1-70b/config.json", "--seq", "8192",
                                                                "--batch", "512", "--mesh", "8x8", "--engine", "torchtitan",
                                                                "--emit", "torchtitan"]),
            ("Qwen3 32B config.json, torchtitan, 4 nodes", ["--model", "hf:qwen3-32b/config.json", "--seq", "4096",
                                                            "--batch", "256", "--mesh", "4x8", "--engine", "torchtitan",
                                                            "--emit", "torchtitan"]),
            ("Llama 3.1 8B, Megatron-FSDP, 1 node", ["--model", "llama:size=llama3-8b", "--seq", "8192", "--batch", "128",
                                                     "--mesh", "8", "--strategy", "megatron:tp=2,mbs=1,recompute=full,sp=1,fsdp=1",
                                                     "--emit", "megatron"]),
            ("Llama 3.1 8B, torchtitan without checkpointing", ["--model", "llama:size=llama3-8b", "--seq", "8192",
                                                                "--batch", "128", "--mesh", "8", "--strategy",
                                                                "megatron:tp=4,mbs=2,recompute=none,sp=1,fsdp=1",
                                                                "--emit", "torchtitan"]),
            ("Llama 3.1 8B, torchtitan with full checkpointing", ["--model", "llama:size=llama3-8b", "--seq", "8192",
                                                                  "--batch", "128", "--mesh", "8", "--strategy",
                                                                  "megatron:tp=2,mbs=1,recompute=full,sp=1,fsdp=1",
                                                                  "--emit", "torchtitan"])]
    failures, cases, plans = [], [], {}
    for name, args in runs:
        r = subprocess.run([plan, *args, *h100], capture_output=True, text=True, timeout=600, cwd=MODELS)
        if r.returncode != 0:
            failures.append(f"{name}: exit {r.returncode}: {r.stderr.strip()}")
            continue
        j = json.loads(r.stdout)
        plans[name] = (args, j, published_shape(args[args.index("--model") + 1])["layers"])
        layout = j["emit"]["layout"]
        knobs = dict(kv.split("=") for kv in layout.split(":", 1)[1].split(",")) if ":" in layout else {}
        devices = 1
        for a in args[args.index("--mesh") + 1].split("x"):
            devices *= int(a)
        degrees = {"tp": int(knobs.get("tp", 1)), "pp": max(1, int(knobs.get("pp", 1))), "cp": max(1, int(knobs.get("cp", 1))),
                   "vpp": max(1, int(knobs.get("vpp", 1))), "sp": knobs.get("sp") == "1", "devices": devices,
                   "microbatches": j.get("microbatches"), "fsdp": knobs.get("fsdp") == "1", "dopt": knobs.get("dopt") == "1",
                   "recompute": knobs.get("recompute", "none")}
        degrees["dp"] = devices // (degrees["tp"] * degrees["pp"] * degrees["cp"])
        degrees["model"] = published_shape(args[args.index("--model") + 1])
        cases.append({"name": name, "engine": j["emit"]["engine"], "settings": j["emit"]["settings"], "degrees": degrees,
                      "layout": layout, "recompute": j.get("recompute")})
        print(f"{name}: {layout}, predicted step {j['predicted_step_s']:.3f} s")
    r = subprocess.run([python, "-c", ENGINE_SIDE], input=json.dumps(cases), capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        failures.append("the engines refused the emitted settings: " + r.stderr.strip()[-1500:])
    else:
        for case, got in zip(cases, json.loads(r.stdout)):
            want = case["degrees"]
            for k in ("tp", "pp", "cp", "dp", "sp", "vpp", "devices", "microbatches", "fsdp", "dopt", "recompute"):
                if k in got["got"] and got["got"][k] != want[k]:
                    failures.append(f"{case['name']}: the engine reads {k}={got['got'][k]}, the plan has {want[k]}")
            for k, v in want["model"].items():  # the model the engine builds is the published one
                if got["got"]["model"][k] != v:
                    failures.append(f"{case['name']}: the engine builds {k}={got['got']['model'][k]}, the model has {v}")
            print(f"ok   {case['name']}: the engine's own config classes accept the settings: {got['got']}")
    failures += replanned(plan, plans, h100)
    for f in failures:
        print("FAIL " + f)
    sys.exit(1 if failures else 0)


def replanned(plan, plans, h100):
    """The emitted Megatron-LM flags re-planned as --strategy megatron:... give the same predicted step."""
    failures = []
    for name, (args, j, layers) in plans.items():
        f = j["emit"]["settings"]
        if j["emit"]["engine"] == "torchtitan":
            tp, pp = f["--parallelism.tensor_parallel_degree"], f["--parallelism.pipeline_parallel_degree"]
            knobs = [f"tp={tp}", f"pp={pp}", f"cp={f['--parallelism.context_parallel_degree']}",
                     f"mbs={f.get('--parallelism.pipeline_parallel_microbatch_size', f['--training.local_batch_size'])}",
                     "recompute=" + next(k.split(":", 1)[1] for k in f if k.startswith("activation-checkpoint:"))]
            if tp > 1: knobs.append("sp=1")
            if "--parallelism.pipeline_parallel_layers_per_stage" in f:
                knobs.append(f"vpp={layers // pp // f['--parallelism.pipeline_parallel_layers_per_stage']}")
            if f["--parallelism.data_parallel_shard_degree"] > 1: knobs.append("fsdp=1")
            failures += same_step(plan, name, args, j, "megatron:" + ",".join(knobs), h100)
            continue
        knobs = [f"tp={f['--tensor-model-parallel-size']}", f"pp={f['--pipeline-model-parallel-size']}",
                 f"cp={f['--context-parallel-size']}", f"mbs={f['--micro-batch-size']}",
                 f"recompute={f.get('--recompute-granularity', 'none')}"]
        if f.get("--sequence-parallel"): knobs.append("sp=1")
        if f.get("--use-megatron-fsdp") and f.get("--data-parallel-sharding-strategy") == "optim_grads_params":
            knobs.append("fsdp=1")
        elif f.get("--use-distributed-optimizer"):
            knobs.append("dopt=1")
        if "--num-layers-per-virtual-pipeline-stage" in f:
            knobs.append(f"vpp={f['--num-layers'] // f['--pipeline-model-parallel-size'] // f['--num-layers-per-virtual-pipeline-stage']}")
        if "--expert-model-parallel-size" in f:
            knobs += [f"ep={f['--expert-model-parallel-size']}", f"etp={f['--expert-tensor-parallel-size']}"]
        failures += same_step(plan, name, args, j, "megatron:" + ",".join(knobs), h100)
    return failures


def same_step(plan, name, args, j, strategy, h100):
    """The engine plan j re-planned as --strategy `strategy`: [] where it predicts the same step."""
    planned = ("--engine", "--emit", "--strategy")
    base = [a for i, a in enumerate(args) if a not in planned and args[i - 1] not in planned]
    r = subprocess.run([plan, *base, "--strategy", strategy, *h100], capture_output=True, text=True, timeout=600, cwd=MODELS)
    if r.returncode != 0:
        return [f"{name}: --strategy {strategy} exits {r.returncode}: {r.stderr.strip()}"]
    again = json.loads(r.stdout)["predicted_step_s"]
    same = abs(again - j["predicted_step_s"]) <= 1e-9 * j["predicted_step_s"]
    print(f"{'ok  ' if same else 'FAIL'} {name}: --strategy {strategy} predicts {again:.6f} s, the engine plan "
          f"{j['predicted_step_s']:.6f} s")
    return [] if same else [f"{name}: re-planned settings predict {again} s, not {j['predicted_step_s']} s"]


main()
