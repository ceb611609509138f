#!/usr/bin/env python3
"""autoddl-train against Hugging Face transformers, on the same weights and the same tokens.

Usage: hf_weights.py MPIRUN AUTODDL_TRAIN SOURCE_ROOT PART, PART one of
- equality: tiny LLaMA, Mistral (tied head), Qwen2 (q/k/v biases), Qwen3 (q/k norms, head_dim
  not hidden / heads), LLaMA with attention_bias (q/k/v/o biases), Mixtral, Qwen3-MoE and Qwen2-MoE
  (4 experts, top 2, routed dropless: capacity=0; Qwen2-MoE's shared expert behind its sigmoid
  gate) built by transformers from a config.json written here, random weights (norm
  scales and biases too, so a wrong name or transpose shows) saved as safetensors; autoddl-train
  --init-from them computes one step on the --data file's tokens: its loss and --export-grads'
  gradients against transformers' loss and gradients (autograd) on the same windows (fp32, 1e-5
  relative to each tensor's largest value). The config autoddl reads is the one save_pretrained
  wrote (transformers 5 keeps the rotary base under rope_parameters). LLaMA with biases also on 4
  ranks under tp=2 x dp=2, Mixtral under ep=2 x dp=2, Qwen2-MoE under tp=2 x dp=2 (the gradients
  gathered from the shards).
- trained: autoddl's own initial weights (--steps 0 --export-weights) loaded by transformers,
  saved again by save_pretrained, read back by --init-from and exported: the same bytes; a model
  trained 3 steps on 4 ranks under tp=2 x dp=2 and exported, loaded by transformers, gives the
  loss autoddl-train prints for those weights (--init-from the export, 4 ranks).
- refusals (needs no torch): files in F64, F16 and BF16 (written here by a writer of the format's
  own) read as their values; --init-from files truncated, of another shape, lacking a tensor or
  holding another model's, and a model without Hugging Face names: one sentence, exit 2 (the
  reader's other refusals: tests/unit/runtime/safetensors.cpp); a note where transformers computes
  another function (a scaled rotary embedding).
Python with torch and transformers: SOURCE_ROOT/.venv/bin/python (scripts/setup-python); without
it the equality and trained parts exit 77 (skipped), saying why.
autoddl's loss is the mean cross-entropy of every position's next byte (runtime/data.hpp's
text_corpus: row b of step k is the window of seq + 1 bytes at ((k * rows + b) * seq) mod
(size - seq - 1)); the reference is computed by hand from transformers' logits with those targets.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

from torch_venv import torch_or_skip

mpirun, train, root, part = sys.argv[1:5]
SEQ, BATCH = 16, 4
failures = []


def check(what, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else ": " + detail))
    if not ok:
        failures.append(what)


def finish():
    print(f"{len(failures)} failed" if failures else "all passed")
    sys.exit(1 if failures else 0)


def run(np, *args):
    cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(np), os.path.abspath(train), "--log-every", "0", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def windows(data, step=0):
    """Step `step`'s token ids and next-byte targets [BATCH, SEQ], as autoddl-train --data cuts them."""
    span = len(data) - SEQ - 1
    rows = [((step * BATCH + b) * SEQ) % span for b in range(BATCH)]
    return [list(data[s:s + SEQ]) for s in rows], [list(data[s + 1:s + SEQ + 1]) for s in rows]


def config(model_type, **extra):
    c = dict(model_type=model_type, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=256, rms_norm_eps=1e-6, rope_theta=10000.0, max_position_embeddings=64,
             tie_word_embeddings=False, torch_dtype="float32")
    c.update(extra)
    return c


