#!/usr/bin/env python3
"""autoddl-plan --engine megatron on random (model, mesh) pairs never emits a layout Megatron-LM would
refuse. The rules are Megatron-LM's own (core_v0.16.1: megatron/training/arguments.py validate_args,
megatron-core's TransformerConfig.__post_init__ and its micro-batch calculator), written here:
  1. tp x pp x cp divides the world size; dp = world / (tp x pp x cp)
  2. tp divides the attention heads
  3. tp divides the query groups or is a multiple of them
  4. --sequence-parallel only with tp > 1 (arguments.py turns it off at tp = 1)
  5. pp divides the layers, or --decoder-first/last-pipeline-num-layers leave the middle stages
     equal; with --num-layers-per-virtual-pipeline-stage, that divides layers / pp
  6. the global batch is a whole number of micro-batches of --micro-batch-size on each of dp ranks
  7. the sequence is a multiple of 2 x cp (cp > 1)
  8. ep divides the experts, and ep x etp divides tp x cp x dp (the expert ranks fold onto them)
A pair with no Megatron-LM layout is refused with one sentence on stderr and exit code 2.
Then --engine torchtitan on dense random pairs: its layout keeps torchtitan 0.3.0's own rules
(torchtitan_broken below), or the pair is refused the same way.
Seed fixed, printed with each case.

Usage: engine_constraints.py AUTODDL_PLAN [CASES]"""
import json
import random
import subprocess
import sys

plan = sys.argv[1]
cases = int(sys.argv[2]) if len(sys.argv) > 2 else 24
seed = 52
rng = random.Random(seed)
meshes = ["2", "4", "6", "8", "2x2", "2x4", "4x2", "3x4", "2x2x2", "4x4"]


