#!/usr/bin/env python3
"""autoddl-train --dtype bf16 and fp16, as a user meets them (2 ranks, a tiny LLaMA).

- bf16 with bf16 gradient sums under megatron tp=2 sends exactly half the bytes the fp32 run
  sends (the oracle: the fp32 run's measured bytes), but for the vocabulary-parallel loss's
  statistics, which stay fp32 in both: three ring all-reduces (row maxima, sums of exponentials,
  target logits) of one float per row over the 2 devices; equal to the plan's prediction, and
  --check-serial compares against serial bf16 training.
- With fp32 gradient sums (the default) the gradient collectives move fp32: under dp, whose only
  collectives are the gradient all-reduces, a bf16 run sends what the fp32 run sends, and with
  bf16 sums half of it; each as predicted.
- A bf16 checkpoint keeps the fp32 master weights: resuming from it (the master restored itself,
  not rebuilt from the bf16 values) gives the uninterrupted run's losses bit for bit.
- --grad-sums bf16 keeps the gradient sums in bf16, at the predicted (smaller) peak.
- fp16 reports its loss scale after every step and the steps it skipped.
- A plan file priced in bf16 trains in bf16, its gradient sums in the type it was priced with;
  --dtype fp32 or another --grad-sums with it is refused in one sentence.
"""
import json
import os
import subprocess
import sys
import tempfile

from mpi_cli import cli_test

mpirun, train, planner = sys.argv[1], sys.argv[2], sys.argv[3]
llama = "llama:layers=2,hidden=32,heads=4,kv_heads=2,ffn=48,seq=16,batch=8,vocab=64"
t = cli_test(mpirun, train)
run, check, failures = t.run, t.check, t.failures


def trained(*args, strategy="megatron:tp=2"):
    r = run(2, "--model", llama, "--mesh", "2", "--strategy", strategy, "--log-every", "0", "--json", *args)
    check("autoddl-train " + " ".join(args), r.returncode == 0, r.stderr[-1500:])
    return json.loads(r.stdout) if r.returncode == 0 else None


def sent(run):
    return run["bytes_sent_per_device"], run["predicted_bytes_per_device"]


fp32 = trained("--steps", "2")
bf16 = trained("--steps", "4", "--dtype", "bf16", "--check-serial")
bf16_narrow = trained("--steps", "2", "--dtype", "bf16", "--grad-sums", "bf16")
if fp32 and bf16 and bf16_narrow:
    check("bf16: the dtype reported", bf16["dtype"] == "bf16" and fp32["dtype"] == "fp32")
    rows, devices = 8 * 16, 2  # batch x seq; a ring all-reduce sends 2 (p - 1) / p of its bytes
    fp32_statistics = 3 * rows * 4 * 2 * (devices - 1) // devices
    check("bf16 with bf16 sums: half the bytes of fp32 (the loss statistics aside), as predicted",
          2 * bf16_narrow["bytes_sent_per_device"] - fp32_statistics == fp32["bytes_sent_per_device"] and
          bf16_narrow["bytes_sent_per_device"] == bf16_narrow["predicted_bytes_per_device"],
          f'{sent(bf16_narrow)} vs {fp32["bytes_sent_per_device"]}')
    check("bf16 with fp32 sums: the bytes predicted", bf16["bytes_sent_per_device"] == bf16["predicted_bytes_per_device"],
          str(sent(bf16)))
dp = [trained("--steps", "1", *a, strategy="dp") for a in ((), ("--dtype", "bf16"), ("--dtype", "bf16", "--grad-sums", "bf16"))]
if all(dp):
    check("dp in bf16: fp32 sums send what fp32 training sends, bf16 sums half, as predicted",
          sent(dp[1]) == sent(dp[0]) and 2 * dp[2]["bytes_sent_per_device"] == dp[0]["bytes_sent_per_device"] > 0 and
          dp[2]["bytes_sent_per_device"] == dp[2]["predicted_bytes_per_device"], str([sent(r) for r in dp]))
    # serial bf16 training rounds where the plan's does not (see the mixed precision tests): the
    # loss within 2 bf16 roundings (2 x 2^-8)
    errs = bf16["rel_err_vs_serial"]
    check("bf16: --check-serial within bf16 round-off of serial bf16", errs["loss_all_steps"] <= 2 ** -7, str(errs))
    check("bf16: the loss follows fp32's within 2%",
          all(abs(a - b) <= 0.02 * b for a, b in zip(bf16["losses"], fp32["losses"])), f'{bf16["losses"]} {fp32["losses"]}')