MODELS = {
    "llama": config("llama"),
    "mistral": config("mistral", tie_word_embeddings=True, sliding_window=None),
    "qwen2": config("qwen2", rope_theta=1000000.0),
    "qwen3": config("qwen3", head_dim=16, attention_bias=False),
    "llama_bias": config("llama", attention_bias=True, rope_theta=500000.0),
    "mixtral": config("mixtral", num_local_experts=4, num_experts_per_tok=2, router_aux_loss_coef=0.0, sliding_window=None),
    "qwen3_moe": config("qwen3_moe", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24, norm_topk_prob=False,
                        router_aux_loss_coef=0.0),
    "qwen2_moe": config("qwen2_moe", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24, norm_topk_prob=False,
                        shared_expert_intermediate_size=40, router_aux_loss_coef=0.0, decoder_sparse_step=1,
                        mlp_only_layers=[], use_sliding_window=False),
}


def write_model(folder, cfg, seed):
    """A transformers model of `cfg`, random weights (norm scales near 1), saved under `folder`."""
    import torch
    import transformers
    os.makedirs(folder, exist_ok=True)
    json.dump(cfg, open(os.path.join(folder, "config.json"), "w"))
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(folder))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2 + (1.0 if "norm" in name else 0.0))
    model.save_pretrained(folder)
    return os.path.join(folder, "model.safetensors")


def load(folder):
    import torch
    import transformers
    return transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")


def reference_loss(model, data, step=0):
    """transformers' logits, the cross-entropy of the next byte at every position taken by hand."""
    import torch
    ids, targets = windows(data, step)
    logits = model(input_ids=torch.tensor(ids)).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.tensor(targets).reshape(-1))


def autoddl_step(folder, weights, data_path, np, mesh, strategy, grads):
    r = run(np, "--model", hf_spec(folder), "--mesh", mesh, "--strategy", strategy,
            "--data", data_path, "--steps", "1", "--optimizer", "sgd", "--init-from", weights, "--export-grads", grads, "--json")
    if r.returncode != 0:
        return None, r.stderr.strip()
    return json.loads(r.stdout)["losses"][0], ""


def saved_gradients(model, folder):
    """transformers' gradients under the names its checkpoints use (one tensor per expert where the
    model fuses its experts): the gradients put in the parameters' place and saved by save_pretrained."""
    import torch
    from safetensors.torch import load_file
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.grad)
    model.save_pretrained(folder)
    return load_file(os.path.join(folder, "model.safetensors"))


def compare_gradients(want, grads_path):
    """The largest difference of any gradient relative to its tensor's largest value, and where."""
    from safetensors.torch import load_file
    got = load_file(grads_path)
    worst, where = 0.0, ""
    if set(got) != set(want):
        return float("inf"), f"the names differ: {sorted(set(got) ^ set(want))[:6]}"
    for name, g in want.items():
        e = ((got[name] - g).abs().max() / g.abs().max()).item()
        if e > worst:
            worst, where = e, name
    return worst, where


def equality(tmp, data, data_path):
    cases = [(kind, 1, "1", "auto") for kind in MODELS] + [("llama_bias", 4, "2x2", "megatron:tp=2,dp=2"),
                                                          ("mixtral", 4, "2x2", "megatron:ep=2,dp=2"),
                                                          ("qwen2_moe", 4, "2x2", "megatron:tp=2,dp=2")]
    for seed, (kind, np, mesh, strategy) in enumerate(cases):
        folder = os.path.join(tmp, kind)
        weights = write_model(folder, MODELS[kind], seed) if np == 1 else os.path.join(folder, "model.safetensors")
        model = load(folder)
        loss = reference_loss(model, data)
        loss.backward()
        grads = os.path.join(tmp, f"{kind}-{np}.grads.safetensors")
        got, err = autoddl_step(folder, weights, data_path, np, mesh, strategy, grads)
        what = f"{kind} on {np} rank(s), {strategy}"
        if got is None:
            check(what + ": autoddl-train runs", False, err)
            continue
        rel = abs(got - loss.item()) / abs(loss.item())
        print(f"     {what}: loss autoddl {got:.9f}, transformers {loss.item():.9f} (relative {rel:.1e})")
        check(what + ": the loss within 1e-5 of transformers'", rel <= 1e-5, f"{rel:.2e}")
        worst, where = compare_gradients(saved_gradients(model, os.path.join(tmp, f"{kind}-{np}-grads")), grads)
        print(f"     {what}: largest gradient difference {worst:.2e} of its tensor's largest value ({where})")
        check(what + ": every gradient within 1e-5 of transformers'", worst <= 1e-5, f"{worst:.2e} at {where}")


