#!/usr/bin/env python3
"""LLaMA-family and mixture-of-experts training runs with published throughput, priced by autoddl on
dgx-h100 (bf16):
the published layout as a megatron plan, and the auto plan. The oracle is each run's published
step time (NVIDIA's DGX Cloud benchmarking recipes, NeMo 24.09/24.12, BF16 tables; NeMo AutoModel's
performance summary, BF16): predicted /
published must lie in 0.85..1.15 for the LLaMA family (0.75..1.25 for the mixture of experts: its
per-expert GEMMs, token permutes and count exchange are priced (ops/expert_work.hpp) and still leave
every published run slower than predicted, docs/results.md says by how much; a run whose model or
layout the knobs only stand in for is reported, not held to it), and auto may not be
slower than a published layout that fits
(auto's last starts are Megatron-LM's layouts, search/megatron_layouts.hpp), and neither may
`--engine megatron` (the best Megatron-LM layout alone). The table this prints is docs/results.md's "LLaMA family"
table (--family moe: its "Mixtures of experts" table): the test fails when the docs hold another
(run with --print to regenerate it).

Usage: llama_published.py AUTODDL_PLAN DOCS_RESULTS_MD [--family llama|moe] [--print]"""
import json
import subprocess
import sys

from published_runs import moe_runs, runs, stand_in_layouts

plan, docs = sys.argv[1], sys.argv[2]
printing = "--print" in sys.argv[3:]
family = sys.argv[sys.argv.index("--family") + 1] if "--family" in sys.argv else "llama"

if family == "moe":
    runs = moe_runs
else:
    stand_in_layouts = set()


def priced(model, seq, batch, mesh, strategy, engine="autoddl"):
    r = subprocess.run([plan, "--model", model, "--seq", str(seq), "--batch", str(batch), "--mesh", mesh,
                        "--hardware", "dgx-h100", "--dtype", "bf16", "--strategy", strategy, "--json", "--allow-over-limit",
                        "--engine", engine],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        sys.exit(f"autoddl-plan failed on {model} {strategy}: {r.stderr.strip()}")
    return json.loads(r.stdout)


def gb(x):
    return f"{x / 1e9:.1f}"


rows = ["| run | GPUs | published layout | published step | predicted step | predicted / published | "
        "predicted TFLOP/s per GPU | predicted memory per GPU (GB) | auto plan | auto step | auto memory (GB) | "
        "auto / published layout |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|"]
failures = []
for name, model, seq, batch, mesh, strategy, published, source in runs:
    devices = 1
    for d in mesh.split("x"):
        devices *= int(d)
    p = priced(model, seq, batch, mesh, strategy)
    a = priced(model, seq, batch, mesh, "auto")
    ratio = p["predicted_step_s"] / published
    tflops = p["flops_per_step"] / p["predicted_step_s"] / devices / 1e12
    auto_layout = (f"{a['pipeline_stages']} stages, " if a["pipeline_stages"] > 1 else "") + \
        f"{a['microbatches']} x {a['micro_batch_size']}, recompute {a['recompute']}"
    markers = ("the fastest plan found is Megatron-LM's layout ", "the fastest plan found is torchtitan's layout ")
    for note in a["notes"]:
        for marker in markers:
            if note.startswith(marker):
                auto_layout += ": `" + note[len(marker):].split(" ")[0] + "`"
    if not a["notes"] or not any(n.startswith(markers) for n in a["notes"]):
        auto_layout += " (the layout search's own)"
    fits = "" if p["feasible"] else " (over the limit)"
    rows.append(f"| {name} | {devices} | `{strategy}` | {published:.2f} s | "
                f"{p['predicted_step_s']:.2f} s | {ratio:.2f} | {tflops:.0f} | {gb(p['peak_bytes_per_device'])}{fits} | "
                f"{auto_layout} | {a['predicted_step_s']:.2f} s | {gb(a['peak_bytes_per_device'])} | "
                f"{a['predicted_step_s'] / p['predicted_step_s']:.3f} |")
    print(f"{name}: published {published} s ({source}); predicted {p['predicted_step_s']:.3f} s, ratio {ratio:.3f}, "
          f"{tflops:.0f} TFLOP/s per GPU, {p['flops_per_step']:.3e} FLOP per step; auto {a['predicted_step_s']:.3f} s",
          file=sys.stderr)
    lo, hi = (0.75, 1.25) if family == "moe" else (0.85, 1.15)
    if name not in stand_in_layouts and not lo <= ratio <= hi:
        failures.append(f"{name}: predicted / published {ratio:.3f} outside {lo}..{hi}")
    if not a["feasible"]:
        failures.append(f"{name}: the auto plan does not fit")
    # --engine megatron: the best of Megatron-LM's layouts the descent finds, no slower than the published one
    m = priced(model, seq, batch, mesh, "auto", "megatron")
    print(f"{name}: --engine megatron {m['strategy']} {m['predicted_step_s']:.3f} s", file=sys.stderr)
    if p["feasible"] and name not in stand_in_layouts and m["predicted_step_s"] > p["predicted_step_s"] * (1 + 1e-9):
        failures.append(f"{name}: --engine megatron ({m['predicted_step_s']:.3f} s) is slower than the published layout "
                        f"({p['predicted_step_s']:.3f} s)")
    if p["feasible"] and a["predicted_step_s"] > p["predicted_step_s"] * (1 + 1e-9):
        failures.append(f"{name}: auto ({a['predicted_step_s']:.3f} s) is slower than the published layout it could take "
                        f"({p['predicted_step_s']:.3f} s)")

table = "\n".join(rows)
if printing:
    print(table)
else:
    text = open(docs).read()
    if table not in text:
        failures.append("docs/results.md does not hold the table these runs give now; regenerate it with --print:\n" + table)
for f in failures:
    print("FAIL " + f)
sys.exit(1 if failures else 0)
