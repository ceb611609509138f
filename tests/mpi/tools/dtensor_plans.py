#!/usr/bin/env python3
"""autoddl's plans run on PyTorch DTensor: the same losses as autoddl-train.

Usage: dtensor_plans.py MPIRUN AUTODDL_TRAIN AUTODDL_PLAN SOURCE_ROOT

A tiny LLaMA (transformers' LlamaForCausalLM built from a config.json written here, random weights
saved as safetensors) is planned by autoddl-plan under dp, fsdp (ZeRO-3), Megatron tp=2 with
sequence parallelism and auto, on 2 ranks (mesh 2) and 4 ranks (mesh 2x2, and ZeRO-2 there, whose
optimizer updates a slice of each replicated parameter): --out writes the plan
file autoddl-train --plan runs on as many MPI ranks, --emit dtensor the placements
tools/dtensor_runner.py trains transformers' model with on as many gloo ranks (boxing the plan's
activations where transformers' modules produce them). Both start from the
same weights, read the same --data windows and take 5 Adam steps (lr 3e-3): every loss agrees
within 1e-5 (the largest difference is printed). The placements are also checked against what a
reader of Megatron-LM expects of torch's [out, in] weights: q/k/v, gate and up proj split on dim 0
(column parallel), o and down proj on dim 1 (row parallel); fsdp stores every matrix sharded on
every mesh dimension; and --check of the plan file emits the same placements. A tiny Mistral with a
tied head (lm_head reads the embedding's table) trains alike under tp=2 x dp=2 on 4 ranks.
Python with torch and transformers: SOURCE_ROOT/.venv/bin/python (scripts/setup-python); without
it the test exits 77 (skipped), saying why.
"""
import json
import os
import subprocess
import sys
import tempfile

from torch_venv import torch_or_skip

mpirun, train, plan_tool, root = sys.argv[1:5]
SEQ, BATCH, STEPS = 16, 4, 5
failures = []


def check(what, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else ": " + detail))
    if not ok:
        failures.append(what)


def write_model(folder, **extra):
    """A tiny LLaMA in transformers (`extra` changes its config), random weights (norm scales near 1), saved under `folder`."""
    import torch
    import transformers
    os.makedirs(folder, exist_ok=True)
    cfg = dict(model_type="llama", hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, vocab_size=256, rms_norm_eps=1e-6, rope_theta=10000.0, max_position_embeddings=64,
               tie_word_embeddings=False, torch_dtype="float32")
    cfg.update(extra)
    json.dump(cfg, open(os.path.join(folder, "config.json"), "w"))
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(folder))
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2 + (1.0 if "norm" in name else 0.0))
    model.save_pretrained(folder)
    return os.path.join(folder, "model.safetensors")


def plan(tmp, folder, mesh, strategy):
    """autoddl-plan's plan file and DTensor placements of `strategy` on `mesh` for folder's model: their paths, or None."""
    spec = f"hf:{folder}/config.json:seq={SEQ},batch={BATCH}"
    tag = f"{os.path.basename(folder)}-{mesh}-{strategy}".replace(":", "_").replace(",", "_").replace("=", "")
    out, dt = os.path.join(tmp, tag + ".plan.json"), os.path.join(tmp, tag + ".dtensor.json")
    r = subprocess.run([plan_tool, "--model", spec, "--mesh", mesh, "--strategy", strategy, "--out", out, "--emit", "dtensor"],
                       capture_output=True, text=True, timeout=120)
    check(f"autoddl-plan --emit dtensor of {os.path.basename(folder)}, {strategy} on mesh {mesh}", r.returncode == 0, r.stderr.strip()[:300])
    if r.returncode != 0:
        return None
    open(dt, "w").write(r.stdout)
    return out, dt


def autoddl_losses(np, plan_file, weights, data_path):
    cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(np), os.path.abspath(train), "--log-every", "0",
           "--plan", plan_file, "--data", data_path, "--init-from", weights, "--steps", str(STEPS), "--optimizer", "adam",
           "--lr", "3e-3", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return (json.loads(r.stdout)["losses"], "") if r.returncode == 0 else (None, r.stderr.strip()[:300])


