#!/usr/bin/env python3
"""The PyTorch peer's FSDP2 trains what its DDP trains (benchmarks/paper/peer_ddp.py --wrap).

Usage: peer_fsdp2.py MPIRUN SOURCE_ROOT

On 2 gloo ranks, a small MLP and a small GPT (tied head, dropout 0.1) take 4 SGD steps under
DistributedDataParallel and under torch's fully_shard (FSDP2) with reshard on and off. DDP's
losses, torch's own data-parallel path, are the oracle: every FSDP2 loss agrees with them within
relative 1e-5. The parameter count each run prints is the one the zoo spec gives, counted here
from the layer shapes. Python with torch: SOURCE_ROOT/.venv/bin/python (scripts/setup-python);
without it the test exits 77 (skipped), saying why.
"""
import json
import os
import socket
import subprocess
import sys

from torch_venv import torch_or_skip

mpirun, root = sys.argv[1:3]
MLP = dict(layers=3, hidden=64, inp=32, out=8, batch=16)
GPT = dict(layers=2, hidden=32, heads=4, seq=16, vocab=64, batch=4)
failures = []


def check(what, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else ": " + detail))
    if not ok:
        failures.append(what)


def mlp_params(c):
    """in -> hidden, layers - 1 of hidden -> hidden, hidden -> out, each with a bias."""
    h = c["hidden"]
    return c["inp"] * h + h + (c["layers"] - 1) * (h * h + h) + h * c["out"] + c["out"]


def gpt_params(c):
    """Token and position tables; per layer 2 layernorms, q, k, v, proj, fc (4h) and fc_proj with
    biases; the final layernorm; the head is the token table."""
    h = c["hidden"]
    layer = 2 * 2 * h + 4 * (h * h + h) + (h * 4 * h + 4 * h) + (4 * h * h + h)
    return c["vocab"] * h + c["seq"] * h + c["layers"] * layer + 2 * h


def free_port():
    """A TCP port nothing listens on now, for gloo's rendezvous (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(spec, wrap, reshard):
    """One 2-rank run's JSON line. A launch that dies before printing it (gloo's rendezvous on a
    loaded machine; nothing this test checks) is printed with its stderr and tried once more on
    another port; a second failure fails the test."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    for attempt in (1, 2):
        cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable,
               os.path.join(root, "benchmarks", "paper", "peer_ddp.py"), "--model", spec, "--steps", "4",
               "--port", str(free_port()), "--wrap", wrap, "--reshard", reshard]
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)
        line = next((x for x in done.stdout.splitlines() if x.startswith("{")), None)
        if done.returncode == 0 and line:
            return json.loads(line)
        print(f"launch {attempt} of {' '.join(cmd)} exited {done.returncode}; its stderr ends:\n"
              + "\n".join(done.stderr.splitlines()[-25:]))
    sys.exit(f"{spec} under {wrap}, reshard {reshard}: both launches failed")


def main():
    torch_or_skip(root)
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError as e:
        print(f"skipped: this torch has no fully_shard (FSDP2) ({e})")
        sys.exit(77)
    models = [(f"mlp:layers={MLP['layers']},hidden={MLP['hidden']},batch={MLP['batch']},in={MLP['inp']},out={MLP['out']}",
               mlp_params(MLP)),
              (f"gpt:layers={GPT['layers']},hidden={GPT['hidden']},heads={GPT['heads']},seq={GPT['seq']},"
               f"batch={GPT['batch']},vocab={GPT['vocab']}", gpt_params(GPT))]
    for spec, params in models:
        ddp = run(spec, "ddp", "on")
        check(f"{spec}: DDP's {ddp['parameters']} parameters are the spec's {params}", ddp["parameters"] == params)
        for reshard in ("on", "off"):
            got = run(spec, "fsdp2", reshard)
            worst = max(abs(a - b) / abs(b) for a, b in zip(got["losses"], ddp["losses"], strict=True))
            check(f"{spec}: FSDP2, reshard {reshard}, has DDP's losses (largest relative difference {worst:.1e})",
                  worst <= 1e-5 and got["parameters"] == params, f"{got['losses']} against {ddp['losses']}")
    if failures:
        sys.exit(f"{len(failures)} failed")


if __name__ == "__main__":
    main()
