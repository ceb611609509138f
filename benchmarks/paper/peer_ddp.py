"""One rank of the PyTorch peer: DistributedDataParallel, or with --wrap fsdp2 torch 2's
fully_shard (FSDP2), on the CPU (gloo), one thread per rank.

Started by mpirun (rank and size from Open MPI's environment), it trains one of autoddl's zoo
models, rebuilt here layer for layer with the same shapes, the same global batch split over the
ranks and SGD with momentum 0.9 (autoddl's optimizer_step), and prints on rank 0 one JSON object
with the step times, the losses, the parameter count and the global batch. Each timed step is what
autoddl-train times: a barrier, then the inputs of the step drawn, forward, loss, backward (DDP's
bucketed all-reduce, or FSDP2's per-layer reduce-scatters, overlapping it) and the update. Every
rank builds the model from seed 1 (DDP then broadcasts rank 0's copy; FSDP2 keeps each rank's
shard of it) and draws its inputs from seed 2 + rank, so the two wrappers train the same model on
the same data and print the same losses up to round-off.

    mpirun -np 2 .venv/bin/python benchmarks/paper/peer_ddp.py --model mlp:layers=4,hidden=1024,batch=256,in=1024,out=16 \
        --steps 12 --port 29511 [--wrap ddp|fsdp2] [--reshard on|off]
"""
import argparse
import json
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def parse_spec(spec):
    name, _, rest = spec.partition(":")
    kv = dict(item.split("=") for item in rest.split(",") if item)
    return name, {k: (float(v) if "." in v else int(v)) for k, v in kv.items()}


class Mlp(nn.Module):
    """autoddl's mlp: in -> hidden (ReLU), layers - 1 more hidden -> hidden (ReLU), hidden -> out."""

    def __init__(self, layers, hidden, inp, out):
        super().__init__()
        dims = [inp] + [hidden] * layers
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:]))
        self.out = nn.Linear(hidden, out)

    def forward(self, x):
        for fc in self.hidden:
            x = F.relu(fc(x))
        return self.out(x)


class Block(nn.Module):
    """A GPT-2 layer as autoddl builds it: pre-layernorm, q, k, v and projection linears with
    biases, causal attention with dropout on the probabilities, a GeLU MLP of 4 x hidden."""

    def __init__(self, hidden, heads, dropout):
        super().__init__()
        self.heads, self.p = heads, dropout
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.q, self.k, self.v = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.fc, self.fc_proj = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

    def attention(self, x):
        b, s, h = x.shape
        d = h // self.heads
        q, k, v = (t.view(b, s, self.heads, d).transpose(1, 2) for t in (self.q(x), self.k(x), self.v(x)))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d)
        mask = torch.ones(s, s, dtype=torch.bool).triu(1)
        probs = F.dropout(scores.masked_fill(mask, float("-inf")).softmax(-1), self.p, self.training)
        o = (probs @ v).transpose(1, 2).reshape(b, s, h)
        return F.dropout(self.proj(o), self.p, self.training)

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + F.dropout(self.fc_proj(F.gelu(self.fc(self.ln2(x)))), self.p, self.training)


class Gpt(nn.Module):
    """autoddl's gpt: token and learned position embeddings, the layers, a final layernorm and the
    output head tied to the token embedding (no bias)."""

    def __init__(self, layers, hidden, heads, seq, vocab, dropout):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, hidden), nn.Embedding(seq, hidden)
        self.p = dropout
        self.blocks = nn.ModuleList(Block(hidden, heads, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)

    def forward(self, tokens):
        x = F.dropout(self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1])), self.p, self.training)
        for blk in self.blocks:
            x = blk(x)
        return self.ln_f(x) @ self.wte.weight.t()


def build(spec, ranks):
    """The model and a function drawing one step's local inputs and labels."""
    name, c = parse_spec(spec)
    local = c["batch"] // ranks
    if name == "mlp":
        model = Mlp(c.get("layers", 3), c.get("hidden", 256), c.get("in", 784), c.get("out", 10))
        return model, lambda: (torch.randn(local, c.get("in", 784)), torch.randint(0, c.get("out", 10), (local,)))
    if name == "gpt":
        seq, vocab = c["seq"], c["vocab"]
        model = Gpt(c["layers"], c["hidden"], c["heads"], seq, vocab, c.get("dropout", 0.1))
        return model, lambda: (torch.randint(0, vocab, (local, seq)), torch.randint(0, vocab, (local, seq)))
    raise SystemExit(f"peer_ddp.py: model '{name}' is not rebuilt here; use mlp or gpt")


def fully_sharded(model, ranks, reshard):
    """FSDP2: each hidden layer (the MLP's linears, the GPT's blocks) a group of its own, the rest
    (the MLP's output layer; the GPT's embeddings, tied head and final layernorm) the root's;
    reshard: each group's parameters freed after its forward and gathered again for its backward
    (FSDP2's default) rather than kept to the backward."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (ranks,))
    for layer in model.blocks if isinstance(model, Gpt) else model.hidden:
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard)
    return fully_shard(model, mesh=mesh, reshard_after_forward=reshard)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--port", type=int, default=29511)
    ap.add_argument("--wrap", choices=("ddp", "fsdp2"), default="ddp")
    ap.add_argument("--reshard", choices=("on", "off"), default="on", help="fsdp2's reshard_after_forward")
    a = ap.parse_args()
    torch.set_num_threads(1)
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    ranks = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=rank, world_size=ranks)
    torch.manual_seed(1)
    model, draw = build(a.model, ranks)
    params = sum(p.numel() for p in model.parameters())
    torch.manual_seed(2 + rank)
    if a.wrap == "fsdp2":
        ddp = fully_sharded(model, ranks, a.reshard == "on")
    else:
        ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=0.9)
    secs, losses = [], []
    for _ in range(a.steps):
        dist.barrier()
        t0 = time.perf_counter()
        x, y = draw()
        opt.zero_grad(set_to_none=True)
        logits = ddp(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        secs.append(time.perf_counter() - t0)
        losses.append(loss.item())
    if rank == 0:
        print(json.dumps({"model": a.model, "ranks": ranks, "wrap": a.wrap, "reshard": a.reshard,
                          "torch": torch.__version__, "parameters": params, "global_batch": parse_spec(a.model)[1]["batch"],
                          "step_s": secs, "losses": losses}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
