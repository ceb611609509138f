"""The PyTorch peer of one rank's training step: one process, one thread, no distribution.

It rebuilds one of autoddl's zoo models layer for layer with the same shapes (mlp and gpt as
peer_ddp.py builds them; llama and vgg11 here), trains it with SGD with momentum 0.9 (autoddl's
optimizer_step) and prints one JSON object with the step times. Each timed step is what
autoddl-train times on one rank: the step's inputs drawn, forward, loss, backward and the update.

    /usr/bin/python3 benchmarks/paper/peer_step.py --model gpt:layers=2,hidden=256,heads=8,seq=128,batch=8,vocab=2048 \
        --steps 12
"""
import argparse
import json
import pathlib
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from peer_ddp import Gpt, Mlp, parse_spec  # noqa: E402

LLAMA_PRESETS = {  # the keys autoddl's llama presets fix when a spec names a size
    "llama3-8b": dict(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256, theta=500000.0),
}


class RmsNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * gamma over the last dim."""

    def __init__(self, dim, eps):
        super().__init__()
        self.gamma, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.gamma


def rotate(x, theta):
    """Rotary embedding of x [b, heads, s, d]: element i < d/2 and i + d/2 turn by pos theta^(-2i/d)."""
    s, d = x.shape[-2], x.shape[-1]
    half = d // 2
    inv = theta ** (-2.0 * torch.arange(half, dtype=torch.float64) / d)
    ang = torch.arange(s, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    lo, hi = x[..., :half], x[..., half:]
    return torch.cat((lo * cos - hi * sin, hi * cos + lo * sin), -1)


class LlamaBlock(nn.Module):
    """Pre-norm decoder block: grouped-query causal attention with rotary q and k, SwiGLU MLP."""

    def __init__(self, c):
        super().__init__()
        h, self.heads, self.kv, self.theta = c["hidden"], c["heads"], c["kv_heads"], c["theta"]
        self.d = h // self.heads
        self.n1, self.n2 = RmsNorm(h, 1e-5), RmsNorm(h, 1e-5)
        self.q = nn.Linear(h, self.heads * self.d, bias=False)
        self.k = nn.Linear(h, self.kv * self.d, bias=False)
        self.v = nn.Linear(h, self.kv * self.d, bias=False)
        self.o = nn.Linear(self.heads * self.d, h, bias=False)
        self.gate, self.up = nn.Linear(h, c["ffn"], bias=False), nn.Linear(h, c["ffn"], bias=False)
        self.down = nn.Linear(c["ffn"], h, bias=False)

    def attention(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.d).transpose(1, 2)
        k = self.k(x).view(b, s, self.kv, self.d).transpose(1, 2)
        v = self.v(x).view(b, s, self.kv, self.d).transpose(1, 2)
        q, k = rotate(q, self.theta), rotate(k, self.theta)
        g = self.heads // self.kv
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True) if hasattr(F, "scaled_dot_product_attention") \
            else causal_attention(q, k, v)
        return self.o(o.transpose(1, 2).reshape(b, s, self.heads * self.d))

    def forward(self, x):
        x = x + self.attention(self.n1(x))
        n = self.n2(x)
        return x + self.down(F.silu(self.gate(n)) * self.up(n))


def causal_attention(q, k, v):
    s = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    mask = torch.ones(s, s, dtype=torch.bool).triu(1)
    return scores.masked_fill(mask, float("-inf")).softmax(-1) @ v


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed = nn.Embedding(c["vocab"], c["hidden"])
        self.blocks = nn.ModuleList(LlamaBlock(c) for _ in range(c["layers"]))
        self.norm = RmsNorm(c["hidden"], 1e-5)
        self.head = nn.Linear(c["hidden"], c["vocab"], bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


VGG11 = [64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0]


class Vgg(nn.Module):
    """VGG-11 without batch norm: 3x3 convs (padding 1, bias) with ReLU, 2x2 max-pools, then
    fc-fc-classes with ReLU and dropout 0.5; `width` scales the channels as autoddl's vgg does."""

    def __init__(self, c):
        super().__init__()
        layers, ch = [], 3
        for out in VGG11:
            if out == 0:
                layers.append(nn.MaxPool2d(2, 2))
                continue
            out = out // 64 * c["width"]
            layers += [nn.Conv2d(ch, out, 3, padding=1), nn.ReLU()]
            ch = out
        self.features = nn.Sequential(*layers)
        flat = ch * (c["image"] // 32) ** 2
        self.fc0, self.fc1 = nn.Linear(flat, c["fc"]), nn.Linear(c["fc"], c["fc"])
        self.fc2 = nn.Linear(c["fc"], c["classes"])

    def forward(self, x):
        x = self.features(x).flatten(1)
        x = F.dropout(F.relu(self.fc0(x)), 0.5, self.training)
        x = F.dropout(F.relu(self.fc1(x)), 0.5, self.training)
        return self.fc2(x)


def build(spec):
    """The model and a function drawing one step's inputs and labels."""
    name, c = parse_spec(spec)
    if name == "mlp":
        model = Mlp(c.get("layers", 3), c.get("hidden", 256), c.get("in", 784), c.get("out", 10))
        return model, lambda: (torch.randn(c.get("batch", 32), c.get("in", 784)),
                               torch.randint(0, c.get("out", 10), (c.get("batch", 32),)))
    if name in ("gpt", "llama"):
        b, seq = c.get("batch", 8), c["seq"]
        if name == "gpt":
            model = Gpt(c["layers"], c["hidden"], c["heads"], seq, c["vocab"], c.get("dropout", 0.1))
        else:
            cfg = dict(LLAMA_PRESETS["llama3-8b"])
            cfg.update(c)
            if "heads" in c and "kv_heads" not in c:
                cfg["kv_heads"] = c["heads"]
            model = Llama(cfg)
            c = cfg
        return model, lambda: (torch.randint(0, c["vocab"], (b, seq)), torch.randint(0, c["vocab"], (b, seq)))
    if name == "vgg11":
        cfg = dict(image=224, classes=1000, batch=8, fc=4096, width=64)
        cfg.update(c)
        model = Vgg(cfg)
        n, img = cfg["batch"], cfg["image"]
        return model, lambda: (torch.randn(n, 3, img, img), torch.randint(0, cfg["classes"], (n,)))
    raise SystemExit(f"peer_step.py: model '{name}' is not rebuilt here; use mlp, gpt, llama or vgg11")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--lr", type=float, default=1e-3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(1)
    model, draw = build(a.model)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    secs, losses = [], []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        x, y = draw()
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        secs.append(time.perf_counter() - t0)
        losses.append(loss.item())
    print(json.dumps({"model": a.model, "ranks": 1, "torch": torch.__version__, "step_s": secs, "losses": losses}))


if __name__ == "__main__":
    main()