def hf_spec(folder):
    """The model autoddl-train builds from folder's config.json; a mixture of experts routed without
    dropping tokens (capacity=0), as transformers routes, and without the balancing loss (its
    router_aux_loss_coef 0: transformers adds none to logits)."""
    moe = "num_experts_per_tok" in json.load(open(os.path.join(folder, "config.json")))
    return f"hf:{folder}/config.json:seq={SEQ},batch={BATCH}" + (",capacity=0" if moe else "")


def round_trip(tmp):
    """autoddl's initial weights -> transformers -> save_pretrained -> autoddl (4 ranks, tp) -> the same bytes."""
    import shutil
    first, second = os.path.join(tmp, "rt-autoddl"), os.path.join(tmp, "rt-transformers")
    os.makedirs(first, exist_ok=True)
    json.dump(MODELS["qwen3"], open(os.path.join(first, "config.json"), "w"))
    exported = os.path.join(tmp, "rt-a.safetensors")
    r = run(1, "--model", hf_spec(first), "--mesh", "1", "--steps", "0", "--export-weights", exported)
    check("--steps 0 --export-weights writes autoddl's initial weights", r.returncode == 0 and os.path.exists(exported),
          r.stderr.strip())
    if r.returncode != 0:
        return
    shutil.copy(exported, os.path.join(first, "model.safetensors"))
    import transformers
    model, info = transformers.AutoModelForCausalLM.from_pretrained(first, output_loading_info=True)
    unmatched = {k: v for k, v in info.items() if v}
    check("transformers loads autoddl's export with no missing, unexpected or mismatched tensor", not unmatched, str(unmatched))
    model.save_pretrained(second)
    again = os.path.join(tmp, "rt-b.safetensors")
    r = run(4, "--model", hf_spec(first), "--mesh", "2x2", "--strategy", "megatron:tp=2,dp=2", "--steps", "0",
            "--init-from", os.path.join(second, "model.safetensors"), "--export-weights", again)
    same = r.returncode == 0 and open(exported, "rb").read() == open(again, "rb").read()
    check("autoddl -> transformers save_pretrained -> autoddl (tp=2 x dp=2) -> export: the same bytes", same,
          r.stderr.strip() or "the files differ")


def trained_on_four_ranks(tmp, data, data_path):
    """3 SGD steps under tp=2 x dp=2, exported; transformers' loss of the export is the one autoddl prints for it."""
    folder = os.path.join(tmp, "trained")
    start = write_model(folder, MODELS["llama"], 7)
    exported = os.path.join(tmp, "trained.safetensors")
    common = ["--model", hf_spec(folder), "--mesh", "2x2", "--strategy", "megatron:tp=2,dp=2", "--data", data_path,
              "--optimizer", "sgd", "--lr", "0.05", "--json"]
    r = run(4, *common, "--steps", "3", "--init-from", start, "--export-weights", exported)
    check("autoddl-train on 4 ranks (tp=2 x dp=2) trains and exports", r.returncode == 0, r.stderr.strip())
    if r.returncode != 0:
        return
    losses = json.loads(r.stdout)["losses"]
    r = run(4, *common, "--steps", "1", "--init-from", exported)
    check("autoddl-train --init-from the export runs", r.returncode == 0, r.stderr.strip())
    if r.returncode != 0:
        return
    printed = json.loads(r.stdout)["losses"][0]
    os.replace(exported, os.path.join(folder, "model.safetensors"))
    import torch
    with torch.no_grad():
        ref = reference_loss(load(folder), data).item()
    rel = abs(printed - ref) / abs(ref)
    print(f"     trained 3 steps (losses {', '.join(f'{x:.5f}' for x in losses)}); the export's loss: autoddl {printed:.7f},"
          f" transformers {ref:.7f} (relative {rel:.1e})")
    check("the trained model's loss in transformers is autoddl's within 1e-5", rel <= 1e-5, f"{rel:.2e}")
    check("training moved the weights (the export's loss is not the start's)", abs(printed - losses[0]) > 1e-3,
          f"{printed} vs {losses[0]}")