def broken_rules(f, devices, experts):
    tp, pp, cp = f["--tensor-model-parallel-size"], f["--pipeline-model-parallel-size"], f["--context-parallel-size"]
    layers, heads = f["--num-layers"], f["--num-attention-heads"]
    groups = f.get("--num-query-groups", heads)
    broken = []
    if devices % (tp * pp * cp):
        broken.append("1: tp x pp x cp does not divide the world")
    dp = devices // (tp * pp * cp)
    if heads % tp:
        broken.append("2: tp does not divide the heads")
    if groups % tp and tp % groups:
        broken.append("3: tp neither divides nor is a multiple of the query groups")
    if f.get("--sequence-parallel") and tp == 1:
        broken.append("4: sequence parallelism at tp = 1")
    first, last = f.get("--decoder-first-pipeline-num-layers"), f.get("--decoder-last-pipeline-num-layers")
    if first is not None and (pp < 2 or first < 1 or last < 1 or
                              (pp > 2 and (layers - first - last) % (pp - 2)) or (pp == 2 and first + last != layers)):
        broken.append("5: the first and last stages' layers leave the middle stages unequal")
    if first is None and layers % pp:
        broken.append("5: pp does not divide the layers")
    per_chunk = f.get("--num-layers-per-virtual-pipeline-stage")
    if per_chunk and (layers // pp) % per_chunk:
        broken.append("5: the virtual stage's layers do not divide a stage's")
    if f["--global-batch-size"] % (f["--micro-batch-size"] * dp):
        broken.append("6: the global batch is no whole number of micro-batches")
    if cp > 1 and f["--seq-length"] % (2 * cp):
        broken.append("7: the sequence is no multiple of 2 x cp")
    ep, etp = f.get("--expert-model-parallel-size", 1), f.get("--expert-tensor-parallel-size", 1)
    if experts and (experts % ep or (tp * cp * dp) % (ep * etp)):
        broken.append("8: ep does not divide the experts or ep x etp the tp x cp x dp ranks")
    return broken


failures, refused, planned = [], 0, 0
for k in range(cases):
    heads = rng.choice([2, 3, 4, 6, 8, 12])
    groups = rng.choice([g for g in (1, 2, 3, 4, 6, 8, 12) if heads % g == 0])
    experts = rng.choice([0, 0, 4, 6, 8])
    spec = (f"llama:layers={rng.choice([1, 2, 3, 4, 6, 8])},hidden={heads * 16},heads={heads},kv_heads={groups},"
            f"ffn={rng.choice([64, 96, 128])},seq={rng.choice([12, 16, 32, 48])},batch={rng.choice([3, 4, 8, 12, 16])},"
            f"vocab={rng.choice([96, 128, 250])}" + (f",experts={experts},topk=2" if experts else ""))
    mesh = rng.choice(meshes)
    devices = 1
    for a in mesh.split("x"):
        devices *= int(a)
    args = [plan, "--model", spec, "--mesh", mesh, "--hardware", "dgx-h100", "--engine", "megatron", "--emit", "megatron", "--json"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    where = f"seed {seed} case {k}: {spec} on {mesh}"
    if r.returncode == 2:
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        ok = len(lines) == 1 and r.stdout == ""
        print(("ok  " if ok else "FAIL") + f" {where}: refused: {r.stderr.strip()}")
        refused += 1
        if not ok:
            failures.append(where + ": a refusal that is not one sentence")
        continue
    if r.returncode != 0:
        failures.append(f"{where}: exit {r.returncode}: {r.stderr.strip()}")
        continue
    j = json.loads(r.stdout)
    broken = broken_rules(j["emit"]["settings"], devices, experts)
    planned += 1
    print(("ok  " if not broken and j.get("engine") == "megatron" else "FAIL") + f" {where}: {j['emit']['layout']}")
    if broken or j.get("engine") != "megatron":
        failures.append(f"{where}: {j['emit']['layout']} breaks Megatron-LM's rules {broken}")
print(f"{planned} planned, {refused} refused")
if planned == 0 or refused == 0:
    failures.append(f"seed {seed}: the cases should include both planned and refused pairs ({planned}, {refused})")


def torchtitan_broken(knobs, devices, heads, groups, seq):
    """torchtitan 0.3.0's rules (torchtitan/distributed/parallel_dims.py: the degrees multiply to the
    world; models/common/decoder.py: tp divides the heads and the key/value heads; trainer.py: the
    sequence a multiple of tp (sequence parallelism) x 2 cp) broken by a layout of --engine torchtitan.
    (A tied model, half the cases below, runs no pipeline: checked beside.)"""
    tp, pp, cp = int(knobs.get("tp", 1)), max(1, int(knobs.get("pp", 0))), max(1, int(knobs.get("cp", 0)))
    broken = []
    if devices % (tp * pp * cp):
        broken.append("the degrees do not multiply to the world")
    if heads % tp or groups % tp:
        broken.append("tp does not divide the heads and the key/value heads")
    if seq % ((tp if tp > 1 else 1) * (2 * cp if cp > 1 else 1)):
        broken.append("the sequence is no multiple of tp x 2 cp")
    if knobs.get("dopt") == "1" or knobs.get("ep", "1") != "1" or (tp > 1 and knobs.get("sp") != "1"):
        broken.append("a knob torchtitan lacks (the distributed optimizer, expert parallelism, tp without sp)")
    return broken


# --engine torchtitan on dense random pairs: the layout it plans keeps torchtitan's rules
titan_seed = 53
rng = random.Random(titan_seed)
titan_planned, titan_refused = 0, 0
for k in range(cases):
    heads = rng.choice([2, 3, 4, 6, 8, 12])
    groups = rng.choice([g for g in (1, 2, 3, 4, 6, 8, 12) if heads % g == 0])
    seq = rng.choice([12, 16, 32, 48])
    spec = (f"llama:layers={rng.choice([1, 2, 3, 4, 6, 8])},hidden={heads * 16},heads={heads},kv_heads={groups},"
            f"ffn={rng.choice([64, 96, 128])},seq={seq},batch={rng.choice([3, 4, 8, 12, 16])},vocab={rng.choice([96, 128, 250])}")
    tied = rng.random() < 0.5
    spec += ",tied=1" if tied else ""
    mesh = rng.choice(meshes)
    devices = 1
    for a in mesh.split("x"):
        devices *= int(a)
    r = subprocess.run([plan, "--model", spec, "--mesh", mesh, "--hardware", "dgx-h100", "--engine", "torchtitan", "--json"],
                       capture_output=True, text=True, timeout=300)
    where = f"seed {titan_seed} case {k}: {spec} on {mesh}"
    if r.returncode == 2 and len([l for l in r.stderr.splitlines() if l.strip()]) == 1 and r.stdout == "":
        titan_refused += 1
        print(f"ok   {where}: refused: {r.stderr.strip()}")
        continue
    if r.returncode != 0:
        failures.append(f"{where}: exit {r.returncode}: {r.stderr.strip()}")
        continue
    layout = json.loads(r.stdout)["strategy"]
    knobs = dict(kv.split("=") for kv in layout.split(":", 1)[1].split(",")) if ":" in layout else {}
    broken = torchtitan_broken(knobs, devices, heads, groups, seq)
    if tied and int(knobs.get("pp", 0)) > 1:
        broken.append("a pipeline with tied embeddings")
    titan_planned += 1
    print(("FAIL" if broken else "ok  ") + f" {where}: {layout}")
    if broken:
        failures.append(f"{where}: {layout} breaks torchtitan's rules {broken}")
print(f"torchtitan: {titan_planned} planned, {titan_refused} refused")
if titan_planned == 0:
    failures.append(f"seed {titan_seed}: no torchtitan case planned")
for f in failures:
    print("FAIL " + f)
sys.exit(1 if failures else 0)
