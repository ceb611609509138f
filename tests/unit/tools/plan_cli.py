#!/usr/bin/env python3
"""autoddl-plan as a user meets it: bad input is one sentence on stderr and exit code 2 (never a
crash), --json is one object with the documented fields, --svg writes a picture, --compare
reports speedups."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

plan = sys.argv[1]
small = "gpt:layers=2,hidden=64,heads=4,seq=32,batch=8,vocab=128"
failures = []


def run(*args):
    return subprocess.run([plan, *args], capture_output=True, text=True, timeout=120)


def expect_error(what, args, needle):
    r = run(*args)
    lines = [l for l in r.stderr.strip().splitlines() if l]
    ok = r.returncode == 2 and len(lines) == 1 and needle in r.stderr and r.stdout == ""
    print(("ok  " if ok else "FAIL") + f" {what}: exit {r.returncode}: {r.stderr.strip()}")
    if not ok:
        failures.append(what)


tmp = tempfile.mkdtemp()
bad_json = os.path.join(tmp, "bad.json")
open(bad_json, "w").write('{"name": "x", "devices_per_node": 8,')
zero_json = os.path.join(tmp, "zero.json")
good = json.loads(subprocess.run([plan, "--model", small, "--mesh", "4", "--hardware", "dgx1-v100", "--json"], capture_output=True, text=True).stdout)

expect_error("unknown model", ["--model", "resnet:layers=2"], "unknown model 'resnet'")
expect_error("unknown key", ["--model", "gpt:layres=2"], "unknown key 'layres'")
expect_error("malformed mesh", ["--model", small, "--mesh", "2y4"], "mesh")
expect_error("unknown hardware preset", ["--model", small, "--hardware", "tpu-v9"], "tpu-v9")
expect_error("missing hardware file", ["--model", small, "--hardware", os.path.join(tmp, "none.json")], "none.json")
expect_error("malformed hardware JSON", ["--model", small, "--hardware", bad_json], "bad.json")
expect_error("infeasible memory limit", ["--model", small, "--mesh", "4", "--memory-limit", "1KiB"], "memory limit")
expect_error("bad memory size", ["--model", small, "--memory-limit", "12parsecs"], "unknown unit")
expect_error("unknown strategy", ["--model", small, "--strategy", "pipedream"], "unknown strategy 'pipedream'")
expect_error("unknown plan to compare", ["--model", small, "--compare", "dp,tp"], "unknown strategy 'tp'")
expect_error("a batch the mesh does not divide", ["--model", "mlp:batch=6", "--mesh", "4", "--strategy", "dp"],
             "cannot take its batch split")
expect_error("2d on a 1-D mesh", ["--model", small, "--mesh", "4", "--strategy", "2d"], "2-D mesh")
expect_error("unknown dtype", ["--model", small, "--dtype", "fp8"], "fp8")
expect_error("unknown option", ["--model", small, "--meshh", "4"], "meshh")
expect_error("heads not dividing hidden", ["--model", "gpt:layers=1,hidden=66,heads=4"], "heads")
expect_error("micro-batches not dividing the batch", ["--model", small, "--microbatches", "3"],
             "--microbatches 3 does not divide the batch of 8")
hf_unknown = os.path.join(tmp, "neox.json")
open(hf_unknown, "w").write('{"model_type": "gpt_neox", "hidden_size": 64}')
hf_missing = os.path.join(tmp, "nolayers.json")
open(hf_missing, "w").write('{"model_type": "llama", "hidden_size": 64, "intermediate_size": 96}')
expect_error("hf config of an unknown model_type", ["--model", "hf:" + hf_unknown], "model_type 'gpt_neox'")
expect_error("hf config missing a field", ["--model", "hf:" + hf_missing], "lacks the field 'num_hidden_layers'")
expect_error("hf config that is not JSON", ["--model", "hf:" + bad_json], "is not valid JSON")
expect_error("llama kv_heads not dividing heads", ["--model", "llama:layers=1,hidden=64,heads=4,kv_heads=3"],
             "kv_heads=3 does not divide heads=4")
moe = "llama:layers=1,hidden=64,heads=4,kv_heads=2,ffn=64,seq=16,batch=8,vocab=96,experts=4"
expect_error("topk above the experts", ["--model", moe + ",topk=5"], "topk=5 must lie in [1, experts=4]")
expect_error("a negative capacity", ["--model", moe + ",capacity=-1"], "is not a non-negative decimal")
expect_error("ep not dividing the experts", ["--model", moe, "--mesh", "2x3", "--strategy", "megatron:tp=3,ep=3"],
             "megatron ep=3 does not divide the 4 experts")
expect_error("ep without experts", ["--model", small, "--mesh", "4", "--strategy", "megatron:ep=4"],
             "needs a model with experts")
expect_error("--seq on a model without a sequence", ["--model", "mlp", "--seq", "16"], "model mlp has no sequence")
expect_error("--batch not positive", ["--model", small, "--batch", "0"], "--batch 0 is not a positive whole number")
expect_error("micro-batches not a number", ["--model", small, "--microbatches", "two"], "positive whole number or auto")
expect_error("unknown recomputation", ["--model", small, "--recompute", "some"], "unknown recomputation 'some'")
expect_error("tp not dividing the innermost axis", ["--model", small, "--mesh", "2x4", "--strategy", "megatron:tp=3"],
             "must divide the innermost axis of mesh 2x4")
# an expert whose rules the mesh does not fit is no such plan (megatron splits 3 ways on 3x3, this
# 3-head GPT's batch of 8 and sequence of 32 do not): one sentence naming the op, the weight and the
# mesh; its twin fits
expect_error("megatron on a mesh its rules do not fit",
             ["--model", "gpt:layers=2,hidden=48,heads=3,seq=32,batch=8,vocab=128", "--mesh", "3x3", "--strategy", "megatron"],
             "the megatron rules do not fit mesh 3x3: op 'h0.attn.q' (input [8,32,48], weight [48,48])")
expect_error("2d on a mesh its rules do not fit", ["--model", small, "--mesh", "3x3", "--strategy", "2d"],
             "the 2d rules do not fit mesh 3x3")
r = run("--model", "gpt:layers=2,hidden=48,heads=3,seq=33,batch=9,vocab=129", "--mesh", "3x3", "--strategy", "megatron",
        "--json")
check_ok = r.returncode == 0 and not any("could not follow" in n for n in json.loads(r.stdout)["notes"])
print(("ok  " if check_ok else "FAIL") + " megatron on 3x3 plans a GPT whose dimensions split 3 ways: " + r.stderr.strip())
if not check_ok:
    failures.append("megatron on 3x3, dimensions divisible by 3")
expect_error("tp x dp not the device count", ["--model", small, "--mesh", "2x4", "--strategy", "megatron:tp=2,dp=2"],
             "tp=2 x dp=2 is 4 devices, but mesh 2x4 has 8")
expect_error("mbs x dp not dividing the batch", ["--model", small, "--mesh", "2x4", "--strategy", "megatron:tp=4,mbs=3"],
             "mbs=3 x dp=2 does not divide the batch of 8")
expect_error("a model no setting fits names its largest term and a mesh",
             ["--model", small, "--mesh", "2", "--memory-limit", "1MB"], "most of it")

for field in ["model", "mesh", "hardware", "strategy", "dtype", "params", "flops_per_step", "predicted_step_s",
              "compute_s", "comm_s", "comm_bytes_per_device", "peak_bytes_per_device", "peak_at", "memory_limit_bytes",
              "device_memory_bytes", "memory_reserve_fraction", "search_s", "search_parts_s", "optimal_gap",
              "layers", "microbatches", "micro_batch_size", "recompute", "memory_breakdown_bytes"]:
    if field not in good:
        failures.append("json field " + field)
for layer in good["layers"]:
    for field in ["name", "op", "signature", "compute_s", "comm_bytes", "comm_s", "memory_bytes", "lower_bound_bytes"]:
        if field not in layer:
            failures.append("layer field " + field)
if good["mesh"] != [4] or good["strategy"] != "auto":
    failures.append("json values")
if abs(sum(l["comm_bytes"] for l in good["layers"]) - good["comm_bytes_per_device"]) > 1e-6 * good["comm_bytes_per_device"]:
    failures.append("layer bytes do not add up to comm_bytes_per_device")
# search_s is the whole planning; its parts are the phases and the rest, each at least 0 and
# together search_s (the rest is what the phases leave, so they never exceed it by much)
parts = good.get("search_parts_s", {})
if sorted(parts) != ["exact_reference", "layout_search", "megatron_layouts", "other", "pipeline_search"] or \
        min(parts.values()) < 0 or abs(sum(parts.values()) - good["search_s"]) > 1e-3 + 1e-6 * good["search_s"]:
    failures.append("search_parts_s: " + json.dumps(parts) + " against search_s " + str(good.get("search_s")))
if sorted(good["memory_breakdown_bytes"]) != ["activations", "gradients", "optimizer", "parameters", "transient"]:
    failures.append("the memory breakdown's terms")
for gone in ["memory_bytes_per_device", "step_peak_bytes_per_device"]:  # one peak figure
    if gone in good:
        failures.append("json field " + gone + " beside peak_bytes_per_device")
print("ok   --json has every documented field" if not failures else "FAIL json")

# pinned micro-batches and recomputation, and Megatron-LM's knobs, reach the plan
r = run("--model", small, "--mesh", "2x2", "--microbatches", "4", "--recompute", "full", "--json")
j = json.loads(r.stdout) if r.returncode == 0 else {}
ok = j.get("microbatches") == 4 and j.get("micro_batch_size") == 2 and j.get("recompute") == "full"
print(("ok  " if ok else "FAIL") + " --microbatches 4 --recompute full: " + r.stderr.strip())
if not ok:
    failures.append("pinned micro-batches")
r = run("--model", small, "--mesh", "2x4", "--strategy", "megatron:tp=2,mbs=1,recompute=selective", "--json")
j = json.loads(r.stdout) if r.returncode == 0 else {}
ok = j.get("mesh") == [2, 2, 2] and j.get("microbatches") == 2 and j.get("recompute") == "selective"
print(("ok  " if ok else "FAIL") + " megatron:tp=2,mbs=1,recompute=selective plans on 2x2x2 with 2 micro-batches: " + r.stderr.strip())
if not ok:
    failures.append("megatron knobs")

# The same plan at any load: the exact reference's budget is work, not seconds, so the
# JSON of a plan whose reference is near its budget is the same beside two busy processes
# (timings aside)
def plan_json_without_timings(args):
    r = run(*args, "--json")
    j = json.loads(r.stdout) if r.returncode == 0 else {}
    j.pop("search_s", None)
    j.pop("search_parts_s", None)
    return j


near_budget = ["--model", "gpt:size=gpt2-medium", "--mesh", "4x4x8", "--hardware", "dgx-a100", "--dtype", "bf16"]
quiet = plan_json_without_timings(near_budget)
spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
try:
    loaded = plan_json_without_timings(near_budget)
finally:
    for p in spinners:
        p.kill()
ok = quiet != {} and quiet == loaded
print(("ok  " if ok else "FAIL") + " the same plan JSON quiet and beside two busy processes")
if not ok:
    failures.append("plan at any load")

# Pipelines: bad input is one sentence; a megatron pp plan reports its stages.
expect_error("pp not dividing the outermost axis", ["--model", small, "--mesh", "2x4", "--strategy", "megatron:tp=4,pp=3"],
             "pp=3 must divide the outermost axis of mesh 2x4")
expect_error("more stages than layers", ["--model", small, "--mesh", "8x1", "--strategy", "megatron:tp=1,pp=8"],
             "a pipeline of 8 stages needs at least as many layers, but the model has 5")
expect_error("tp x pp x dp not the device count", ["--model", small, "--mesh", "2x4", "--strategy", "megatron:tp=2,pp=2,dp=4"],
             "tp=2 x pp=2 x dp=4 is 16 devices, but mesh 2x4 has 8")
r = run("--model", small, "--mesh", "2x4", "--strategy", "megatron:tp=4,pp=2,mbs=1", "--json")
j = json.loads(r.stdout) if r.returncode == 0 else {}
pipe = j.get("pipeline", {})
ok = (j.get("pipeline_stages") == 2 and j.get("microbatches") == 8 and len(pipe.get("cuts", [])) == 2
      and pipe.get("bubble") == 1 / 8 and len(pipe.get("stages", [])) == 2
      and all(s["per_microbatch_s"] > 0 for s in pipe.get("stages", []))
      and "exact_status" in pipe.get("layout_reference", {}) and "exact_status" not in j)
print(("ok  " if ok else "FAIL") + " megatron:tp=4,pp=2,mbs=1: 2 stages, 8 micro-batches, bubble 1/8: " + r.stderr.strip())
if not ok:
    failures.append("megatron pipeline json")
pipe_f = os.path.join(tmp, "pipe.json")
r = run("--model", small, "--mesh", "2x4", "--strategy", "megatron:tp=4,pp=2,mbs=1", "--out", pipe_f)
sc = json.load(open(pipe_f))["schedule"] if r.returncode == 0 else {}
ok = (sc.get("stages") == 2 and sc.get("pipeline_mesh") == [2, 4] and len(sc.get("cuts", [])) == 2
      and sc["cuts"][0] == 0 and json.load(open(pipe_f))["mesh"] == [4])
print(("ok  " if ok else "FAIL") + " the plan file of a pipeline carries stages, cuts and the whole mesh: " + str(sc))
if not ok:
    failures.append("pipeline plan file")
if r.returncode == 0:
    bad_cuts = json.load(open(pipe_f))
    bad_cuts["schedule"]["cuts"] = [1, 16]
    bad_cuts_f = os.path.join(tmp, "bad_cuts.json")
    json.dump(bad_cuts, open(bad_cuts_f, "w"))
    expect_error("a pipeline plan file whose cuts do not start at op 0", ["--diff", bad_cuts_f, pipe_f],
                 "field 'schedule.cuts' must list the first op of each of the 2 stages, ascending from 0")
r = run("--model", small, "--mesh", "4", "--json")
ok = r.returncode == 0 and json.loads(r.stdout).get("pipeline_stages") == 1
print(("ok  " if ok else "FAIL") + " a plan without a pipeline says pipeline_stages 1")
if not ok:
    failures.append("pipeline_stages 1")

# ZeRO's stages: optimizer state (1), and gradients (2), and parameters (3) sharded over mesh 4;
# the table says where the optimizer state lives; the replayed step peak is in the JSON
mem = {}
for stage in ["1", "2", "3"]:
    r = run("--model", small, "--mesh", "4", "--strategy", "zero:stage=" + stage, "--json")
    j = json.loads(r.stdout) if r.returncode == 0 else {}
    mem[stage] = j.get("memory_breakdown_bytes", {})
    ok = j.get("strategy") == ("zero" if stage == "3" else "zero:stage=" + stage) and j.get("peak_bytes_per_device", 0) > 0
    print(("ok  " if ok else "FAIL") + " --strategy zero:stage=" + stage + ": " + r.stderr.strip())
    if not ok:
        failures.append("zero stage " + stage)
# (stage 3's "parameters" also hold the copies gathered for compute, kept from forward to
# backward: its stored shards are smaller, its peak parameters not)
ok = (mem["1"].get("optimizer") == mem["2"].get("optimizer") == mem["3"].get("optimizer") and
      mem["1"].get("parameters") == mem["2"].get("parameters") and
      mem["1"].get("gradients", 0) > mem["2"].get("gradients", 0) == mem["3"].get("gradients"))
print(("ok  " if ok else "FAIL") + " ZeRO stages shard optimizer state, then gradients: " + str(mem))
if not ok:
    failures.append("zero stages' memory")
r = run("--model", small, "--mesh", "4", "--strategy", "zero:stage=2")
ok = r.returncode == 0 and "optimizer state and gradient in [S(" in r.stdout
print(("ok  " if ok else "FAIL") + " the zero:stage=2 table names the optimizer state's layout")
if not ok:
    failures.append("zero stage table")

svg = os.path.join(tmp, "plan.svg")
r = run("--model", small, "--mesh", "2x2", "--svg", svg, "--compare", "dp,megatron")
if r.returncode != 0 or not open(svg).read().startswith("<svg") or "vs dp" not in r.stdout or "vs megatron" not in r.stdout:
    failures.append("svg/compare")
    print("FAIL --svg/--compare", r.stderr)
else:
    print("ok   --svg writes a picture; --compare prints both plans")

r = run("--model", small, "--mesh", "2x2", "--compare", "dp", "--json")
j = json.loads(r.stdout)
if j["compare"]["dp"]["speedup"] < 1 - 1e-9:
    failures.append("auto slower than dp")


def check(what, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else ": " + detail))
    if not ok:
        failures.append(what)


# defaults from the input: the dtype an hf config was saved in (where the hardware prices it),
# and a note for each default taken (batch, sequence)
tiny_hf = "hf:" + os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples", "models",
                               "tiny-llama-config.json")
for what, extra, dtype, needles in [
        ("an hf config's torch_dtype is the default dtype", [], "bf16",
         ["dtype bf16 from the config's torch_dtype 'bfloat16'", "batch 8: the config names no batch",
          "seq 16 from the config's max_position_embeddings"]),
        ("--dtype overrides torch_dtype; --batch and --seq leave no note", ["--dtype", "fp32", "--batch", "8", "--seq", "16"],
         "fp32", [])]:
    r = run("--model", tiny_hf, "--mesh", "8", "--hardware", "dgx-h100", "--json", *extra)
    j = json.loads(r.stdout) if r.returncode == 0 else {}
    notes = " | ".join(j.get("notes", []))
    check(what, j.get("dtype") == dtype and all(n in notes for n in needles)
          and (needles or ("torch_dtype" not in notes and "names no batch" not in notes and "max_position" not in notes)),
          r.stderr + notes)
r = run("--model", tiny_hf, "--mesh", "8", "--hardware", "dgx1-v100", "--json")  # a V100 has no bf16
j = json.loads(r.stdout) if r.returncode == 0 else {}
check("a torch_dtype the hardware has no peak for keeps fp32, with a note",
      j.get("dtype") == "fp32" and any("torch_dtype 'bfloat16' has no peak in hardware 'dgx1-v100'" in n for n in j.get("notes", [])),
      r.stderr + str(j.get("notes")))

# a qwen2_moe config (examples/models): routed experts, a shared SwiGLU behind a sigmoid gate.
# Parameters by hand: per layer q, k, v, o 4 H H and q, k, v biases 3 H, the router H E, E experts
# of 3 H F, the shared SwiGLU 3 H S and its gate H, two norms 2 H; embedding and head 2 V H, norm H.
tiny_qwen2_moe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples", "models",
                              "tiny-qwen2-moe-config.json")
r = run("--model", "hf:" + tiny_qwen2_moe, "--mesh", "8", "--hardware", "dgx-h100", "--json")
j = json.loads(r.stdout) if r.returncode == 0 else {}
V, H, E, F, S, L = 96, 64, 8, 32, 128, 2
want = 2 * V * H + H + L * (4 * H * H + 3 * H + H * E + E * 3 * H * F + 3 * H * S + H + 2 * H)
check("a qwen2_moe config plans, its parameters the closed form's", j.get("params") == want and j.get("feasible") is True,
      r.stderr[-500:] + " params " + str(j.get("params")) + " want " + str(want))

# --compare with a plan the model cannot take (dp cannot split a batch of 2 over 4 devices):
# reported as not applicable, the rest of the comparison stands
r = run("--model", small.replace("batch=8", "batch=2"), "--mesh", "4", "--compare", "dp,megatron", "--json")
check("--compare with an inapplicable plan still succeeds", r.returncode == 0, r.stderr[-500:])
if r.returncode == 0:
    c = json.loads(r.stdout)["compare"]
    check("the inapplicable plan is reported with its reason, the others priced",
          c["dp"]["applicable"] is False and "dp" in c["dp"]["reason"] and c["megatron"]["applicable"] is True, str(c))
    j2 = json.loads(r.stdout)
    check("runner-up times are times or null, never a sentinel",
          all(l.get("runner_up_step_s") is None or l["runner_up_step_s"] < 1e6 for l in j2["layers"]))
r = run("--model", small.replace("batch=8", "batch=2"), "--mesh", "4", "--compare", "dp")
check("the table says 'not applicable'", r.returncode == 0 and "vs dp        not applicable: " in r.stdout, r.stdout[-400:])

# the picture: well-formed SVG with op names, weight layouts, a time axis, memory against the
# limit and the compared plans; 24 repeated blocks drawn once
import xml.etree.ElementTree as ET
svg24 = os.path.join(tmp, "gpt24.svg")
r = run("--model", "gpt:layers=24,hidden=1024,heads=16,seq=1024,batch=8,vocab=50257", "--mesh", "2x4", "--compare",
        "dp,megatron", "--svg", svg24)
text = open(svg24).read() if r.returncode == 0 else ""
try:
    ET.fromstring(text)
    well_formed = True
except ET.ParseError:
    well_formed = False
check("--svg writes well-formed SVG", well_formed)
for needle in ["h0.attn.q (linear)", "lm_head (linear)", "weight", "h0-h23 x24", "peak memory per device",
               "predicted step per plan", ">dp<", ">megatron<", " ms<"]:
    check(f"the SVG shows '{needle}'", needle in text)
check("the SVG draws one block of 24", "h5.attn.q" not in text)
# a pipeline's picture: a heading per stage, in order, before the stage's first op; blocks fold within a stage
svg_pp = os.path.join(tmp, "gpt24-pp.svg")
r = run("--model", "gpt:layers=24,hidden=1024,heads=16,seq=1024,batch=8,vocab=50257", "--mesh", "2x4", "--strategy",
        "megatron:tp=4,pp=2", "--svg", svg_pp, "--json")
text = open(svg_pp).read() if r.returncode == 0 else ""
cuts = json.loads(r.stdout)["pipeline"]["cuts"] if r.returncode == 0 else []
heads = [text.find(">stage %d: " % i) for i in range(3)]
firsts = [text.find(">" + c + " (") for c in cuts]
check("a pipeline's SVG heads each stage before its first op and names the bubble",
      len(cuts) == 2 and heads[2] == -1 and 0 < heads[0] < firsts[0] < heads[1] < firsts[1] and "bubble" in text,
      f"cuts {cuts}, headings at {heads}, first ops at {firsts}")

# the 24-layer GPT's table: repeated blocks laid out alike print once; --all-ops prints every op
gpt24 = "gpt:layers=24,hidden=1024,heads=16,seq=1024,batch=8,vocab=50257"
r = run("--model", gpt24, "--mesh", "2x4", "--compare", "dp,megatron,zero")
lines = r.stdout.splitlines()
check("the 24-layer GPT's table fits in 60 lines", r.returncode == 0 and len(lines) <= 60 and
      any(l.startswith("h0-h23 x24") for l in lines), f"{len(lines)} lines")
r = run("--model", gpt24, "--mesh", "2x4", "--all-ops")
check("--all-ops prints every op", r.returncode == 0 and sum(1 for l in r.stdout.splitlines() if l.startswith("h23.")) == 14,
      r.stdout[-300:])

# plans as files: --out writes every op's and parameter's layouts, the schedule and predictions
auto_f, meg_f = os.path.join(tmp, "auto.json"), os.path.join(tmp, "meg.json")
ra = run("--model", small, "--mesh", "2x2", "--out", auto_f, "--json", "--microbatches", "2", "--recompute", "full")
rm = run("--model", small, "--mesh", "2x2", "--out", meg_f, "--strategy", "megatron")
check("--out writes plan files", ra.returncode == 0 and rm.returncode == 0, ra.stderr + rm.stderr)
pa, pm = json.load(open(auto_f)), json.load(open(meg_f))
shown = json.loads(ra.stdout)
check("the plan file is versioned and names model, mesh, hardware, dtype",
      pa["format"] == "autoddl-plan" and pa["version"] == 2 and pa["model"] == small and pa["mesh"] == [2, 2]
      and pa["hardware"] == "cpu-local" and pa["dtype"] == "fp32")
check("the plan file holds a boxing entry per op and per parameter (the plan value autoddl-train --plan runs)",
      len(pa["boxing"]["ops"]) == len(pa["ops"]) and len(pa["boxing"]["params"]) == len(pa["params"])
      and any("forward" in slot for o in pa["boxing"]["ops"] for slot in o["inputs"] + o["params"]))
check("the plan file carries micro-batches, recomputation, what it gathers again for backward and stages",
      {k: v for k, v in pa["schedule"].items() if k not in ("regather_inputs", "reshard_after_forward")} ==
      {"microbatches": 2, "recompute": "full", "stages": 1}
      and all(pa["schedule"][k] is shown[k] for k in ("regather_inputs", "reshard_after_forward")), str(pa["schedule"]))
check("one entry per op and per parameter, as --json's layers",
      [o["name"] for o in pa["ops"]] == [l["name"] for l in shown["layers"]] and len(pa["params"]) > 0)
# each op's structured layouts are, in order, the bracketed layouts of --json's display string
import re
same = all(["[" + ",".join(l) + "]" for l in o["inputs"] + o["params"] + o["outputs"]] ==
           re.findall(r"\[[^\]]*\]", layer["signature"].split(" | ")[0]) for o, layer in zip(pa["ops"], shown["layers"]))
check("each op's structured layouts are the ones --json displays", same)
check("the predictions are --json's", pa["predicted"]["step_s"] == shown["predicted_step_s"]
      and pa["predicted"]["comm_bytes_per_device"] == shown["comm_bytes_per_device"])

# --diff: the ops whose layouts differ (counted here from the files) and the predicted deltas
differ = [a["name"] for a, b in zip(pa["ops"], pm["ops"])
          if (a["inputs"], a["params"], a["outputs"]) != (b["inputs"], b["params"], b["outputs"])]
r = run("--diff", auto_f, meg_f, "--json")
check("--diff runs without --model", r.returncode == 0, r.stderr)
if r.returncode == 0:
    d = json.loads(r.stdout)
    check("--diff lists exactly the ops whose layouts differ", [o["name"] for o in d["ops_differing"]] == differ,
          f'{len(d["ops_differing"])} vs {len(differ)}')
    check("--diff gives the predicted step-time difference",
          abs(d["predicted"]["step_s"][2] - (pm["predicted"]["step_s"] - pa["predicted"]["step_s"])) < 1e-15)
r = run("--diff", auto_f, meg_f)
check("--diff prints a readable summary", r.returncode == 0 and f"{len(differ)} of {len(pa['ops'])} ops" in r.stdout,
      r.stdout[:300])
other_f = os.path.join(tmp, "other.json")
run("--model", small.replace("layers=2", "layers=3"), "--mesh", "2x2", "--out", other_f)
expect_error("--diff of plans of different models", ["--diff", auto_f, other_f], "different models or device counts")
broken_f = os.path.join(tmp, "broken.json")
pb = json.loads(json.dumps(pa))
pb["format"] = "something"
json.dump(pb, open(broken_f, "w"))
expect_error("--diff of a file that is not a plan", ["--diff", auto_f, broken_f], "is not an autoddl plan")
pb = json.loads(json.dumps(pa))
del pb["ops"][3]["outputs"]
json.dump(pb, open(broken_f, "w"))
expect_error("a plan file missing a field names the field", ["--diff", auto_f, broken_f], "lacks the field 'outputs'")
# the same defaults as autoddl-train: the small GPT on 2x2, priced with cpu-local
r = run("--json")
j = json.loads(r.stdout) if r.returncode == 0 else {}
check("without --model, --mesh and --hardware: autoddl-train's small GPT on 2x2 with cpu-local",
      j.get("model") == "gpt:layers=2,hidden=64,heads=4,seq=32,batch=8,vocab=128" and j.get("mesh") == [2, 2]
      and j.get("hardware") == "cpu-local", r.stderr[-300:])
# models as files: every zoo model exported and read back plans identically
model_f = os.path.join(tmp, "model.json")
for spec in [small, "vgg11:image=32,classes=16,batch=8,fc=32", "vgg13:image=32,classes=16,batch=8,fc=32",
             "vgg16:image=32,classes=16,batch=8,fc=32", "vgg19:image=32,classes=16,batch=8,fc=32",
             "mlp:layers=3,hidden=64,batch=32,in=32,out=8", "bert:layers=2,hidden=64,heads=4,seq=32,batch=8,vocab=128"]:
    a = run("--model", spec, "--mesh", "2x2", "--export-model", model_f, "--json")
    b = run("--model", model_f, "--mesh", "2x2", "--json")
    ok = a.returncode == 0 and b.returncode == 0
    if ok:
        ja, jb = json.loads(a.stdout), json.loads(b.stdout)
        ok = ([l["signature"] for l in ja["layers"]] == [l["signature"] for l in jb["layers"]]
              and ja["predicted_step_s"] == jb["predicted_step_s"] and ja["params"] == jb["params"])
    check(spec.split(":")[0] + " exported as a model file plans identically", ok, a.stderr[-300:] + b.stderr[-300:])
hand = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples", "models", "two_layer_mlp.json")
r = run("--model", hand, "--mesh", "2", "--microbatches", "2", "--json")
check("a hand-written model file plans, with micro-batches", r.returncode == 0 and json.loads(r.stdout)["microbatches"] == 2,
      r.stderr[-300:])
base = json.load(open(hand))


def broken(edit, name):
    m = json.loads(json.dumps(base))
    edit(m)
    path = os.path.join(tmp, name + ".json")
    json.dump(m, open(path, "w"))
    return path


expect_error("a model file with an unknown op names the op and the field",
             ["--model", broken(lambda m: m["ops"][1].update(op="swish"), "unknown_op"), "--mesh", "2"],
             "op 'act': unknown op 'swish' in field 'op'")
expect_error("a model file whose op reads a missing tensor names it",
             ["--model", broken(lambda m: m["ops"][2].update(inputs=["actt"]), "missing_in"), "--mesh", "2"],
             "op 'fc2': input 'actt' is not a graph input or an earlier op")
expect_error("a model file with a parameter of the wrong shape names the op",
             ["--model", broken(lambda m: m["params"][2].update(shape=[100, 10]), "bad_shape"), "--mesh", "2"], "fc2")
expect_error("a model file missing a field names it",
             ["--model", broken(lambda m: m["ops"][0].pop("inputs"), "no_inputs"), "--mesh", "2"],
             "op 'fc1': lacks the field 'inputs'")
expect_error("a model file with an absurd shape is refused before allocating",
             ["--model", broken(lambda m: m["params"][0].update(shape=[1000000000, 1000000000]), "huge"), "--mesh", "2"],
             "more than 2^48 elements")
malformed = os.path.join(tmp, "malformed.json")
open(malformed, "w").write('{"format": "autoddl-model", "version": 1, "inputs": [')
expect_error("a malformed model file", ["--model", malformed, "--mesh", "2"], "is not valid JSON")
expect_error("a malformed plan file", ["--diff", auto_f, malformed], "is not valid JSON")
expect_error("a missing model file", ["--model", os.path.join(tmp, "none.json"), "--mesh", "2"], "cannot read model file")

# One peak figure: the replayed step's (per stage for a pipeline) is the one the limit holds, and
# the limit is the device's memory less a tenth unless --memory-limit sets it. The device's
# memory comes from the profile's own file.
hw_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "data", "hardware")
a100 = json.load(open(os.path.join(hw_dir, "dgx-a100.json")))["device"]["memory_bytes"]
gpt13b = ["--model", "gpt:layers=40,hidden=5120,heads=40,seq=2048,batch=1024,vocab=50257", "--mesh", "8x8",
          "--hardware", "dgx-a100", "--dtype", "bf16"]
plans_13b = {}
for what, args in [("13B megatron:tp=8,pp=2", gpt13b + ["--strategy", "megatron:tp=8,pp=2"]),
                   ("13B megatron:tp=8,pp=2,recompute=selective,mbs=4",
                    gpt13b + ["--strategy", "megatron:tp=8,pp=2,recompute=selective,mbs=4"]),
                   ("13B megatron:tp=8", gpt13b + ["--strategy", "megatron:tp=8"]),
                   ("13B zero", gpt13b + ["--strategy", "zero", "--compare", "dp"]),
                   ("13B dp", gpt13b + ["--strategy", "dp"]),
                   ("13B auto", gpt13b),
                   ("small auto on 2x4", ["--model", small, "--mesh", "2x4"]),
                   ("small megatron:tp=2,pp=2 under 3 MB", ["--model", small, "--mesh", "2x4", "--strategy",
                                                            "megatron:tp=2,pp=2", "--memory-limit", "3MB"]),
                   ("small auto under 2.5 MB", ["--model", small, "--mesh", "4", "--memory-limit", "2.5MB"])]:
    r = run(*args, "--json", "--allow-over-limit")
    j = json.loads(r.stdout) if r.returncode == 0 else {}
    plans_13b[what] = j
    stages = j.get("pipeline", {}).get("stages", [])
    peak, limit = j.get("peak_bytes_per_device", 0), j.get("memory_limit_bytes", 0)
    within = peak <= limit and all(s["peak_bytes"] <= limit for s in stages)
    check(f"{what}: feasible only where the replayed peak ({peak / 1e9:.3g} GB) is within the limit ({limit / 1e9:.3g} GB)",
          r.returncode == 0 and peak > 0 and (not j["feasible"] or within) and (j["feasible"] or not within),
          r.stderr[-300:] + str({k: j.get(k) for k in ["feasible", "peak_bytes_per_device", "memory_limit_bytes"]}))
    if stages:
        check(f"{what}: the peak is the highest stage's", peak == max(s["peak_bytes"] for s in stages),
              str([s["peak_bytes"] for s in stages]))
    if "--memory-limit" not in args and "--hardware" in args:
        check(f"{what}: the default limit is the device's memory less a tenth",
              abs(limit - 0.9 * a100) <= 1e-9 * a100 and j.get("memory_reserve_fraction") == 0.1
              and j.get("device_memory_bytes") == a100, str(limit))
check("13B dp is over the limit", plans_13b["13B dp"].get("feasible") is False)
check("--memory-limit sets the limit, without a reserve",
      plans_13b["small auto under 2.5 MB"].get("memory_limit_bytes") == 2.5e6
      and plans_13b["small auto under 2.5 MB"].get("memory_reserve_fraction") == 0)
r = run(*gpt13b, "--strategy", "megatron:tp=8,pp=2")
check("the table shows one peak, with the limit and the reserve",
      r.returncode == 0 and "(the step replayed), of 77.3 GB allowed (the device's 85.9 GB less a 10 % reserve" in r.stdout
      and "over the step" not in r.stdout, r.stdout[-1500:])
# The micro-batch search skips counts a layout cannot split: the 13B GPT plans with zero on 8x8
# (1024 sequences: at most 16 micro-batches of 64 split over 64 devices), and dp's problem is memory.
z = plans_13b["13B zero"]
check("the 13B GPT plans with --strategy zero on 8x8 within the limit",
      z.get("feasible") is True and 1024 // z.get("microbatches", 1) % 64 == 0, str({k: z.get(k) for k in ["feasible", "microbatches"]}))
# resharding after forward, zero fits at 8 micro-batches and tries no more; keeping the gathered
# parameters through the step it needs 16, and the counts above those cannot split
r = run(*gpt13b, "--strategy", "zero", "--reshard", "off", "--json")
kept = json.loads(r.stdout) if r.returncode == 0 else {}
check("the micro-batch note names the counts zero cannot split",
      any("the zero layout cannot split the batch into 32" in n for n in kept.get("notes", [])), str(kept.get("notes")))
dp = z.get("compare", {}).get("dp", {})
check("--compare dp prices dp and marks it over the memory limit, with its peak",
      dp.get("applicable") is True and dp.get("feasible") is False and dp.get("peak_bytes_per_device", 0) > 1.5e11, str(dp))
r = run(*gpt13b, "--strategy", "zero", "--compare", "dp")
check("the table says dp peaks over the limit",
      r.returncode == 0 and re.search(r"vs dp .*\(that plan peaks at 2\d\d GB per device, over the limit of 77.3 GB\)", r.stdout),
      r.stdout[-600:])

# The parallel degrees in plain words, in text, JSON and plan files: the 13B GPT's auto plan is
# data parallel over all 64 GPUs with ZeRO-1's sharded optimizer state (ZeRO-3 would gather each
# weight twice a micro-batch, or keep the gathered copies, as large as ZeRO-1's replicated
# weights) and one sequence per GPU per micro-batch (1024 sequences in 16 micro-batches of 64);
# megatron:tp=8,pp=2's are its knobs.
par = plans_13b["13B auto"].get("parallelism", {})
check("13B auto's parallelism: dp=64 tp=1 pp=1 cp=1 ep=1, ZeRO stage 1, 1 sequence per GPU per micro-batch",
      {k: par.get(k) for k in ["dp", "tp", "pp", "cp", "ep", "zero_stage", "sequences_per_device_per_microbatch"]} ==
      {"dp": 64, "tp": 1, "pp": 1, "cp": 1, "ep": 1, "zero_stage": 1, "sequences_per_device_per_microbatch": 1}
      and par.get("axes") == ["dp", "dp"], str(par))
par = plans_13b["13B megatron:tp=8,pp=2"].get("parallelism", {})
mb = plans_13b["13B megatron:tp=8,pp=2"].get("micro_batch_size", 0)
check("megatron:tp=8,pp=2's parallelism is its knobs: tp=8, pp=2, dp=4 on each stage's 4x8",
      par.get("tp") == 8 and par.get("pp") == 2 and par.get("dp") == 4 and par.get("zero_stage") == 0 and
      par.get("sequences_per_device_per_microbatch") == mb / 4, str(par))
r = run(*gpt13b)
check("the table says the degrees in one line",
      r.returncode == 0 and "parallel  dp=64 tp=1 pp=1 cp=1 ep=1, ZeRO stage 1, 1 sequence per device per micro-batch "
      "(8x8 axes: dp dp)" in r.stdout, r.stdout[:800])
par_f = os.path.join(tmp, "par.json")
r = run("--model", small, "--mesh", "2x2", "--strategy", "megatron:tp=2,dopt=1", "--out", par_f, "--json")
shown = json.loads(r.stdout).get("parallelism") if r.returncode == 0 else None
check("a plan file records the parallelism --json shows",
      r.returncode == 0 and json.load(open(par_f)).get("parallelism") == shown and shown["tp"] == 2 and shown["dp"] == 2
      and shown["zero_stage"] == 1, str(shown))
r = run("--diff", par_f, auto_f)
check("--diff says both plans' degrees", r.returncode == 0 and "parallel a: dp=2 tp=2 pp=1 cp=1 ep=1, ZeRO stage 1" in r.stdout,
      r.stdout[:400])

# --check validates a plan file and prices it again; --diff re-prices both files
r = run("--check", auto_f)
check("--check of a fresh plan: valid, today's figures the file's",
      r.returncode == 0 and f"plan file {auto_f}: valid" in r.stdout and "the file says" not in r.stdout, r.stdout[-600:] + r.stderr)
# a pipeline whose stage mesh is Megatron-LM's own layout of the stage's devices (8 -> 2 stages of
# 2x2): --check of the fresh file agrees with it; the figures are a device's (its stage's)
pipe_f = os.path.join(tmp, "pipe.json")
pipe_args = ["--model", small, "--mesh", "8", "--strategy", "megatron:tp=2,pp=2,cp=2"]
r = run(*pipe_args, "--out", pipe_f)
check("the header gives a pipeline's stage mesh and all its devices",
      r.returncode == 0 and "mesh      2x2 per stage x 2 stages  (8 devices)" in r.stdout, r.stdout[:400])
r = run("--check", pipe_f)
check("--check of a fresh pipeline plan on a re-laid stage mesh: valid, the file's figures",
      r.returncode == 0 and f"plan file {pipe_f}: valid" in r.stdout and "the file says" not in r.stdout, r.stdout[-600:] + r.stderr)
r = run(*pipe_args, "--json")
j = json.loads(r.stdout) if r.returncode == 0 else {}
if j:
    names = [l["name"] for l in j["layers"]]
    first = [names.index(c) for c in j["pipeline"]["cuts"]] + [len(names)]
    stages = j["pipeline"]["stages"]
    m = j["microbatches"]
    busy = [m * s["per_microbatch_s"] + 2 * m * s["send_s"] + s["sync_and_update_s"] for s in stages]
    own = [sum(l["compute_s"] for l in j["layers"][first[k]:first[k + 1]]) for k in range(len(stages))]
    k = max(range(len(stages)), key=lambda i: stages[i]["per_microbatch_s"])
    check("a pipeline's compute and communication are one device's: its stage's busy time, its ops' compute at least",
          abs(j["compute_s"] + j["comm_s"] - busy[k]) <= 1e-9 * busy[k] and j["compute_s"] >= own[k] * (1 - 1e-12)
          and j["compute_s"] < sum(own), str((j["compute_s"], j["comm_s"], busy, own)))
else:
    check("pipeline plan --json", False, r.stderr)
# --diff compares plans of the same devices however the mesh is written
mesh8_f, mesh24_f = os.path.join(tmp, "mesh8.json"), os.path.join(tmp, "mesh2x4.json")
run("--model", small, "--mesh", "8", "--out", mesh8_f)
run("--model", small, "--mesh", "2x4", "--out", mesh24_f)
for b in (mesh24_f, pipe_f):
    r = run("--diff", mesh8_f, b)
    check(f"--diff across mesh spellings ({os.path.basename(b)})",
          r.returncode == 0 and "a lays its 8 devices out as " in r.stdout, r.stdout[:400] + r.stderr)
# auto on one axis across nodes says where the node-by-node mesh is searched
r = run("--model", small, "--mesh", "16", "--hardware", "dgx-a100")
check("auto on a one-axis mesh across nodes names the node-by-node mesh",
      r.returncode == 0 and "mesh 16 spans 2 nodes of 8 devices as one axis" in r.stdout and "--mesh 2x8" in r.stdout,
      r.stdout[-600:])
old = json.loads(json.dumps(pa))
old["predicted"]["step_s"] *= 2
old_f = os.path.join(tmp, "old.json")
json.dump(old, open(old_f, "w"))
r = run("--check", old_f, "--json")
j = json.loads(r.stdout) if r.returncode == 0 else {}
check("--check of a file with other figures prices it again and says they differ",
      j.get("check", {}).get("same_figures") is False and j["check"]["priced"]["step_s"] == pa["predicted"]["step_s"]
      and j["predicted_step_s"] == pa["predicted"]["step_s"], r.stderr[-300:])
r = run("--check", auto_f, "--hardware", "dgx1-v100")
check("--check --hardware prices the file's layouts on another profile",
      r.returncode == 0 and "priced again with hardware dgx1-v100" in r.stdout and "the file says" in r.stdout, r.stdout[-400:])
r = run("--diff", auto_f, old_f, "--json")
check("--diff compares today's prices, not the stored ones",
      r.returncode == 0 and json.loads(r.stdout)["predicted"]["step_s"][2] == 0, r.stdout[-400:] + r.stderr[-300:])
bad_layout = json.loads(json.dumps(pa))
bad_layout["ops"][2]["outputs"][0] = ["P", "P"]  # a layernorm cannot output partial sums
bad_f = os.path.join(tmp, "bad_layout.json")
json.dump(bad_layout, open(bad_f, "w"))
expect_error("--check of a hand-edited layout names the rule and the nearest valid layouts", ["--check", bad_f],
             "is not a valid plan: the plan's layouts of op '" + pa["ops"][2]["name"] + "' on mesh 2x2: signature")
expect_error("--diff validates too", ["--diff", auto_f, bad_f], "the nearest valid layouts: ")
mf = os.path.join(tmp, "mlp_model.json")
shutil.copy(hand, mf)
mlp_plan = os.path.join(tmp, "mlp_plan.json")
r = run("--model", mf, "--mesh", "2", "--out", mlp_plan)
open(mf, "w").write(open(hand).read().replace("fc2", "fc9"))
expect_error("--check of a plan whose model changed since", ["--check", mlp_plan], "it changed since; plan it again")

# One vocabulary in both programs: sgd is sgd-momentum, ddp is dp, fsdp is zero (stage 3); what
# they write is the first spelling
def plan_of(*args):
    r = run("--model", small, "--mesh", "2x2", "--json", *args)
    return json.loads(r.stdout) if r.returncode == 0 else {"stderr": r.stderr}
for alias, name in [(["--optimizer", "sgd"], ["--optimizer", "sgd-momentum"]), (["--strategy", "ddp"], ["--strategy", "dp"]),
                    (["--strategy", "fsdp"], ["--strategy", "zero"]), (["--compare", "fsdp"], ["--compare", "zero"])]:
    a, b = plan_of(*alias), plan_of(*name)
    same = ("layers" in a and [l["signature"] for l in a["layers"]] == [l["signature"] for l in b["layers"]] and
            a["strategy"] == b["strategy"] and a.get("compare") == b.get("compare") and
            a["peak_bytes_per_device"] == b["peak_bytes_per_device"])
    check(" ".join(alias) + " plans as " + " ".join(name), same, str(a.get("stderr", ""))[-300:])
sgd_f = os.path.join(tmp, "sgd.json")
r = run("--model", small, "--mesh", "2x2", "--optimizer", "sgd", "--out", sgd_f)
check("a plan file names the optimizer by its first spelling",
      r.returncode == 0 and json.load(open(sgd_f))["optimizer"] == "sgd-momentum", r.stderr[-300:])
expect_error("an unknown optimizer lists the names", ["--optimizer", "rmsprop"],
             "unknown optimizer 'rmsprop'; write adam or sgd-momentum (also spelled sgd)")
expect_error("an unknown strategy lists the names with their aliases", ["--strategy", "tp"], "dp (also spelled ddp)")

# expert parallelism over 4 devices: the dispatched buffer [batch 8, 4 experts, 10 slots (ceil(1.25 x
# 16 x 2 / 4)), hidden 64] in fp32 goes S(0) -> S(1) before the experts and back before combine; an
# all-to-all sends (n - 1) / n of the local shard, forward and again for the gradient
moe_tiny = "llama:layers=2,hidden=64,heads=4,kv_heads=2,ffn=64,experts=4,topk=2,seq=16,batch=8,vocab=96"
r = run("--model", moe_tiny, "--mesh", "4", "--hardware", "cpu-local", "--strategy", "megatron:ep=4", "--json")
moe_layers = {l["name"]: l for l in json.loads(r.stdout)["layers"]} if r.returncode == 0 else {}
local = 8 * 4 * 10 * 64 * 4 / 4
want = 2 * (4 - 1) / 4 * local
got = [moe_layers.get(n, {}).get("comm_bytes") for n in ("h0.moe.experts", "h0.moe.combine")]
check(f"the expert-parallel all-to-all sends its closed form ({want:.0f} B per op and device)",
      got == [want, want] and "S(1)" in moe_layers["h0.moe.experts"]["signature"], f"{got} {r.stderr[-300:]}")
# --grad-sums: a bf16 plan's gradient sums in its type by default, in fp32 with --grad-sums fp32; the
# same pinned plan holds 2 more bytes per gradient element then (dp on 4 devices: every gradient
# whole, 2 or 4 bytes per parameter; docs/reference/cost.md)
sums = {}
for k in ("bf16", "fp32"):
    r = run("--model", small, "--mesh", "4", "--hardware", "dgx-a100", "--dtype", "bf16", "--strategy", "dp", "--json",
            "--grad-sums", k)
    sums[k] = json.loads(r.stdout) if r.returncode == 0 else None
    check(f"--grad-sums {k} plans", r.returncode == 0, r.stderr[-400:])
if sums["bf16"] and sums["fp32"]:
    grads = {k: v["memory_breakdown_bytes"]["gradients"] for k, v in sums.items()}
    n = sums["bf16"]["params"]
    check("--grad-sums: dp's gradients at 2 bytes per parameter in bf16, 4 in fp32",
          grads == {"bf16": 2 * n, "fp32": 4 * n}, f"{grads}, {n} parameters")
    # dp's only collectives are the gradients' ring all-reduces, 2 (d - 1) / d of their bytes, which
    # move the sums' type (every parameter's elements divide by 4 here, so nothing is padded)
    sent = {k: v["comm_bytes_per_device"] for k, v in sums.items()}
    check("--grad-sums: dp's all-reduces move bf16 or fp32 sums, 2 (d - 1) / d of 2 or 4 bytes per parameter",
          sent == {"bf16": 2 * 3 * 2 * n // 4, "fp32": 2 * 3 * 4 * n // 4}, f"{sent}, {n} parameters")
expect_error("--grad-sums fp16 with --dtype bf16", ["--model", small, "--dtype", "bf16", "--grad-sums", "fp16"],
             "--grad-sums takes fp32 or bf16 with --dtype bf16, got 'fp16'")

print(("FAIL" if failures else "ok  ") + f" {len(failures)} failures")
sys.exit(1 if failures else 0)