def st_read(path):
    """A safetensors file's header (JSON) and data, read by the format's definition."""
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]


def st_bytes(header, data):
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def retyped(header, data, dtype, code):
    """Every tensor of an F32 file in `dtype` (struct code `code`, or "bf16": float32 bits rounded to nearest even)."""
    out_h, out, at = {"__metadata__": header.get("__metadata__", {})}, b"", 0
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        floats = struct.unpack(f"<{(end - b) // 4}f", data[b:end])
        if code == "bf16":
            bits = struct.unpack(f"<{len(floats)}I", data[b:end])
            raw = struct.pack(f"<{len(bits)}H", *[((x + 0x7FFF + ((x >> 16) & 1)) >> 16) & 0xFFFF for x in bits])
        else:
            raw = struct.pack(f"<{len(floats)}{code}", *floats)
        out_h[name] = {"dtype": dtype, "shape": e["shape"], "data_offsets": [at, at + len(raw)]}
        out, at = out + raw, at + len(raw)
    return out_h, out


def widened(header, data):
    """{name: values as float} of a file of F32, F64, F16 or BF16 tensors."""
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        if e["dtype"] == "BF16":
            out[name] = [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in struct.unpack(f"<{(end - b) // 2}H", data[b:end])]
        else:
            code, size = {"F32": ("f", 4), "F64": ("d", 8), "F16": ("e", 2)}[e["dtype"]]
            out[name] = [struct.unpack("<f", struct.pack("<f", v))[0] for v in struct.unpack(f"<{(end - b) // size}{code}", data[b:end])]
    return out