with tempfile.TemporaryDirectory() as tmp:
    whole = trained("--steps", "6", "--dtype", "bf16")
    first = trained("--steps", "3", "--dtype", "bf16", "--checkpoint-dir", tmp)
    folder = os.path.join(tmp, sorted(os.listdir(tmp))[-1])
    manifest = json.load(open(os.path.join(folder, "manifest.json")))
    tensors = {s["tensor"] for rf in manifest["ranks"] for s in rf["shards"]}
    check("bf16 checkpoint: dtype bf16, with fp32 master weights", manifest["dtype"] == "bf16" and "master" in tensors,
          f'{manifest["dtype"]} {sorted(tensors)}')
    resumed = trained("--steps", "6", "--dtype", "bf16", "--resume", tmp)
    if whole and resumed:
        check("bf16 resume: the uninterrupted run's losses bit for bit", resumed["losses"] == whole["losses"][3:],
              f'{resumed["losses"]} vs {whole["losses"][3:]}')
    r = run(2, "--model", llama, "--mesh", "2", "--strategy", "megatron:tp=2", "--steps", "8", "--resume", tmp)
    check("a bf16 checkpoint resumed in fp32: refused, naming the dtype",
          r.returncode == 2 and "resume with --dtype bf16" in r.stderr, r.stderr[-600:])

# --grad-sums bf16: the gradient sums kept in bf16 (two micro-batches, so that they add in bf16);
# the run's peak is the one predicted for bf16 sums, below the fp32-sum run's, and --check-serial
# compares with serial training that keeps its sums in bf16 too
sums = {k: trained("--steps", "3", "--dtype", "bf16", "--microbatches", "2", "--check-serial", "--grad-sums", k)
        for k in ("fp32", "bf16")}
if sums["fp32"] and sums["bf16"]:
    b16, f32 = sums["bf16"], sums["fp32"]
    check("--grad-sums bf16: the measured peak is the predicted one",
          b16["peak_bytes_per_device"] == b16["predicted_peak_bytes_per_device"], str(b16["peak_bytes_per_device"]))
    check("--grad-sums bf16: a smaller peak than fp32 sums, by the predicted difference",
          f32["peak_bytes_per_device"] - b16["peak_bytes_per_device"] ==
          f32["predicted_peak_bytes_per_device"] - b16["predicted_peak_bytes_per_device"] > 0,
          f'{b16["peak_bytes_per_device"]} vs {f32["peak_bytes_per_device"]}')
    check("--grad-sums bf16: --check-serial within bf16 round-off of serial bf16",
          b16["rel_err_vs_serial"]["loss_all_steps"] <= 2 ** -7, str(b16["rel_err_vs_serial"]))
    check("--grad-sums bf16: the loss follows fp32 sums' within 2%",
          all(abs(a - b) <= 0.02 * b for a, b in zip(b16["losses"], f32["losses"])), f'{b16["losses"]} {f32["losses"]}')
r = run(2, "--model", llama, "--mesh", "2", "--steps", "1", "--dtype", "fp32", "--grad-sums", "bf16")
check("--grad-sums bf16 with --dtype fp32: refused in one sentence",
      r.returncode == 2 and "--grad-sums takes fp32 with --dtype fp32" in r.stderr, r.stderr[-600:])

fp16 = trained("--steps", "3", "--dtype", "fp16")
if fp16:
    check("fp16: the loss scale after every step, and the steps skipped",
          fp16["loss_scale"] == [32768, 32768, 32768] and fp16["skipped_steps"] == 0, str(fp16.get("loss_scale")))

with tempfile.TemporaryDirectory() as tmp:
    pf = os.path.join(tmp, "plan.json")
    r = subprocess.run([planner, "--model", llama, "--mesh", "2", "--hardware", "cpu-local", "--dtype", "bf16",
                        "--out", pf], capture_output=True, text=True, timeout=120)
    check("autoddl-plan --dtype bf16 --out writes a plan", r.returncode == 0, r.stderr[-800:])
    plan = json.load(open(pf))
    r = run(2, "--plan", pf, "--steps", "2", "--json", "--log-every", "0")
    check("a bf16 plan file trains in bf16", r.returncode == 0 and json.loads(r.stdout)["dtype"] == "bf16" and
          json.loads(r.stdout)["bytes_sent_per_device"] == plan["predicted"]["comm_bytes_per_device"], r.stderr[-800:])
    r = run(2, "--plan", pf, "--steps", "2", "--dtype", "fp32")
    check("a bf16 plan file with --dtype fp32: refused in one sentence",
          r.returncode == 2 and "was priced in bf16; drop --dtype fp32" in r.stderr, r.stderr[-600:])
    r = run(2, "--plan", pf, "--steps", "2", "--grad-sums", "fp32")
    check("a plan file priced with bf16 gradient sums (autoddl-plan's default) with --grad-sums fp32: refused",
          plan.get("grad_sums") == "bf16" and r.returncode == 2 and
          "was priced with bf16 gradient sums; drop --grad-sums fp32" in r.stderr, r.stderr[-600:])

print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