def runner_losses(data_path, dtensor_files):
    """DTensor's runs of the plans, each of its own model (the folder of its hf: config, and model.safetensors there)."""
    cmd = [sys.executable, os.path.join(root, "tools", "dtensor_runner.py"), "--placements", *dtensor_files, "--data", data_path, "--steps", str(STEPS), "--optimizer", "adam", "--lr", "3e-3",
           "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    if r.returncode != 0:
        return None, r.stderr.strip()[-600:]
    return {run["placements"]: run for run in json.loads(r.stdout.strip().splitlines()[-1])["runs"]}, ""


def megatron_splits(dt, axis):
    """Whether each tensor-parallel matrix is split on the torch dim Megatron-LM splits it on (axis: the tp one)."""
    wrong = []
    for p in dt["params"]:
        name = p["hf_name"] or ""
        want = 0 if any(k in name for k in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")) else \
            1 if any(k in name for k in ("o_proj", "down_proj")) else None
        if want is not None and p["storage"]["placements"][axis] != f"Shard({want})":
            wrong.append(f"{name}: {p['storage']['placements']}")
    return wrong


# The tiny LLaMA's parameters: embedding and head 256 x 32 each, the final norm 32; per layer q and o
# 32 x 32, k and v 32 x 16, gate, up and down 32 x 48, two norms of 32.
NORMS = 32 + 2 * 2 * 32
MATRICES = 2 * 256 * 32 + 2 * (2 * 32 * 32 + 2 * 32 * 16 + 3 * 32 * 48)


def stored_elements(what, strategy, np, run):
    """The parameter elements each rank's DTensors hold, and its optimizer's copies, against the
    strategy's closed form: dp replicates all, fsdp shards all over every rank, ZeRO 2 stores all and
    updates a slice of each, Megatron tp=2 halves every matrix."""
    whole = MATRICES + NORMS
    want = {"dp": (whole, whole), "fsdp": (whole // np,) * 2, "zero:stage=2": (whole, whole // np)}.get(strategy)
    if strategy.startswith("megatron:tp=2"):
        want = (MATRICES // 2 + NORMS,) * 2
    if want is None:
        print(f"     {what}: each rank stores {run['stored_elements']} parameter elements of {whole}, updates "
              f"{run['updated_elements']}")
        return
    got = (run["stored_elements"], run["updated_elements"])
    check(f"{what}: each rank stores {want[0]} parameter elements and updates {want[1]}", got == ([want[0]] * np, [want[1]] * np),
          str(got))


def placement_checks(tmp, files):
    llama = os.path.join(tmp, "llama")
    tp = json.load(open(files[(llama, "2x2", "megatron:tp=2,dp=2,sp=1")][1]))
    wrong = megatron_splits(tp, 1)
    check("tp: q/k/v, gate and up proj are Shard(0) of torch's [out, in] weight, o and down proj Shard(1)", not wrong,
          "; ".join(wrong[:3]))
    fsdp = json.load(open(files[(llama, "2x2", "fsdp")][1]))
    whole = [p["hf_name"] for p in fsdp["params"] if len(p["shape"]) == 2 and
             not all(x.startswith("Shard(") for x in p["storage"]["placements"])]
    check("fsdp: every matrix is stored sharded on both mesh dimensions", not whole, str(whole[:3]))
    plan_file, dt = files[(llama, "2x2", "auto")]
    r = subprocess.run([plan_tool, "--check", plan_file, "--emit", "dtensor"], capture_output=True, text=True, timeout=120)
    same = r.returncode == 0 and json.loads(r.stdout)["params"] == json.load(open(dt))["params"]
    check("--check of the auto plan's file emits the same parameter placements", same, r.stderr.strip()[:300])


def compare(np, mine, files, data_path):
    """Trains plans `mine` ((model folder, mesh, strategy) keys of files, each of its folder's model.safetensors)
    under autoddl-train and DTensor on np ranks; checks their losses (and, for the llama, the closed forms of
    what each rank holds). Returns the largest difference and where."""
    worst = (0.0, "")
    got, err = runner_losses(data_path, [files[k][1] for k in mine])
    check(f"dtensor_runner trains {len(mine)} plans on {np} gloo ranks", got is not None, err)
    for folder, mesh, s in mine:
        weights = os.path.join(folder, "model.safetensors")
        want, err = autoddl_losses(np, files[(folder, mesh, s)][0], weights, data_path)
        what = f"{os.path.basename(folder)}, {s} on {np} ranks (mesh {mesh})"
        if want is None or got is None:
            check(what + ": both run", False, err)
            continue
        run = got[files[(folder, mesh, s)][1]]
        print(f"     {what}: DTensor boxed {run['activations_boxed']} of the {run['activations_in_file']} boxed activations the plan lists")
        if s.startswith("megatron"):  # o_proj's and down_proj's partial sums into the residual, at least
            check(what + ": DTensor boxes the partial sums of o_proj and down_proj", run["activations_boxed"] >= 4,
                  str(run["activations_boxed"]))
        if os.path.basename(folder) == "llama":
            stored_elements(what, s, np, run)
        diff = max(abs(a - b) for a, b in zip(want, run["losses"]))
        worst = max(worst, (diff, what))
        print(f"     {what}: autoddl-train {', '.join(f'{x:.6f}' for x in want)}; DTensor largest difference {diff:.1e}")
        check(what + f": {STEPS} losses equal autoddl-train's within 1e-5", len(run["losses"]) == STEPS and diff <= 1e-5,
              f"{diff:.2e}")
    return worst


def main():
    torch_or_skip(root)
    import torch
    worst = (0.0, "")
    with tempfile.TemporaryDirectory() as tmp:
        llama, mistral = os.path.join(tmp, "llama"), os.path.join(tmp, "mistral")
        write_model(llama)
        write_model(mistral, model_type="mistral", sliding_window=None, tie_word_embeddings=True)  # lm_head reads the embedding's table
        cases = [(2, llama, "2", s) for s in ("dp", "fsdp", "megatron:tp=2,sp=1", "auto")] + \
                [(4, llama, "2x2", s) for s in ("dp", "fsdp", "zero:stage=2", "megatron:tp=2,dp=2,sp=1", "auto")] + \
                [(4, mistral, "2x2", "megatron:tp=2,dp=2")]
        data_path = os.path.join(tmp, "data.bin")
        open(data_path, "wb").write(bytes(torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(1)).tolist()))
        files = {(f, mesh, s): plan(tmp, f, mesh, s) for _, f, mesh, s in cases}
        for np in (2, 4):
            worst = max(worst, compare(np, [(f, m, s) for n, f, m, s in cases if n == np and files[(f, m, s)]], files, data_path))
        if all(files.values()):
            placement_checks(tmp, files)
    print(f"     largest loss difference {worst[0]:.1e} ({worst[1]})")
    print(f"{len(failures)} failed" if failures else "all passed")
    sys.exit(1 if failures else 0)


main()