def refusals(tmp):
    folder = os.path.join(tmp, "llama")
    os.makedirs(folder)
    json.dump(MODELS["llama"], open(os.path.join(folder, "config.json"), "w"))
    model = ["--model", hf_spec(folder), "--mesh", "1"]
    good = os.path.join(tmp, "good.safetensors")
    r = run(1, *model, "--steps", "0", "--export-weights", good)
    check("--steps 0 --export-weights writes a file", r.returncode == 0, r.stderr.strip())
    if r.returncode != 0:
        return
    header, data = st_read(good)
    text_len = struct.unpack("<Q", open(good, "rb").read(8))[0]
    layer = ["input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
             "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
    names = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"} | {
        f"model.layers.{n}.{m}.weight" for n in range(2) for m in layer}
    check("the export holds the Hugging Face names, nothing else", set(header) - {"__metadata__"} == names,
          str(sorted(set(header) ^ names)))
    spans = sorted(e["data_offsets"] for n, e in header.items() if n != "__metadata__")
    check("the header is padded to a multiple of 8 and the data packed in order, with format pt",
          text_len % 8 == 0 and spans[0][0] == 0 and all(a[1] == b[0] for a, b in zip(spans, spans[1:])) and
          spans[-1][1] == len(data) and header.get("__metadata__") == {"format": "pt"}, str(spans[:3]))
    check("q_proj is [out, in] = [32, 32], k_proj [16, 32], gate_proj [48, 32], lm_head [256, 32]",
          header["model.layers.0.self_attn.k_proj.weight"]["shape"] == [16, 32] and
          header["model.layers.1.mlp.gate_proj.weight"]["shape"] == [48, 32] and
          header["lm_head.weight"]["shape"] == [256, 32], "")
    for dtype, code in [("F64", "d"), ("F16", "e"), ("BF16", "bf16")]:
        h, d = retyped(header, data, dtype, code)
        path, back = os.path.join(tmp, dtype + ".safetensors"), os.path.join(tmp, dtype + "-back.safetensors")
        open(path, "wb").write(st_bytes(h, d))
        r = run(1, *model, "--steps", "0", "--init-from", path, "--export-weights", back)
        ok = r.returncode == 0 and widened(*st_read(back)) == widened(h, d)
        check(f"an {dtype} file is read as its values widened to fp32", ok, r.stderr.strip() or "values differ")
    q = "model.layers.0.self_attn.q_proj.weight"
    cut = dict(header)
    del cut["model.norm.weight"]
    wide = dict(header, **{"model.layers.1.mlp.gate_proj.weight": dict(header["model.layers.1.mlp.gate_proj.weight"], shape=[32, 48])})
    norm = header["model.norm.weight"]
    extra = dict(header, **{"model.layers.2.mlp.up_proj.weight": dict(norm, data_offsets=[len(data), len(data) + 128])})
    odd = dict(header, **{"model.norm.weight": dict(norm, dtype="I32")})
    whole = open(good, "rb").read()
    for what, contents, says in [
            ("a truncated file", whole[:-100], "outside the file's"),
            ("a tensor missing", st_bytes(cut, data), "lacks the tensor 'model.norm.weight'"),
            ("a tensor of another shape", st_bytes(wide, data), "has shape [32,48]; the model's parameter 'h1.mlp.gate.W' needs [48,32]"),
            ("a tensor of another model", st_bytes(extra, data + bytes(128)), "which this model has no parameter for"),
            ("an integer tensor", st_bytes(odd, data), "has dtype \"I32\"; autoddl reads F32, F64, BF16 and F16"),
            ("a missing file", None, "is missing or not a file")]:
        path = os.path.join(tmp, "bad.safetensors")
        if os.path.exists(path):
            os.remove(path)
        if contents is not None:
            open(path, "wb").write(contents)
        r = run(1, *model, "--steps", "1", "--init-from", path)
        lines = r.stderr.strip().splitlines()
        first = lines[0] if lines else ""  # (mpirun adds its own lines after a non-zero exit)
        check(f"--init-from {what}: exit 2, one sentence", r.returncode == 2 and says in first and
              (first.startswith("autoddl-train: --init-from ") or first.startswith("autoddl-train: safetensors file")),
              f"exit {r.returncode}: {r.stderr.strip()[:300]}")
    scaled = os.path.join(tmp, "scaled")
    os.makedirs(scaled)
    json.dump(dict(MODELS["llama"], rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0}),
              open(os.path.join(scaled, "config.json"), "w"))
    r = run(1, "--model", hf_spec(scaled), "--mesh", "1", "--steps", "0", "--export-weights", os.path.join(tmp, "s.safetensors"))
    check("a config that scales its rotary embedding: exported, with a note that autoddl's model computes another function",
          r.returncode == 0 and "autoddl-train note: hf config" in r.stderr and "rope_type \"llama3\"" in r.stderr, r.stderr.strip()[:300])
    r = run(1, *model, "--steps", "1", "--export-weights", os.path.join(tmp, "no", "such", "w.safetensors"))
    check("--export-weights into a missing folder: exit 2 before training", r.returncode == 2 and
          "there is no folder" in r.stderr and "aborting" not in r.stderr, r.stderr.strip()[:300])
    r = run(1, "--model", "gpt:layers=1,hidden=32,heads=4,seq=8,batch=4,vocab=64", "--mesh", "1", "--steps", "1",
            "--export-weights", os.path.join(tmp, "gpt.safetensors"))
    check("--export-weights of a GPT: exit 2, naming a parameter without a Hugging Face name",
          r.returncode == 2 and "has no Hugging Face name" in r.stderr, r.stderr.strip()[:300])


if part == "refusals":
    with tempfile.TemporaryDirectory() as tmp:
        refusals(tmp)
    finish()
if part in ("equality", "trained"):
    torch_or_skip(root)
    import torch
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        data = bytes(torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(1)).tolist())
        data_path = os.path.join(tmp, "data.bin")
        open(data_path, "wb").write(data)
        if part == "equality":
            equality(tmp, data, data_path)
        else:
            round_trip(tmp)
            trained_on_four_ranks(tmp, data, data_path)
    finish()
