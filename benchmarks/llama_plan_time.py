#!/usr/bin/env python3
"""Wall time of autoddl-plan on the LLaMA family (its search targets): Llama 3 405B on
1024x8 dgx-h100 in bf16 with every coordinate free (layouts, context parallelism, pipeline,
micro-batches, recomputation; target < 2 s) and Llama 3 8B on mesh 8 (target < 0.5 s). The two
commands run interleaved, `rounds` rounds; printed: median and spread (min..max) per command,
and each command's predicted step and optimal gap from its --json.

Usage: benchmarks/llama_plan_time.py build/tools/autoddl-plan [rounds]"""
import json
import statistics
import subprocess
import sys
import time

plan = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
cases = [
    ("llama3-405b seq 8192 batch 2048 on 1024x8", 2.0,
     ["--model", "llama:size=llama3-405b,seq=8192,batch=2048", "--mesh", "1024x8"]),
    ("llama3-8b on 8", 0.5, ["--model", "llama:size=llama3-8b", "--mesh", "8"]),
]
walls = {name: [] for name, _, _ in cases}
last = {}
for r in range(rounds):
    for name, _, args in (cases if r % 2 == 0 else list(reversed(cases))):
        t0 = time.perf_counter()
        out = subprocess.run([plan, *args, "--hardware", "dgx-h100", "--dtype", "bf16", "--json"], capture_output=True,
                             text=True, check=True)
        walls[name].append(time.perf_counter() - t0)
        last[name] = json.loads(out.stdout)
for name, target, _ in cases:
    w = walls[name]
    j = last[name]
    gap = j.get("optimal_gap", j.get("pipeline", {}).get("layout_reference", {}).get("optimal_gap"))
    print(f"{name}: wall median {statistics.median(w):.3f} s [{min(w):.3f}..{max(w):.3f}] over {rounds} rounds "
          f"(target < {target} s: {'met' if statistics.median(w) < target else 'MISSED'}); predicted step "
          f"{j['predicted_step_s']:.3f} s, {j['pipeline_stages']} stages, gap to the exact reference "
          f"{'n/a' if gap is None else f'{100 * gap:.3f} %'}")
