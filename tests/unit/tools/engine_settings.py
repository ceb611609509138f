#!/usr/bin/env python3
"""autoddl-plan --engine and --emit, checked by the engines themselves: the Megatron-LM flags a plan
emits build megatron-core's own TransformerConfig (its __post_init__ checks heads, query groups,
sequence parallelism and pipeline splits), DistributedDataParallelConfig and micro-batch calculator,
each flag mapped to its field as Megatron-LM's arguments.py maps it (core_v0.16.1: a flag is its
field's name with dashes, a default-true bool is --disable-<name>, and the few it declares by hand
below); torchtitan's overrides build torchtitan's own ParallelismConfig and TrainingConfig. Each
must carry the plan's degrees, and re-planning the emitted settings as --strategy megatron:... (for
torchtitan's, with fsdp=1) must give the same predicted step. Exit 77 (skipped) with the reason where .venv or a package is missing.

Usage: engine_settings.py AUTODDL_PLAN VENV_PYTHON"""
import json
import os
import subprocess
import sys

ENGINE_SIDE = r'''
import json, sys
cases = json.load(sys.stdin)
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator
from torchtitan.config import ParallelismConfig, TrainingConfig
import torch
import torch.nn.functional as F
# the flags Megatron-LM's arguments.py declares by hand, and what core_transformer_config_from_args makes of them
by_hand = {"--num-experts": "num_moe_experts", "--swiglu": None, "--group-query-attention": None,
           "--untie-embeddings-and-output-weights": None, "--position-embedding-type": None, "--rotary-base": None,
           "--seq-length": None, "--max-position-embeddings": None, "--vocab-size": None,
           "--make-vocab-size-divisible-by": None, "--use-distributed-optimizer": None,
           "--num-layers-per-virtual-pipeline-stage": None, "--micro-batch-size": None, "--global-batch-size": None,
           "--moe-aux-loss-coeff": "moe_aux_loss_coeff",
           "--decoder-first-pipeline-num-layers": "num_layers_in_first_pipeline_stage",
           "--decoder-last-pipeline-num-layers": "num_layers_in_last_pipeline_stage"}
fields = TransformerConfig.__dataclass_fields__
out = []
for case in cases:
    flags, want = case["settings"], case["degrees"]
    if case["engine"] == "megatron":
        kw = {}
        for flag, value in flags.items():
            if flag in by_hand:
                if by_hand[flag]: kw[by_hand[flag]] = value
                continue
            name = flag[2:].replace("-", "_")
            if name.startswith("disable_") and name[8:] not in fields and "add_" + name[8:] in fields:
                kw["add_" + name[8:]] = False  # --disable-bias-linear -> add_bias_linear
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
        ddp = DistributedDataParallelConfig(use_distributed_optimizer=bool(flags.get("--use-distributed-optimizer")))
        world = want["devices"]
        dp = world // (cfg.tensor_model_parallel_size * cfg.pipeline_model_parallel_size * cfg.context_parallel_size)
        calc = ConstantNumMicroBatchesCalculator(flags["--global-batch-size"], flags["--micro-batch-size"], dp, False, 0)
        got = {"tp": cfg.tensor_model_parallel_size, "pp": cfg.pipeline_model_parallel_size,
               "cp": cfg.context_parallel_size, "dp": dp, "vpp": cfg.virtual_pipeline_model_parallel_size or 1,
               "sp": bool(cfg.sequence_parallel), "dopt": ddp.use_distributed_optimizer,
               "microbatches": calc.get(), "recompute": cfg.recompute_granularity or "none"}
    else:
        par = {k.split(".", 1)[1]: v for k, v in flags.items() if k.startswith("--parallelism.")}
        tr = {k.split(".", 1)[1]: v for k, v in flags.items() if k.startswith("--training.")}
        p, t = ParallelismConfig(**par), TrainingConfig(**tr)
        dp = p.data_parallel_shard_degree * p.data_parallel_replicate_degree
        accumulation = t.global_batch_size // (t.local_batch_size * dp)
        pipe = t.local_batch_size // p.pipeline_parallel_microbatch_size if p.pipeline_parallel_degree > 1 else 1
        got = {"tp": p.tensor_parallel_degree, "pp": p.pipeline_parallel_degree, "cp": p.context_parallel_degree,
               "dp": dp, "fsdp": p.data_parallel_shard_degree > 1 or dp == 1,
               "microbatches": accumulation * pipe, "sp": p.enable_sequence_parallel or p.tensor_parallel_degree == 1,
               "devices": dp * p.tensor_parallel_degree * p.pipeline_parallel_degree * p.context_parallel_degree}
    out.append({"name": case["name"], "got": got})
json.dump(out, sys.stdout)
'''


