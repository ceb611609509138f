"""autoddl against a peer on 2 MPI ranks of this machine: PyTorch DistributedDataParallel
(--peer ddp), or torch 2's fully_shard, FSDP2 (--peer fsdp2), against autoddl's ZeRO-3 plan.

For each model, rounds of four runs in rotated order, each a fresh `mpirun -np 2` of STEPS steps
whose first WARMUP steps are dropped; a run's sample is the median of its remaining steps (rank
0's wall time from a barrier through the update). ddp: autoddl's dp plan, its auto plan, the dp
plan with Open MPI's mpi_yield_when_idle, PyTorch DDP. fsdp2: autoddl's zero plan (stage 3) and
FSDP2, each with the parameters regathered for the backward (reshard on, FSDP2's default) and
kept gathered from the forward (reshard off). Per model: each alternative's median and
inter-quartile range over the rounds, and each per-round ratio autoddl / PyTorch, its median and
IQR. The first round's runs are checked against each other: the same parameter count and global
batch on both sides, and within each library the same losses at every step (the alternatives of
one library train the same model from the same seed). Writes OUT/NAME.md and OUT/NAME.json, NAME
peer or peer_fsdp2 with -TAG after it where --tag is given.

    python3 benchmarks/paper/peer.py OUT [--peer ddp|fsdp2] [--python PATH] [--tag TAG]
        [--rounds 5] [--steps 12] [--warmup 3]
--python: the interpreter that runs the PyTorch side (default: this one).
(scripts/paper-peer builds autoddl-train and runs this for each torch it finds.)
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
MODELS = [
    "mlp:layers=4,hidden=1024,batch=256,in=1024,out=16",
    "gpt:layers=4,hidden=256,heads=8,seq=64,batch=16,vocab=512",
]
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"]
AUTODDL = ["build/tools/autoddl-train", "--mesh", "2", "--optimizer", "sgd", "--no-check-finite", "--json",
           "--log-every", "0"]
YIELD = ["--mca", "mpi_yield_when_idle", "1"]
# Each alternative: its column, whose run it is, mpirun's extra options, the run's own (autoddl-train's
# strategy, or peer_ddp.py's wrapper) and the PyTorch column it is divided by.
PEERS = {
    "ddp": [("autoddl dp", "autoddl", [], ["--strategy", "dp"], "PyTorch DDP"),
            ("autoddl auto", "autoddl", [], ["--strategy", "auto"], "PyTorch DDP"),
            ("autoddl dp, MPI yields", "autoddl", YIELD, ["--strategy", "dp"], "PyTorch DDP"),
            ("PyTorch DDP", "torch", [], ["--wrap", "ddp"], None)],
    "fsdp2": [("autoddl zero, reshard on", "autoddl", [], ["--strategy", "zero", "--reshard", "on"], "FSDP2, reshard on"),
              ("autoddl zero, reshard off", "autoddl", [], ["--strategy", "zero", "--reshard", "off"],
               "FSDP2, reshard off"),
              ("FSDP2, reshard on", "torch", [], ["--wrap", "fsdp2", "--reshard", "on"], None),
              ("FSDP2, reshard off", "torch", [], ["--wrap", "fsdp2", "--reshard", "off"], None)],
}


def quartiles(v):
    """Median, first and third quartile (linear interpolation between order statistics)."""
    if len(v) == 1:
        return v[0], v[0], v[0]
    q1, med, q3 = statistics.quantiles(v, n=4, method="inclusive")
    return med, q1, q3


def loadavg():
    """The 1, 5 and 15 minute load averages: how busy the 2 shared cores were."""
    return " ".join(pathlib.Path("/proc/loadavg").read_text().split()[:3])


def run_json(cmd):
    """The JSON object a command prints (on one line or several), from its first line that opens one."""
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    starts = [i for i, l in enumerate(out.splitlines()) if l.startswith("{")]
    if not starts:
        sys.exit(f"peer.py: no JSON from {' '.join(cmd)}:\n{out}")
    return json.JSONDecoder().raw_decode("\n".join(out.splitlines()[starts[0]:]))[0]


def run(alt, model, a, port):
    """One fresh 2-rank run: its step time (the median after the warm-up), parameter count, global
    batch, losses, micro-batch count and, for PyTorch, torch's version."""
    _, side, mpi, args, _ = alt
    if side == "autoddl":
        # YIELD: Open MPI's shared-memory transport polls while it waits; with mpi_yield_when_idle
        # it gives its core away between polls, as gloo's blocking TCP waits do (an Open MPI
        # setting, no change to autoddl).
        j = run_json(MPIRUN + mpi + AUTODDL + ["--model", model, "--steps", str(a.steps)] + args)
        plan = j["plan"]
        batch = plan["micro_batch_size"] * plan["microbatches"]
        return statistics.median(j["step_s"][a.warmup:]), plan["params"], batch, j["losses"], None, plan["microbatches"]
    j = run_json(MPIRUN + mpi + [a.python, str(HERE / "peer_ddp.py"), "--model", model, "--steps", str(a.steps),
                           "--port", str(port)] + args)
    return statistics.median(j["step_s"][a.warmup:]), j["parameters"], j["global_batch"], j["losses"], j["torch"], 1


