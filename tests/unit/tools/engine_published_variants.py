#!/usr/bin/env python3
"""`--engine megatron` against the layouts people publish, at the published runs and beyond them:
for each LLaMA-family and mixture-of-experts run with a published step time (published_runs.py,
docs/results.md's tables) and for the same model at half and twice the batch and at half and twice
the nodes (a one-node run: 2 and 4 nodes), the best Megatron-LM layout auto finds is no slower than
the published layout priced alike (same model, sequence, batch, mesh, dgx-h100, bf16), wherever
that layout splits the variant and fits its memory. NVIDIA's published Llama 3.1 70B layout with
selective recomputation (megatron:tp=4,pp=4,cp=2,vpp=5,mbs=1,sp=1,recompute=selective,dopt=1, its
recipe's setting) is priced at batch 512 on 8x8 beside them.
Every Megatron-LM plan runs the output layer as Megatron-LM does (Shoeybi et al. 2019, section 3:
the output embedding split over the vocabulary, and a cross-entropy fused with it so that only
per-token statistics are reduced): lm_head's weight split on its output (vocabulary) dimension
where it is split at all, never on its input, its logits never partial sums (P), and the loss
reading the logits in the layout lm_head writes them (no boxing over the vocabulary between them).

Usage: engine_published_variants.py AUTODDL_PLAN"""
import concurrent.futures
import json
import re
import subprocess
import sys

from published_runs import moe_runs, runs

plan = sys.argv[1]
nvidia_70b_selective = ("Llama 3.1 70B, NVIDIA's layout with selective recomputation", "llama:size=llama3-70b", 8192, 512,
                        "8x8", "megatron:tp=4,pp=4,cp=2,vpp=5,mbs=1,sp=1,recompute=selective,dopt=1")


def priced(model, seq, batch, mesh, strategy=None, engine=None):
    """The JSON of one plan, or the one-line reason autoddl-plan refuses it."""
    args = [plan, "--model", model, "--seq", str(seq), "--batch", str(batch), "--mesh", mesh, "--hardware", "dgx-h100",
            "--dtype", "bf16", "--json", "--allow-over-limit"]
    args += ["--strategy", strategy] if strategy else ["--engine", engine]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    return json.loads(r.stdout) if r.returncode == 0 else r.stderr.strip()


def variants(seq, batch, mesh):
    """(batch, mesh) of the run and its variants: half and twice the batch, half and twice the nodes."""
    dims = mesh.split("x")
    nodes, per_node = (1, dims[0]) if len(dims) == 1 else (int(dims[0]), "x".join(dims[1:]))
    out = [(batch, mesh), (batch // 2, mesh), (batch * 2, mesh)]
    for n in ([2, 4] if nodes == 1 else [nodes // 2, nodes * 2]):
        out.append((batch, f"{n}x{per_node}"))
    return out


def output_layer_breaches(j):
    """What in plan j's output layer and loss is not Megatron-LM's column-parallel, vocabulary-parallel form."""
    head = next((l["signature"] for l in j["layers"] if l["name"] == "lm_head"), None)
    loss = next((l["signature"] for l in j["layers"] if l["op"] == "cross_entropy"), None)
    if head is None or loss is None:
        return ["the plan has no lm_head and loss to check"]
    m = re.match(r"X(\[[^\]]*\]) W(\[[^\]]*\]) -> Y(\[[^\]]*\])", head)
    w, y = m.group(2)[1:-1].split(","), m.group(3)
    broken = []
    if any(a == "S(0)" for a in w):
        broken.append(f"lm_head's weight is split on its input dimension: {head.split(' |')[0]}")
    if "P" in y:
        broken.append(f"lm_head's logits are partial sums: {head.split(' |')[0]}")
    if not loss.startswith("logits" + y):
        broken.append(f"the loss reads the logits in another layout than lm_head writes ({loss} after Y{y})")
    return broken


def compare(check):
    """The lines one check prints, its failures, and whether it was compared (None: skipped)."""
    name, model, seq, batch, mesh, strategy = check
    where = f"{name} at batch {batch} on {mesh}"
    p = priced(model, seq, batch, mesh, strategy=strategy)
    if isinstance(p, str) or not p["feasible"]:
        why = "does not fit" if not isinstance(p, str) else "is refused: " + p
        return [f"--   {where}: the published layout {strategy} {why}"], [], None
    e = priced(model, seq, batch, mesh, engine="megatron")
    if isinstance(e, str):
        return [], [f"{where}: --engine megatron refuses a model the published layout splits: {e}"], False
    slower = e["predicted_step_s"] > p["predicted_step_s"] * (1 + 1e-9)
    lines = [f"{'FAIL' if slower else 'ok  '} {where}: --engine megatron {e['strategy']} {e['predicted_step_s']:.3f} s, "
             f"published {strategy} {p['predicted_step_s']:.3f} s"]
    failed = []
    if slower:
        failed.append(f"{where}: --engine megatron ({e['predicted_step_s']:.3f} s) is slower than the published layout "
                      f"({p['predicted_step_s']:.3f} s)")
    for plan_json, whose in ((e, "--engine megatron's plan"), (p, "the published layout")):
        failed += [f"{where}: {whose}: {b}" for b in output_layer_breaches(plan_json)]
    return lines, failed, True


failures, compared, skipped = [], 0, 0
checks = [(name, model, seq, b, m, strategy) for name, model, seq, batch, mesh, strategy, *_ in runs + moe_runs
          for b, m in variants(seq, batch, mesh)] + [nvidia_70b_selective]
# two plans at a time (each planning run is one process on one core), printed in the checks' order
with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    for lines, failed, was_compared in pool.map(compare, checks):
        if lines:
            print("\n".join(lines), flush=True)
        failures += failed
        if was_compared is None:
            skipped += 1
        elif was_compared:
            compared += 1
print(f"{compared} compared, {skipped} where the published layout does not split or fit the variant")
for f in failures:
    print("FAIL " + f)
sys.exit(1 if failures or compared == 0 else 0)
