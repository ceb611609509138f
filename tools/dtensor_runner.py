#!/usr/bin/env python3
"""Trains a Hugging Face LLaMA-family model on torch.distributed CPU ranks (gloo) with the placements
of an autoddl plan (autoddl-plan --emit dtensor), from the same safetensors weights and the same
--data windows as autoddl-train, and prints each step's loss.

  dtensor_runner.py --placements plan.dtensor.json [more.json ...] [--config-dir DIR] [--init-from W.safetensors] \\
                    --data corpus.bin [--steps 5] [--optimizer adam|sgd] [--lr 3e-3] [--no-box-activations] [--json]

Several plans of one device count train one after the other in the same ranks, each from the
initial weights (torch and transformers are imported once, before the ranks are forked); without
--config-dir, each plan's model is the folder of its hf: config (and model.safetensors there
without --init-from), so plans of several models run in one call.

What follows the plan:
- every parameter lives as a DTensor in its storage placements; before each forward it is
  redistributed to the placements its op reads it in, then replicated for transformers' module;
- the tokens are cut as the plan's embedding reads them (Shard(0): rows, Shard(1): positions), so
  each rank's gradient is a partial sum on the mesh dims that cut them and whole on the others;
  the backward of those redistributions sums and slices the gradients into the storage placements
  (reduce-scatter for a sharded parameter, all-reduce for a replicated one);
- the optimizer's state lives in the plan's update placements (ZeRO 1 and 2: a slice of a
  replicated parameter), its result redistributed back into the storage placements; the gradient
  is summed into the storage placements and sliced from there (an all-reduce where ZeRO 2's
  grad_sum placements reduce-scatter);
- the activations the file boxes, where a transformers module produces them (a linear's, a norm's,
  the embedding's output) and a whole value can start them: each is taken from this rank's rows into
  the producer's placements, boxed into the consumer's by DTensor, and back (forward and backward):
  the plan's collectives on the real values, which leave them unchanged (--no-box-activations: not).
What does not: transformers computes every activation whole on each rank's rows (attention, SwiGLU
and residuals unsplit, whatever the plan's layouts), so the boxings are exercised, not used to split
the compute; activations other modules produce are not boxed, nor a partial sum on a mesh dim that
cuts the rows; none is boxed where the tokens' positions are split; micro-batches and
recomputation are one pass.
The optimizers are autoddl-train's: SGD with momentum 0.9 (sgd) and Adam (0.9, 0.999, eps 1e-8),
neither with weight decay; by default the plan's, as autoddl-train --plan runs it. autoddl's loss is the mean cross-entropy of every position's next byte:
row b of step k is the window of seq + 1 bytes at ((k * batch + b) * seq) mod (size - seq - 1).
"""
import argparse
import json
import logging
import math
import os
import socket
import sys


def parse_args(argv):
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a.add_argument("--placements", required=True, nargs="+", help="autoddl-plan --emit dtensor's JSON, one or more")
    a.add_argument("--config-dir", help="the folder of the model's config.json (default: that of the plan's hf: model)")
    a.add_argument("--init-from", help="the initial weights, a safetensors file of Hugging Face names "
                                       "(default: model.safetensors beside the config.json)")
    a.add_argument("--data", required=True, help="the byte corpus autoddl-train --data reads")
    a.add_argument("--steps", type=int, default=5)
    a.add_argument("--optimizer", choices=["adam", "sgd", "sgd-momentum"],
                   help="default: the plan's (the file's optimizer: adam or sgd-momentum)")
    a.add_argument("--lr", type=float, default=3e-3, help="learning rate (autoddl-train's with --data: 3e-3)")
    a.add_argument("--no-box-activations", dest="box_activations", action="store_false",
                   help="leave the file's boxed activations alone (by default those a transformers module produces are boxed)")
    a.add_argument("--json", action="store_true",
                   help="print one JSON object: {\"runs\": [{\"placements\": file, \"strategy\": ..., \"losses\": [...], "
                        "\"stored_elements\": [per rank], \"updated_elements\": [per rank], \"activations_boxed\": n, \"activations_in_file\": n}]}")
    return a.parse_args(argv)