def check_first_round(model, runs):
    """Every run of the round trains the same model: one parameter count and one global batch
    over both libraries, and within each library the same losses (relative 1e-3) at every step
    where the runs split the batch into as many micro-batches (dropout draws its masks per
    micro-batch)."""
    counts = {name: (r[1], r[2]) for name, r in runs.items()}
    if len(set(counts.values())) != 1:
        sys.exit(f"peer.py: {model}: the runs differ in (parameters, global batch): {counts}")
    for side in ("autoddl", "PyTorch", "FSDP2"):
        mine = {name: r for name, r in runs.items() if name.startswith(side)}
        for name, r in mine.items():
            ref = next(s[3] for s in mine.values() if s[5] == r[5])
            if any(abs(x - y) > 1e-3 * abs(y) for x, y in zip(r[3], ref, strict=True)):
                sys.exit(f"peer.py: {model}: {name}'s losses {r[3]} differ from {ref}")
    first = {name: r[3][0] for name, r in runs.items()}
    return {"parameters": counts[next(iter(counts))][0], "global_batch": counts[next(iter(counts))][1],
            "first_loss": first}


def measure(model, alts, a, port):
    """The rounds of one model: each alternative's samples, each ratio's, the first round's check
    and torch's version."""
    samples, ratios = {alt[0]: [] for alt in alts}, {alt[0]: [] for alt in alts if alt[4]}
    check, version = None, "?"
    for r in range(a.rounds):
        runs = {}
        for k in range(len(alts)):
            alt = alts[(k + r) % len(alts)]
            port += 1  # a fresh rendezvous port per launch: no TIME_WAIT clash
            runs[alt[0]] = run(alt, model, a, port)
            version = runs[alt[0]][4] or version
        if r == 0:
            check = check_first_round(model, runs)
        for name, got in runs.items():
            samples[name].append(got[0])
        for alt in alts:
            if alt[4]:
                ratios[alt[0]].append(runs[alt[0]][0] / runs[alt[4]][0])
        print(f"{model} round {r + 1}/{a.rounds}: " + ", ".join(f"{k} {v[0] * 1e3:.1f} ms" for k, v in runs.items()) +
              f" (load average {loadavg()})", flush=True)
    return {"step_s": samples, "ratio_to_pytorch": ratios, "check": check}, version, port