def main():
    plan, python = sys.argv[1], sys.argv[2]
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
            ("Llama 3.1 70B, megatron, 8 nodes", ["--model", "llama:size=llama3-70b", "--seq", "8192", "--batch", "512",
                                                  "--mesh", "8x8", "--engine", "megatron", "--emit", "megatron"]),
            ("a small mixture of experts, megatron", ["--model", "llama:layers=4,hidden=512,heads=8,kv_heads=4,ffn=1024,experts=8,"
                                                      "topk=2,vocab=4096,seq=1024,batch=32", "--mesh", "2x4",
                                                      "--engine", "megatron", "--emit", "megatron"]),
            ("Llama 3.1 8B, torchtitan, 1 node", ["--model", "llama:size=llama3-8b", "--seq", "8192", "--batch", "128",
                                                  "--mesh", "8", "--engine", "torchtitan", "--emit", "torchtitan"]),
            ("Llama 3.1 70B, torchtitan, 8 nodes", ["--model", "llama:size=llama3-70b", "--seq", "8192", "--batch", "512",
                                                    "--mesh", "8x8", "--engine", "torchtitan", "--emit", "torchtitan"])]
    failures, cases, plans = [], [], {}
    for name, args in runs:
        r = subprocess.run([plan, *args, *h100], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            failures.append(f"{name}: exit {r.returncode}: {r.stderr.strip()}")
            continue
        j = json.loads(r.stdout)
        plans[name] = (args, j)
        layout = j["emit"]["layout"]
        knobs = dict(kv.split("=") for kv in layout.split(":", 1)[1].split(",")) if ":" in layout else {}
        devices = 1
        for a in args[args.index("--mesh") + 1].split("x"):
            devices *= int(a)
        degrees = {"tp": int(knobs.get("tp", 1)), "pp": max(1, int(knobs.get("pp", 1))), "cp": max(1, int(knobs.get("cp", 1))),
                   "vpp": max(1, int(knobs.get("vpp", 1))), "sp": knobs.get("sp") == "1", "devices": devices,
                   "microbatches": j.get("microbatches")}
        degrees["dp"] = devices // (degrees["tp"] * degrees["pp"] * degrees["cp"])
        cases.append({"name": name, "engine": j["emit"]["engine"], "settings": j["emit"]["settings"], "degrees": degrees,
                      "layout": layout, "recompute": j.get("recompute")})
        print(f"{name}: {layout}, predicted step {j['predicted_step_s']:.3f} s")
    r = subprocess.run([python, "-c", ENGINE_SIDE], input=json.dumps(cases), capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        failures.append("the engines refused the emitted settings: " + r.stderr.strip()[-1500:])
    else:
        for case, got in zip(cases, json.loads(r.stdout)):
            want = case["degrees"]
            for k in ("tp", "pp", "cp", "dp", "sp", "vpp", "devices", "microbatches"):
                if k in got["got"] and got["got"][k] != want[k]:
                    failures.append(f"{case['name']}: the engine reads {k}={got['got'][k]}, the plan has {want[k]}")
            print(f"ok   {case['name']}: the engine's own config classes accept the settings: {got['got']}")
    failures += replanned(plan, plans, h100)
    for f in failures:
        print("FAIL " + f)
    sys.exit(1 if failures else 0)


def replanned(plan, plans, h100):
    """The emitted Megatron-LM flags re-planned as --strategy megatron:... give the same predicted step."""
    failures = []
    for name, (args, j) in plans.items():
        f = j["emit"]["settings"]
        if j["emit"]["engine"] == "torchtitan":
            tp, pp = f["--parallelism.tensor_parallel_degree"], f["--parallelism.pipeline_parallel_degree"]
            knobs = [f"tp={tp}", f"pp={pp}", f"cp={f['--parallelism.context_parallel_degree']}",
                     f"mbs={f.get('--parallelism.pipeline_parallel_microbatch_size', f['--training.local_batch_size'])}",
                     f"recompute={j['emit']['activation_checkpoint']}"]
            if tp > 1: knobs.append("sp=1")
            if "--parallelism.pipeline_parallel_layers_per_stage" in f:
                layers = {"llama3_8b": 32, "llama3_70b": 80, "llama3_405b": 126}[f["--config"]]
                knobs.append(f"vpp={layers // pp // f['--parallelism.pipeline_parallel_layers_per_stage']}")
            if f["--parallelism.data_parallel_shard_degree"] > 1: knobs.append("fsdp=1")
            failures += same_step(plan, name, args, j, "megatron:" + ",".join(knobs), h100)
            continue
        knobs = [f"tp={f['--tensor-model-parallel-size']}", f"pp={f['--pipeline-model-parallel-size']}",
                 f"cp={f['--context-parallel-size']}", f"mbs={f['--micro-batch-size']}",
                 f"recompute={f.get('--recompute-granularity', 'none')}"]
        if f.get("--sequence-parallel"): knobs.append("sp=1")
        if f.get("--use-distributed-optimizer"): knobs.append("dopt=1")
        if "--num-layers-per-virtual-pipeline-stage" in f:
            knobs.append(f"vpp={f['--num-layers'] // f['--pipeline-model-parallel-size'] // f['--num-layers-per-virtual-pipeline-stage']}")
        if "--expert-model-parallel-size" in f:
            knobs += [f"ep={f['--expert-model-parallel-size']}", f"etp={f['--expert-tensor-parallel-size']}"]
        failures += same_step(plan, name, args, j, "megatron:" + ",".join(knobs), h100)
    return failures


def same_step(plan, name, args, j, strategy, h100):
    """The engine plan j re-planned as --strategy `strategy`: [] where it predicts the same step."""
    base = [a for i, a in enumerate(args) if a not in ("--engine", "--emit") and args[i - 1] not in ("--engine", "--emit")]
    r = subprocess.run([plan, *base, "--strategy", strategy, *h100], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        return [f"{name}: --strategy {strategy} exits {r.returncode}: {r.stderr.strip()}"]
    again = json.loads(r.stdout)["predicted_step_s"]
    same = abs(again - j["predicted_step_s"]) <= 1e-9 * j["predicted_step_s"]
    print(f"{'ok  ' if same else 'FAIL'} {name}: --strategy {strategy} predicts {again:.6f} s, the engine plan "
          f"{j['predicted_step_s']:.6f} s")
    return [] if same else [f"{name}: re-planned settings predict {again} s, not {j['predicted_step_s']} s"]


main()
