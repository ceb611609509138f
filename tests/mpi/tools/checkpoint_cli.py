#!/usr/bin/env python3
"""Checkpoints and failures of autoddl-train, as a user meets them.

- Resume on the same plan and mesh: the losses of the resumed steps and the final checkpoint's
  shard files are bit for bit those of the uninterrupted run.
- Resume under another strategy, and 4 -> 2 and 2 -> 4 ranks: losses and final parameters within
  1e-5 of the uninterrupted run (parameters read back from the checkpoints, whatever their layouts).
- A truncated shard, a missing shard, a manifest of another model: one sentence naming the file,
  exit 2, the checkpoint folder left as it was.
- A rank killed from outside (SIGKILL): the job ends within 30 s, naming the rank.
"""
import array
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys

from mpi_cli import cli_test
import tempfile
import time

mpirun, train = sys.argv[1], sys.argv[2]
gpt = "gpt:layers=2,hidden=32,heads=4,seq=16,batch=8,vocab=64"


t = cli_test(mpirun, train)
run, check, failures, base = t.run, t.check, t.failures, t.base


def trained(np, mesh, *args):
    r = run(np, "--model", gpt, "--mesh", mesh, "--optimizer", "sgd", "--json", *args)
    if r.returncode != 0:
        return None, r
    return json.loads(r.stdout), r


def global_tensors(folder):
    """Every parameter's global value, assembled from a checkpoint's blocks (the oracle: the
    manifest's offsets and shapes, read independently of the C++ reader)."""
    m = json.load(open(os.path.join(folder, "manifest.json")))
    out = {}
    for p, info in enumerate(m["params"]):
        shape = info["shape"]
        n = 1
        for d in shape:
            n *= d
        out[info["name"]] = [None] * n
    for rf in m["ranks"]:
        data = open(os.path.join(folder, rf["file"]), "rb").read()
        for s in rf["shards"]:
            if s["tensor"] != "param":
                continue
            vals = array.array("f")
            vals.frombytes(data[s["byte_offset"]:s["byte_offset"] + s["bytes"]])
            name = m["params"][s["param"]]["name"]
            gshape, off, lshape = m["params"][s["param"]]["shape"], s["offset"], s["shape"]
            for i, v in enumerate(vals):  # local row-major index -> global index
                rem, g, stride = i, 0, 1
                idx = []
                for d in reversed(range(len(lshape))):
                    idx.append(rem % lshape[d] + off[d])
                    rem //= lshape[d]
                idx.reverse()
                for d in range(len(gshape)):
                    g = g * gshape[d] + idx[d]
                out[name][g] = v
    return out


def max_rel_diff(a, b):
    worst = 0.0
    scale = max(abs(x) for t in b.values() for x in t)
    for name in b:
        for x, y in zip(a[name], b[name]):
            worst = max(worst, abs(x - y) / max(abs(y), 1e-3 * scale))
    return worst


def digest(folder):
    h = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            h[name] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    return h


def flip_byte(path):
    with open(path, "r+b") as f:
        f.seek(40)
        b = f.read(1)
        f.seek(40)
        f.write(bytes([b[0] ^ 0xFF]))


def set_pick(path, node, value):
    m = json.load(open(path))
    m["plan"]["pick"][node] = value
    json.dump(m, open(path, "w"))


def other_model(path):
    m = json.load(open(path))
    m["model"] = gpt.replace("layers=2", "layers=3")
    json.dump(m, open(path, "w"))