def intro(a, version, load):
    """The paragraph above the table: what ran, how it was timed, what was checked, the load."""
    what = {"ddp": f"PyTorch {version} DistributedDataParallel",
            "fsdp2": f"PyTorch {version} fully_shard (FSDP2; each hidden layer a group, the rest the root's)"}[a.peer]
    against = {"ddp": "autoddl-train", "fsdp2": "autoddl-train --strategy zero (ZeRO-3)"}[a.peer]
    extra = {"ddp": "\"MPI yields\": the same dp run with Open MPI's mpi_yield_when_idle=1. ",
             "fsdp2": "Reshard on: each layer's parameters gathered for its forward and again for its backward "
                      "(FSDP2's default; autoddl-train --reshard on); off: gathered once, kept to the backward. "}[a.peer]
    return (f"{what} (`{a.python}`), CPU, gloo, one thread per rank, against {against} on 2 MPI ranks (mesh 2); "
            f"SGD with momentum 0.9, lr 1e-3, same global batch. {a.rounds} rounds, each running the four in rotated "
            f"order as fresh processes of {a.steps} steps, the first {a.warmup} dropped; a round's sample is the "
            "median of its steps. Times: median ± IQR over the rounds. Ratio: per round autoddl / PyTorch, median "
            f"[first quartile, third quartile] (below 1: autoddl faster). {extra}Checked on the first round: the "
            "same parameter count and global batch on both sides, and each library's runs of as many micro-batches "
            "the same losses at every step (the two libraries initialise differently: first-step losses below). "
            f"The machine's load average (1, 5, 15 min; 2 cores): {load}.")


def table(a, version, results):
    """The markdown table: one row per model, the times then the ratios; the checks under it."""
    alts = PEERS[a.peer]
    torch_name = {"ddp": f"PyTorch {version} DDP", "fsdp2": f"PyTorch {version} FSDP2"}[a.peer]
    heads = [f"{n.replace('PyTorch DDP', torch_name).replace('FSDP2,', torch_name + ',')} (ms)" for n, *_ in alts]
    ratio_heads = [f"{n.removeprefix('autoddl ')} / {v.replace('PyTorch DDP', 'PyTorch')}" for n, _, _, _, v in alts if v]
    md = ["| model | " + " | ".join(heads + ratio_heads) + " |", "|---|" + "---:|" * (len(heads) + len(ratio_heads))]
    checks = []
    for model, res in results.items():
        cells = []
        for name, *_ in alts:
            med, q1, q3 = quartiles(res["step_s"][name])
            cells.append(f"{med * 1e3:.1f} ± {(q3 - q1) * 1e3:.1f}")
        for name in res["ratio_to_pytorch"]:
            med, q1, q3 = quartiles(res["ratio_to_pytorch"][name])
            cells.append(f"{med:.2f} [{q1:.2f}, {q3:.2f}]")
        md.append(f"| `{model}` | " + " | ".join(cells) + " |")
        c = res["check"]
        auto = next(v for k, v in c["first_loss"].items() if k.startswith("autoddl"))
        peer = next(v for k, v in c["first_loss"].items() if not k.startswith("autoddl"))
        checks.append(f"`{model}`: {c['parameters']} parameters, global batch {c['global_batch']}; first-step loss "
                      f"autoddl {auto:.4f}, PyTorch {peer:.4f} (rank 0's half of the batch)")
    return md + ["", "Checked: " + "; ".join(checks) + "."]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--peer", choices=sorted(PEERS), default="ddp")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--tag", default="")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    name = {"ddp": "peer", "fsdp2": "peer_fsdp2"}[a.peer] + (f"-{a.tag}" if a.tag else "")
    load_before = loadavg()
    results, version, port = {}, "?", 29500
    for model in MODELS:
        results[model], version, port = measure(model, PEERS[a.peer], a, port)
    load = f"{load_before} before, {loadavg()} after"
    (out / f"{name}.json").write_text(json.dumps({"peer": a.peer, "torch": version, "python": a.python, "rounds": a.rounds,
                                                  "steps": a.steps, "warmup": a.warmup, "load_average": load,
                                                  "results": results}, indent=1) + "\n")
    md = [f"# PyTorch peer, {a.peer} (generated by benchmarks/paper/peer.py)", "", intro(a, version, load), ""]
    md += table(a, version, results)
    (out / f"{name}.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
