#!/usr/bin/env python3
"""Planning time of autoddl-plan on the search's reference cases, each against its target, with the
phases of search_s (layout search, pipeline search, Megatron-LM layouts, exact reference; from
--json's search_parts_s), the user CPU seconds, and the user-space instructions of every run
(`perf stat -e instructions:u`; where perf or its counters are unavailable, a line says so and
the times stand alone). Instructions barely move with the machine's load, so they are the figure
to compare between commits; seconds are for the targets.

Prints, never asserts: a slow or busy machine misses targets without failing anything (.ci/run
prints these lines in its benchmark phase). A case that exits non-zero is reported with its
message. The GPTs of 512 to 2048 layers plan under a memory limit of 64 GiB, which every one of
them fits (under the cpu-local profile's 11.4 GB the 2048-layer one fits no plan).

Usage: benchmarks/plan_time.py build/tools/autoddl-plan [rounds]   (rounds: median of, default 1)"""
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

GPT3 = ["--hardware", "dgx-a100", "--dtype", "bf16"]
H100 = ["--hardware", "dgx-h100", "--dtype", "bf16"]
# name, target seconds (None: no target, a point of the layer series), arguments
CASES = [
    ("gpt3-175b batch 128 on 128x8", 0.5, ["--model", "gpt:size=gpt3-175b,batch=128", "--mesh", "128x8", *GPT3]),
    ("gpt3-175b batch 1536 on 16x8x8", 1.5, ["--model", "gpt:size=gpt3-175b,batch=1536", "--mesh", "16x8x8", *GPT3]),
    ("llama3-405b seq 8192 batch 2048 on 1024x8", 2.0,
     ["--model", "llama:size=llama3-405b,seq=8192,batch=2048", "--mesh", "1024x8", *H100]),
    ("llama3-8b on 8 (gap target 1 %)", 0.5, ["--model", "llama:size=llama3-8b", "--mesh", "8", *H100]),
] + [(f"gpt of {n} layers on 2", 2.0 if n == 2048 else None,
      ["--model", f"gpt:layers={n},hidden=256,heads=4,seq=64,batch=8", "--mesh", "2", "--memory-limit", "64GiB"])
     for n in (512, 1024, 2048)]


def perf_works():
    if shutil.which("perf") is None:
        return "perf is not installed"
    r = subprocess.run(["perf", "stat", "-x,", "-e", "instructions:u", "true"], capture_output=True, text=True)
    line = (r.stderr.strip().splitlines() or [""])[-1]
    if r.returncode != 0 or "not supported" in line or "not counted" in line:
        return "perf stat cannot count instructions:u here (" + (line or f"exit {r.returncode}") + ")"
    return None


def run(plan, args, counting):
    """One planning run: wall and user CPU seconds, instructions (or None), exit code, JSON or stderr."""
    cmd = [plan, *args, "--json"]
    out = tempfile.NamedTemporaryFile(suffix=".perf", delete=False)
    out.close()
    if counting:
        cmd = ["perf", "stat", "-x,", "-e", "instructions:u", "-o", out.name, *cmd]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    user = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - before
    instructions = None
    if counting:
        for line in open(out.name):
            fields = line.strip().split(",")
            if len(fields) > 2 and fields[2].startswith("instructions") and fields[0].isdigit():
                instructions = int(fields[0])
    os.unlink(out.name)
    j = json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else None
    return wall, user, instructions, r.returncode, j, r.stderr.strip().splitlines()[-1:] or [""]


def describe(name, target, runs):
    walls = [x[0] for x in runs]
    users = [x[1] for x in runs]
    instr = [x[2] for x in runs if x[2] is not None]
    wall, user = statistics.median(walls), statistics.median(users)
    verdict = "" if target is None else f" (target < {target} s: {'met' if wall < target else 'MISSED'})"
    line = f"plan_time: {name}: wall {wall:.2f} s, user {user:.2f} s"
    if len(runs) > 1:
        line += f" [wall {min(walls):.2f}..{max(walls):.2f} over {len(runs)} runs]"
    if instr:
        line += f", {statistics.median(instr) / 1e9:.2f} G instructions"
    line += verdict
    print(line)
    _, _, _, rc, j, err = runs[-1]
    if j is None:
        print(f"plan_time:   exit {rc}: {err[0][:200]}")
        return
    parts = j.get("search_parts_s", {})
    print("plan_time:   search_s {:.2f} s = {}".format(
        j.get("search_s", 0), ", ".join(f"{k} {v:.2f}" for k, v in parts.items())))
    gap = j.get("optimal_gap", j.get("pipeline", {}).get("layout_reference", {}).get("optimal_gap"))
    print(f"plan_time:   predicted step {j['predicted_step_s']:.4g} s, {j.get('pipeline_stages', 1)} stage(s), gap to "
          f"the exact reference {'n/a' if gap is None else f'{100 * gap:.3f} %'}")


def main():
    plan = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    why_not = perf_works()
    if why_not:
        print(f"plan_time: no instruction counts: {why_not}; times only")
    runs = {name: [] for name, _, _ in CASES}
    for r in range(rounds):  # interleaved, alternating direction, so load drifts hit every case alike
        for name, _, args in (CASES if r % 2 == 0 else list(reversed(CASES))):
            runs[name].append(run(plan, args, why_not is None))
    for name, target, _ in CASES:
        describe(name, target, runs[name])
    w = {n: statistics.median(x[0] for x in runs[n]) for n, _, _ in CASES}
    a, b, c = (w[f"gpt of {n} layers on 2"] for n in (512, 1024, 2048))
    print(f"plan_time: layers 512 -> 1024 -> 2048: wall x{b / a:.2f}, x{c / b:.2f} per doubling (linear: x2)")


if __name__ == "__main__":
    main()