work = tempfile.mkdtemp(prefix="autoddl-ckpt-")
try:
    whole_dir, half_dir = os.path.join(work, "whole"), os.path.join(work, "half")
    # the uninterrupted run: 4 steps on 2x2, a checkpoint every 2 steps
    whole, r = trained(4, "2x2", "--steps", "4", "--checkpoint-dir", whole_dir, "--checkpoint-every", "2")
    check("an uninterrupted 4-step run writes checkpoints", whole is not None and len(whole["checkpoints"]) == 2,
          r.stderr[-1500:])
    # --keep-last 2: of a checkpoint after every step, the newest two stay; the run resumes from them
    kept_dir = os.path.join(work, "kept")
    kept, r = trained(2, "2", "--steps", "5", "--checkpoint-dir", kept_dir, "--checkpoint-every", "1", "--keep-last", "2")
    left = sorted(os.listdir(kept_dir)) if os.path.isdir(kept_dir) else []
    check("--keep-last 2 keeps the newest two of five checkpoints", kept is not None and
          left == ["step-00000004", "step-00000005"], r.stderr[-800:] + str(left))
    again, r = trained(2, "2", "--steps", "6", "--resume", kept_dir, "--checkpoint-dir", kept_dir, "--keep-last", "2")
    left = sorted(os.listdir(kept_dir)) if os.path.isdir(kept_dir) else []
    check("resuming from a --keep-last folder continues, the newest two still kept",
          again is not None and again["first_step"] == 5 and left == ["step-00000005", "step-00000006"],
          r.stderr[-800:] + str(left))
    r = run(2, "--model", gpt, "--mesh", "2", "--steps", "1", "--keep-last", "2")
    check("--keep-last without --checkpoint-dir: exit 2, one sentence",
          r.returncode == 2 and "--keep-last needs --checkpoint-dir" in r.stderr, r.stderr[-500:])
    # interrupted after 2 steps, then resumed on the same plan and mesh
    half, r = trained(4, "2x2", "--steps", "2", "--checkpoint-dir", half_dir)
    check("a 2-step run writes its checkpoint", half is not None and half["checkpoints"], r.stderr[-1500:])
    same_dir = os.path.join(work, "same")
    resumed, r = trained(4, "2x2", "--steps", "4", "--resume", half_dir, "--checkpoint-dir", same_dir)
    check("resuming on the same plan and mesh succeeds", resumed is not None, r.stderr[-1500:])
    if whole and resumed:
        check("the resumed run reports first_step 2 and 2 losses",
              resumed["first_step"] == 2 and len(resumed["losses"]) == 2, str(resumed.get("first_step")))
        check("same plan and mesh: the resumed losses are bit for bit the uninterrupted ones",
              resumed["losses"] == whole["losses"][2:], f'{resumed["losses"]} vs {whole["losses"][2:]}')
        # the model and plan from the checkpoint: no --model (nor --mesh, --optimizer) resumes the
        # same run bit for bit; the model's keys in another order name the same model
        r = run(4, "--resume", half_dir, "--steps", "4", "--json")
        bare = json.loads(r.stdout) if r.returncode == 0 else {}
        check("--resume without --model takes the checkpoint's model, mesh, plan and optimizer, bit for bit",
              bare.get("losses") == whole["losses"][2:] and bare.get("optimizer") == "sgd-momentum", r.stderr[-800:])
        reordered = "gpt:vocab=64,batch=8,seq=16,heads=4,hidden=32,layers=2"
        r = run(4, "--model", reordered, "--mesh", "2x2", "--optimizer", "sgd", "--resume", half_dir, "--steps", "4", "--json")
        check("a model spec with its keys in another order resumes (models compared by meaning)",
              r.returncode == 0 and json.loads(r.stdout)["losses"] == whole["losses"][2:], r.stderr[-800:])
        check("no micro-batch change, no dropout warning", "dropout masks" not in r.stderr, r.stderr[-500:])
        r = run(4, "--model", gpt, "--mesh", "2x2", "--optimizer", "sgd", "--resume", half_dir, "--steps", "3",
                "--microbatches", "2")
        check("a resume onto another micro-batch count of a model with dropout says so in one line",
              r.returncode == 0 and r.stderr.count("dropout masks are drawn per micro-batch") == 1 and
              "resuming with 2 micro-batches where" in r.stderr, r.stderr[-800:])
        a, b = digest(os.path.join(same_dir, "step-00000004")), digest(os.path.join(whole_dir, "step-00000004"))
        a.pop("manifest.json", None)
        b.pop("manifest.json", None)
        check("same plan and mesh: the final shard files are bit for bit the uninterrupted ones", a == b and len(a) == 4)
        final = global_tensors(os.path.join(whole_dir, "step-00000004"))

        # another strategy, and other rank counts: resharded, equal within 1e-5
        for np, mesh, strategy, what in [(4, "2x2", "megatron", "another strategy (megatron on 2x2)"),
                                         (2, "2", "auto", "4 -> 2 ranks"),
                                         (4, "4", "zero", "another mesh (4, zero)"),
                                         (2, "2", "zero:stage=2", "ZeRO-2 on 2 ranks (optimizer state in slices)"),
                                         (4, "2x2", "megatron:tp=2,pp=2", "into a pipeline (2 stages of 2)")]:
            out = os.path.join(work, "re-" + mesh + strategy)
            # (a pipeline keeps the uninterrupted run's micro-batches: dropout masks are keyed by micro-batch)
            same_m = ["--microbatches", str(whole["microbatches"])] if "pp=" in strategy else []
            j, r = trained(np, mesh, "--strategy", strategy, "--steps", "4", "--resume", half_dir, "--checkpoint-dir", out,
                           *same_m)
            check(what + ": resuming succeeds", j is not None, r.stderr[-1500:])
            if j:
                loss_err = max(abs(x - y) / abs(y) for x, y in zip(j["losses"], whole["losses"][2:]))
                param_err = max_rel_diff(global_tensors(os.path.join(out, "step-00000004")), final)
                print(f"     {what}: max rel diff losses {loss_err:.2e}, parameters {param_err:.2e}")
                check(what + ": losses within 1e-5 of the uninterrupted run", loss_err <= 1e-5, f"{loss_err:.2e}")
                check(what + ": final parameters within 1e-5", param_err <= 1e-5, f"{param_err:.2e}")
        # 2 -> 4 ranks: a checkpoint written on 2 ranks, resumed on 2x2
        two_dir = os.path.join(work, "two")
        j2, r = trained(2, "2", "--steps", "2", "--checkpoint-dir", two_dir)
        j4, r = trained(4, "2x2", "--steps", "4", "--resume", two_dir, "--checkpoint-dir", os.path.join(work, "four"))
        check("2 -> 4 ranks: resuming succeeds", j2 is not None and j4 is not None, r.stderr[-1500:])
        if j2 and j4:
            loss_err = max(abs(x - y) / abs(y) for x, y in zip(j2["losses"] + j4["losses"], whole["losses"]))
            param_err = max_rel_diff(global_tensors(os.path.join(work, "four", "step-00000004")), final)
            print(f"     2 -> 4 ranks: max rel diff losses {loss_err:.2e}, parameters {param_err:.2e}")
            check("2 -> 4 ranks: losses and parameters within 1e-5", loss_err <= 1e-5 and param_err <= 1e-5,
                  f"{loss_err:.2e}, {param_err:.2e}")

        # a pipeline's checkpoint (each stage saves what it owns) resumes without a pipeline
        pipe_dir = os.path.join(work, "pipe")
        jp, r = trained(4, "2x2", "--strategy", "megatron:tp=2,pp=2", "--steps", "2", "--checkpoint-dir", pipe_dir,
                        "--microbatches", str(whole["microbatches"]))
        check("a pipeline run writes its checkpoint", jp is not None and jp["checkpoints"], r.stderr[-1500:])
        if jp:
            m = json.load(open(os.path.join(pipe_dir, "step-00000002", "manifest.json")))["plan"]
            check("the pipeline's manifest carries its stages, stage mesh and cuts",
                  m["stages"] == 2 and m["stage_mesh"] == "2" and len(m["cuts"]) == 2 and m["mesh"] == "2x2", str(m)[:400])
            jf, r = trained(2, "2", "--steps", "4", "--resume", pipe_dir, "--checkpoint-dir", os.path.join(work, "after-pipe"))
            check("pipeline -> 2 ranks without one: resuming succeeds", jf is not None, r.stderr[-1500:])
            if jf:
                loss_err = max(abs(x - y) / abs(y) for x, y in zip(jp["losses"] + jf["losses"], whole["losses"]))
                param_err = max_rel_diff(global_tensors(os.path.join(work, "after-pipe", "step-00000004")), final)
                print(f"     pipeline -> 2 ranks: max rel diff losses {loss_err:.2e}, parameters {param_err:.2e}")
                check("pipeline -> 2 ranks: losses and parameters within 1e-5", loss_err <= 1e-5 and param_err <= 1e-5,
                      f"{loss_err:.2e}, {param_err:.2e}")

    # a crash while writing step 3 left a folder without a manifest: resuming skips it
    crashed = os.path.join(work, "crashed")
    shutil.copytree(half_dir, crashed)
    os.makedirs(os.path.join(crashed, "step-00000003"))
    open(os.path.join(crashed, "step-00000003", "rank-00000.bin.tmp"), "wb").write(b"partial")
    j, r = trained(4, "2x2", "--steps", "3", "--resume", crashed)
    check("a checkpoint folder without a manifest (a crash mid-write) is skipped",
          j is not None and j["first_step"] == 2 and j["resumed_from"].endswith("step-00000002"), r.stderr[-800:])

    # damaged checkpoints: one sentence naming the file, exit 2, nothing overwritten
    src = os.path.join(half_dir, "step-00000002")
    for what, damage, says in [
            ("a truncated shard", lambda d: open(os.path.join(d, "rank-00001.bin"), "r+b").truncate(100),
             "rank-00001.bin is truncated or damaged"),
            ("a missing shard", lambda d: os.remove(os.path.join(d, "rank-00003.bin")), "rank-00003.bin is missing"),
            ("a corrupt shard", lambda d: flip_byte(os.path.join(d, "rank-00002.bin")), "rank-00002.bin is corrupt"),
            ("a manifest of another model", lambda d: other_model(os.path.join(d, "manifest.json")),
             "was written for model 'gpt:layers=3"),
            ("a manifest whose pick is out of range", lambda d: set_pick(os.path.join(d, "manifest.json"), 0, 99999),
             "field 'plan.pick' gives node 0 layout 99999, but it has layouts 0 to"),
            ("a manifest with negative steps done",
             lambda d: json.dump(dict(json.load(open(os.path.join(d, "manifest.json"))), steps_done=-1),
                                 open(os.path.join(d, "manifest.json") + ".new", "w")) or
             os.replace(os.path.join(d, "manifest.json") + ".new", os.path.join(d, "manifest.json")),
             "field 'steps_done' is -1"),
            ("a manifest whose pick is negative", lambda d: set_pick(os.path.join(d, "manifest.json"), 3, -1),
             "field 'plan.pick' gives node 3 layout -1"),
            ("a manifest nested 100,000 deep",
             lambda d: open(os.path.join(d, "manifest.json"), "w").write("[" * 100000 + "]" * 100000),
             "nests arrays and objects deeper than 256 levels")]:
        d = os.path.join(work, "damaged", "step-00000002")
        shutil.rmtree(os.path.join(work, "damaged"), ignore_errors=True)
        shutil.copytree(src, d)


        damage(d)
        before = digest(d)
        r = run(4, "--model", gpt, "--mesh", "2x2", "--optimizer", "sgd", "--steps", "4",
                "--resume", os.path.dirname(d), "--checkpoint-dir", os.path.dirname(d))
        lines = [l for l in r.stderr.splitlines() if l.startswith("autoddl-train:")]
        check(what + ": exit 2 with one sentence naming the file",
              r.returncode == 2 and len(lines) == 1 and says in lines[0], f"exit {r.returncode}: {r.stderr[-800:]}")
        check(what + ": nothing overwritten", digest(d) == before and os.listdir(os.path.dirname(d)) == ["step-00000002"])

    # a rank killed from outside: the job ends within 30 s and names the rank
    proc = subprocess.Popen(base + ["-np", "2", train, "--model", "mlp:layers=2,hidden=32,batch=16,in=16,out=8",
                                    "--mesh", "2", "--steps", "1000000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victim = None
    deadline = time.time() + 60
    while victim is None and time.time() < deadline:
        time.sleep(0.5)
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
                cmd = open(f"/proc/{pid}/cmdline", "rb").read()
            except OSError:
                continue
            if cmd.split(b"\0")[0].endswith(b"autoddl-train") and b"OMPI_COMM_WORLD_RANK=1" in env:
                victim = int(pid)
    check("the victim rank was found", victim is not None)
    if victim is not None:
        time.sleep(2)  # well into training
        t0 = time.time()
        os.kill(victim, signal.SIGKILL)
        try:
            out, err = proc.communicate(timeout=60)
            took = time.time() - t0
            print(f"     rank 1 killed: the job ended {took:.1f} s later, exit {proc.returncode}")
            check("a killed rank ends the job within 30 s", took < 30 and proc.returncode != 0, f"{took:.1f} s")
            check("the job's message names the killed rank", "rank 1" in err, err[-800:])
        except subprocess.TimeoutExpired:
            proc.kill()
            check("a killed rank ends the job within 30 s", False, "still running after 60 s")
    else:
        proc.kill()
finally:
    shutil.rmtree(work, ignore_errors=True)

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