def kind(text):
    """'Shard(1)' -> ('S', 1), 'Replicate()' -> ('B', None), 'Partial()' -> ('P', None)."""
    if text is None:
        raise SystemExit("dtensor_runner: a placement the file leaves null (a split of stacked experts) has no DTensor form")
    if text.startswith("Shard("):
        return "S", int(text[6:-1])
    return ("B" if text == "Replicate()" else "P"), None


def placements(texts):
    from torch.distributed.tensor import Partial, Replicate, Shard
    out = []
    for t in texts:
        k, d = kind(t)
        out.append(Shard(d) if k == "S" else Replicate() if k == "B" else Partial())
    return out


def token_block(plan, coords):
    """This rank's rows and positions of the step's tokens, cut as the plan's first reader of input 0."""
    shape = plan["inputs"][0]["shape"]
    rows, seq = shape[0] * plan["microbatches"], shape[1]
    lo, hi = [0, 0], [rows, seq]
    split = []
    for axis, text in enumerate(plan["inputs"][0]["reads"][0]["placements"]):
        k, d = kind(text)
        split.append(k == "S")
        if k == "S":
            n = plan["mesh"][axis]
            part = (hi[d] - lo[d]) // n
            lo[d] += coords[axis] * part
            hi[d] = lo[d] + part
    return (rows, seq), (lo, hi), split


def windows(data, rows, seq, step):
    span = len(data) - seq - 1
    starts = [((step * rows + b) * seq) % span for b in range(rows)]
    return [list(data[s:s + seq]) for s in starts], [list(data[s + 1:s + seq + 1]) for s in starts]


def model_folder(args, plan):
    """--config-dir, or the folder of the plan's model spec hf:PATH/config.json[:...]."""
    if args.config_dir:
        return args.config_dir
    spec = plan["model"]
    if not spec.startswith("hf:"):
        raise SystemExit(f"dtensor_runner: the plan's model '{spec}' is no hf: config; give --config-dir")
    return os.path.dirname(spec[3:].split(":")[0]) or "."


def build(args, plan, mesh):
    """transformers' model (eager attention) and its parameters as DTensors in their storage placements."""
    import torch
    import transformers
    from safetensors.torch import load_file
    from torch.distributed.tensor import distribute_tensor
    folder = model_folder(args, plan)
    config = transformers.AutoConfig.from_pretrained(folder)
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    weights = load_file(args.init_from or os.path.join(folder, "model.safetensors"))
    by_name = {p["hf_name"]: p for p in plan["params"] if p["hf_name"]}
    params = {}
    for name, _ in model.named_parameters():
        if name not in by_name:
            raise SystemExit(f"dtensor_runner: the plan has no parameter named {name} (is it another model's plan?)")
        entry = by_name[name]
        full = weights[name].to(torch.float32)
        params[name] = (torch.nn.Parameter(distribute_tensor(full, mesh, placements(entry["storage"]["placements"]))), entry)
    return model, params


def gathered(params, mesh, split):
    """Every parameter whole on every rank, through the placements its op reads; its gradient a partial
    sum on the mesh dims that cut the tokens."""
    from torch.distributed.tensor import Partial, Replicate
    whole = [Replicate()] * mesh.ndim
    grads = [Partial() if s else Replicate() for s in split]
    out = {}
    for name, (p, entry) in params.items():
        x = p
        read = entry["reads"][0]["placements"] if entry["reads"] else entry["storage"]["placements"]
        if "Partial()" not in read:
            x = x.redistribute(mesh, placements(read))
        out[name] = x.redistribute(mesh, whole).to_local(grad_placements=grads)
    return out

MODULES = {"embed": "model.embed_tokens", "norm": "model.norm", "lm_head": "lm_head", "attn_norm": "input_layernorm",
           "mlp_norm": "post_attention_layernorm", "attn.q": "self_attn.q_proj", "attn.k": "self_attn.k_proj",
           "attn.v": "self_attn.v_proj", "attn.o": "self_attn.o_proj", "mlp.gate": "mlp.gate_proj", "mlp.up": "mlp.up_proj",
           "mlp.down": "mlp.down_proj"}


def module_of(op):
    """transformers' module whose output is autoddl op `op`'s ("h3.attn.q" -> "model.layers.3.self_attn.q_proj"), or None."""
    if op in MODULES and not op.startswith(("attn", "mlp")):
        return MODULES[op]
    layer, _, rest = op.partition(".")
    if layer[:1] == "h" and layer[1:].isdigit() and rest in MODULES:
        return f"model.layers.{layer[1:]}.{MODULES[rest]}"
    return None


def box_activations(model, plan, mesh):
    """Forward hooks that take each boxed activation a transformers module produces from the placements
    of this rank's rows into the plan's producer placements, box it into the consumer's, and back: the
    collectives the plan runs, on the same values (an identity, forward and backward). Returns the hooks
    and how many of the file's boxed activations they follow: none where the tokens' positions are split,
    and not those a whole value cannot start from (a partial sum on a mesh dim that cuts the rows, or into
    one from a whole value)."""
    from torch.distributed.tensor import DTensor, Partial, Replicate
    rows_text = ["Shard(0)" if kind(t)[0] == "S" else "Replicate()" for t in plan["inputs"][0]["reads"][0]["placements"]]
    rows = placements(rows_text)
    if any(kind(t) == ("S", 1) for t in plan["inputs"][0]["reads"][0]["placements"]):
        return [], 0
    boxes = {}
    for a in plan["activations"]:
        name = module_of(a["producer"])
        src, dst = a["from"]["placements"], a["to"]["placements"]
        practical = all(kind(t)[0] != "P" or kind(r)[0] == "B" for t, r in zip(src, rows_text)) and \
            all(kind(t)[0] != "P" or kind(f)[0] == "P" for t, f in zip(dst, src))
        if name is not None and a["output"] == 0 and practical:
            pair = (tuple(a["from"]["placements"]), tuple(a["to"]["placements"]))
            boxes.setdefault(name, {}).setdefault(pair, []).append(a)
    modules = dict(model.named_modules())

    def hook_for(pairs):
        def hook(module, inputs, y):
            for src, dst in pairs:
                y = boxed(y, src, dst)
            return y
        return hook

    def boxed(y, src, dst):
        """y (this rank's rows) as the producer's placements src, boxed into dst, and back to rows. A
        partial sum is made where src has one: the rank of coordinate 0 holds the value, the others zeros;
        the gradient passes to every rank's y whole, as the backward of DTensor's sum hands it back whole."""
        start, coords = list(rows), mesh.get_coordinate()
        for axis, t in enumerate(src):
            if kind(t)[0] == "P":
                start[axis] = Partial()
                y = y + (y * (1.0 if coords[axis] == 0 else 0.0) - y).detach()
        d = DTensor.from_local(y, mesh, start, run_check=False)
        d = d.redistribute(mesh, placements(src)).redistribute(mesh, placements(dst)).redistribute(mesh, rows)
        return d.to_local(grad_placements=rows)

    hooks = [modules[name].register_forward_hook(hook_for(list(pairs))) for name, pairs in boxes.items() if name in modules]
    return hooks, sum(len(edges) for name, pairs in boxes.items() if name in modules for edges in pairs.values())



def optimizer_of(args, plan, params, mesh):
    """The optimizer over each parameter's update copy (the parameter itself where it is updated in place)."""
    import torch
    masters = {}
    for name, (p, entry) in params.items():
        upd = placements(entry["update"]["placements"])
        masters[name] = p if list(p.placements) == upd else torch.nn.Parameter(p.detach().redistribute(mesh, upd))
    ps = list(masters.values())
    name = args.optimizer or plan.get("optimizer", "adam")
    opt = torch.optim.Adam(ps, lr=args.lr, betas=(0.9, 0.999), eps=1e-8) if name == "adam" else \
        torch.optim.SGD(ps, lr=args.lr, momentum=0.9)
    return opt, masters


def step(args, model, params, mesh, opt, masters, batch):
    import torch
    import torch.distributed as dist
    from torch.func import functional_call
    ids, targets, (lo, hi), split, (rows, seq) = batch
    logits = functional_call(model, gathered(params, mesh, split), (torch.tensor(ids[lo[0]:hi[0]]),)).logits
    mine = logits[:, lo[1]:hi[1]].reshape(-1, logits.shape[-1])
    labels = torch.tensor([t[lo[1]:hi[1]] for t in targets[lo[0]:hi[0]]]).reshape(-1)
    loss = torch.nn.functional.cross_entropy(mine, labels, reduction="sum") / (rows * seq)
    loss.backward()
    for name, (p, _) in params.items():
        if masters[name] is not p:
            masters[name].grad = p.grad.redistribute(mesh, masters[name].placements)
    opt.step()
    opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        for name, (p, _) in params.items():
            p.grad = None
            if masters[name] is not p:
                p.copy_(masters[name].redistribute(mesh, p.placements))
    total = loss.detach().clone()
    dist.all_reduce(total)
    copies = math.prod(n for n, s in zip(mesh.shape, split) if not s)
    return total.item() / copies


def run_plan(args, path, rank):
    """Trains the plan of file `path`: its losses, and the parameter elements each rank stores."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    plan = json.load(open(path))
    mesh = init_device_mesh("cpu", tuple(plan["mesh"]))
    model, params = build(args, plan, mesh)
    hooks, followed = box_activations(model, plan, mesh) if args.box_activations else ([], 0)
    opt, masters = optimizer_of(args, plan, params, mesh)
    (rows, seq), block, split = token_block(plan, mesh.get_coordinate())
    data = open(args.data, "rb").read()
    losses = []
    for k in range(args.steps):
        ids, targets = windows(data, rows, seq, k)
        losses.append(step(args, model, params, mesh, opt, masters, (ids, targets, block, split, (rows, seq))))
        if rank == 0 and not args.json:
            print(f"{plan['strategy']} on mesh {'x'.join(map(str, plan['mesh']))}: step {k + 1} loss {losses[-1]:.7f}", flush=True)
    for h in hooks:
        h.remove()
    if rank == 0 and not args.json:
        print(f"{plan['strategy']}: DTensor boxed {followed} of the {len(plan['activations'])} boxed activations the file lists")
    stored, updated = [None] * mesh.size(), [None] * mesh.size()
    dist.all_gather_object(stored, sum(p.to_local().numel() for p, _ in params.values()))
    dist.all_gather_object(updated, sum(m.to_local().numel() for m in masters.values()))
    return {"placements": path, "strategy": plan["strategy"], "mesh": plan["mesh"], "losses": losses,
            "stored_elements": stored, "updated_elements": updated, "activations_boxed": followed,
            "activations_in_file": len(plan["activations"])}


def train(rank, world, port, args):
    import torch
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    logging.getLogger("torch.distributed").setLevel(logging.ERROR)  # its advice on flattening 2-D meshes, per step
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        runs = [run_plan(args, path, rank) for path in args.placements]
        if rank == 0 and args.json:
            print(json.dumps({"ranks": world, "runs": runs}), flush=True)
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv):
    args = parse_args(argv)
    worlds = set()
    for path in args.placements:
        plan = json.load(open(path))
        if plan.get("format") != "autoddl-dtensor":
            raise SystemExit(f"dtensor_runner: {path} is not autoddl-plan --emit dtensor's output")
        worlds.add(math.prod(plan["mesh"]))
    if len(worlds) != 1:
        raise SystemExit(f"dtensor_runner: the plans are for {sorted(worlds)} devices; give plans of one device count")
    import torch.multiprocessing as mp
    import transformers  # noqa: F401  (imported once, before the ranks are forked)
    world = worlds.pop()
    mp.start_processes(train, args=(world, free_port(), args), nprocs=world, start_method="fork")


if __name__ == "__main__":
    main(sys.argv[1:])
