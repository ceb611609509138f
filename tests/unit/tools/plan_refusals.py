#!/usr/bin/env python3
"""autoddl-plan refusing what it cannot plan, as a user meets it: JSON nested past the limit,
plan files a planner never writes, strategies and options Megatron-LM or the planner would not
take, and misspelled or misplaced inputs. Each case is one sentence on stderr naming the rule,
exit code 2, nothing on stdout (never a crash, a hang or a silent acceptance); a pinned plan over
the memory limit is printed, then refused with exit code 1 unless --allow-over-limit."""
import json
import os
import subprocess
import sys
import tempfile

plan = sys.argv[1]
small = "gpt:layers=2,hidden=64,heads=4,seq=32,batch=8,vocab=128"
moe = "llama:layers=1,hidden=64,heads=4,kv_heads=2,ffn=64,seq=16,batch=8,vocab=96,experts=4"
failures = []


def run(*args):
    return subprocess.run([plan, *args], capture_output=True, text=True, timeout=120)


def expect_error(what, args, needle, absent=None):
    r = run(*args)
    lines = [l for l in r.stderr.strip().splitlines() if l]
    ok = (r.returncode == 2 and len(lines) == 1 and needle in r.stderr and r.stdout == "" and len(r.stderr) < 1000
          and (absent is None or absent not in r.stderr))
    print(("ok  " if ok else "FAIL") + f" {what}: exit {r.returncode}: {r.stderr.strip()[:400]}")
    if not ok:
        failures.append(what)


tmp = tempfile.mkdtemp()


def write(name, text):
    path = os.path.join(tmp, name)
    open(path, "w").write(text)
    return path


# JSON nested 100,000 deep: refused before it is parsed, in every file autoddl reads
deep = "[" * 100000 + "]" * 100000
nested = "nests arrays and objects deeper than 256 levels"
expect_error("an hf config nested 100,000 deep", ["--model", "hf:" + write("hf_deep.json",
             '{"model_type": "llama", "hidden_size": ' + deep + '}')], nested)
expect_error("a hardware profile nested 100,000 deep", ["--model", small, "--hardware", write("hw_deep.json",
             '{"name": "x", "devices_per_node": ' + deep + '}')], nested)
plan_deep = write("plan_deep.json", '{"format": "autoddl-plan", "version": ' + deep + '}')
expect_error("a plan file nested 100,000 deep (--check)", ["--check", plan_deep], nested)
expect_error("a plan file nested 100,000 deep (--diff)", ["--diff", plan_deep, plan_deep], nested)
expect_error("a model file nested 100,000 deep", ["--model", write("model_deep.json", deep)], nested)
# 256 levels are read (a value of the wrong kind, named as such); quotes and escapes do not count
expect_error("an hf config nested 255 deep is read and its field refused",
             ["--model", "hf:" + write("hf_255.json", '{"model_type": "llama", "x": "[\\"[", "hidden_size": ' +
                                       "[" * 255 + "]" * 255 + '}')], "field 'hidden_size' is [[[[")
expect_error("a syntax error is a plain sentence", ["--model", small, "--hardware", write("bad.json", '{"name": "x",')],
             "is not valid JSON (at line 1, column 14: unexpected end of input", absent="json.exception")
expect_error("an echoed value is cut short", ["--model", "hf:" + write("long.json",
             '{"model_type": "llama", "hidden_size": "' + "x" * 5000 + '"}')], 'x...; give a positive whole number')

# directories where files are read
os.makedirs(os.path.join(tmp, "hfdir"))
write(os.path.join("hfdir", "config.json"), '{"model_type": "llama"}')
os.makedirs(os.path.join(tmp, "empty"))
expect_error("hf: a folder holding config.json", ["--model", "hf:" + os.path.join(tmp, "hfdir")],
             "is a directory, not a file; did you mean hf:" + os.path.join(tmp, "hfdir", "config.json") + "?")
expect_error("hf: a folder", ["--model", "hf:" + os.path.join(tmp, "empty")], "is a directory, not a file")
expect_error("--hardware a folder", ["--model", small, "--hardware", os.path.join(tmp, "empty")],
             "is a directory, not a file", absent="JSON")
expect_error("--check a folder", ["--check", os.path.join(tmp, "empty")], "is a directory, not a file")
expect_error("a config.json without hf:", ["--model", os.path.join(tmp, "hfdir", "config.json")],
             "is a Hugging Face config (it has 'model_type'), not an autoddl model; did you mean hf:")

# plan files the planner never writes
good = os.path.join(tmp, "good.json")
r = run("--model", small, "--mesh", "4", "--out", good)
if r.returncode != 0:
    failures.append("writing a plan file: " + r.stderr)
else:
    base = json.load(open(good))

    def changed(name, change):
        j = json.loads(json.dumps(base))
        change(j)
        return write(name, json.dumps(j))

    mb15 = changed("mb15.json", lambda j: j["schedule"].__setitem__("microbatches", 1.5))
    mb40 = changed("mb40.json", lambda j: j["schedule"].__setitem__("microbatches", 2 ** 40))
    kind = changed("kind.json", lambda j: j["ops"][1].__setitem__("kind", "relu"))
    nohash = changed("nohash.json", lambda j: j.pop("model_hash"))
    expect_error("micro-batches 1.5 (--check)", ["--check", mb15], "field 'microbatches' is 1.5; give a whole number")
    expect_error("micro-batches 1.5 (--diff)", ["--diff", good, mb15], "field 'microbatches' is 1.5")
    expect_error("micro-batches 2^40", ["--check", mb40], "1099511627776, out of range")
    expect_error("an op's kind changed (--check)", ["--check", kind],
                 "plan op 1 is relu 'embed.drop' but the model's op 1 is dropout 'embed.drop'")
    expect_error("an op's kind changed (--diff)", ["--diff", good, kind], "plan op 1 is relu")
    expect_error("no model_hash", ["--check", nohash], "records no model_hash")

# strategies Megatron-LM would not run
expect_error("pp x vpp not dividing the layers", ["--model", small, "--mesh", "2", "--strategy", "megatron:pp=2,vpp=99999"],
             "megatron pp=2 x vpp=99999 makes 199998 model chunks, which must split the model's 2 layers evenly")
expect_error("tp not dividing the heads", ["--model", "gpt:layers=2,hidden=48,heads=4,seq=33,batch=9,vocab=129",
                                           "--mesh", "3x3", "--strategy", "megatron"],
             "megatron tp=3 (the innermost axis of mesh 3x3) must divide the 4 attention heads of op")
expect_error("tp not dividing the devices a pipeline stage has", ["--model", small, "--mesh", "2", "--strategy",
             "megatron:tp=2,pp=2"], "pp=2 leaves 1 of mesh 2's 2 devices to each stage", absent="mesh 1 ")
expect_error("a strategy knob given twice", ["--model", small, "--strategy", "megatron:tp=2,tp=1"],
             "knob 'tp' is given twice in strategy 'megatron:tp=2,tp=1'")
expect_error("a model key given twice", ["--model", moe + ",topk=2,topk=1"], "key 'topk' is given twice")

# engines: what an engine cannot run or express (tutorial 8); each twin below plans
tiny_llama = "llama:layers=2,hidden=64,heads=4,kv_heads=2,ffn=64,seq=32,batch=8,vocab=96"
expect_error("no Megatron-LM layout splits the model", ["--model", tiny_llama.replace("batch=8", "batch=3").replace("seq=32", "seq=12"), "--mesh", "8",
             "--engine", "megatron"], "no Megatron-LM layout splits this model on mesh 8")
expect_error("--emit for autoddl's own layout", ["--model", tiny_llama, "--mesh", "2x4", "--emit", "megatron"],
             "this plan is autoddl's own per-weight layout, which no Megatron-LM setting expresses")
expect_error("--emit for a model of no LLaMA family", ["--model", "mlp", "--mesh", "2x4", "--emit", "megatron"],
             "writes the settings of LLaMA-family models")
expect_error("--emit megatron for a megatron layout of a GPT", ["--model", small, "--mesh", "2", "--strategy", "megatron",
             "--emit", "megatron"], "model 'gpt:layers=2")
expect_error("--emit torchtitan for a distributed-optimizer layout", ["--model", tiny_llama, "--mesh", "2x2", "--strategy",
             "megatron:tp=2,sp=1,dopt=1", "--emit", "torchtitan"], "is not one torchtitan runs")
expect_error("--emit torchtitan for a model none of its configs is", ["--model", tiny_llama, "--mesh", "2x2",
             "--engine", "torchtitan", "--emit", "torchtitan"], "torchtitan 0.3.0 builds only its own model flavors")
expect_error("no torchtitan layout splits the model", ["--model", tiny_llama.replace("batch=8", "batch=3").replace("seq=32", "seq=12"),
             "--mesh", "8", "--engine", "torchtitan"], "no torchtitan layout splits this model on mesh 8")
expect_error("--engine beside a pinned strategy", ["--model", tiny_llama, "--engine", "megatron", "--strategy", "dp"],
             "leave one of them out")
expect_error("an unknown engine", ["--model", tiny_llama, "--engine", "deepspeed"], "takes autoddl, megatron or torchtitan")
expect_error("fsdp=1 with dopt=1", ["--model", tiny_llama, "--mesh", "2x2", "--strategy", "megatron:fsdp=1,dopt=1"],
             "both shard what the data-parallel replicas keep")
for twin in (["--engine", "megatron", "--emit", "megatron"], ["--strategy", "megatron:tp=2,sp=1,fsdp=1", "--emit", "megatron"]):
    r = run("--model", tiny_llama, "--mesh", "2x2", *twin)
    ok = r.returncode == 0  # an FSDP layout is emitted as Megatron-FSDP
    print(("ok  " if ok else "FAIL") + f" twin {' '.join(twin)}: exit {r.returncode} {r.stderr.strip()[:200]}")
    if not ok:
        failures.append("twin " + " ".join(twin))

# torchtitan's own rules at --emit: Qwen3 0.6B's shape (its qwen3_0_6b flavor) ties the embeddings,
# and torchtitan runs no pipeline for such a model; the twin without stages emits
qwen3_06b = write("qwen3-0.6b.json", '{"model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072, '
                  '"num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, '
                  '"vocab_size": 151936, "tie_word_embeddings": true, "rope_theta": 1000000, "rms_norm_eps": 1e-06}')
tied = ["--model", "hf:" + qwen3_06b + ":seq=1024,batch=16", "--mesh", "2x2", "--emit", "torchtitan", "--strategy"]
expect_error("--emit torchtitan of a pipeline for tied embeddings", tied + ["megatron:tp=2,pp=2,sp=1,fsdp=1"],
             "torchtitan 0.3.0 runs no pipeline for a model with tied embeddings")
r = run(*tied, "megatron:tp=2,sp=1,fsdp=1")
ok = r.returncode == 0 and "--config qwen3_0_6b" in r.stdout
print(("ok  " if ok else "FAIL") + f" its twin without stages emits qwen3_0_6b: exit {r.returncode}: {r.stderr.strip()[:300]}")
if not ok:
    failures.append("tied-embeddings twin")

# values and options
digits = "9" * 400
expect_error("a 400-digit aux", ["--model", moe + ",aux=" + digits], "lies outside what a double holds")
expect_error("a 400-digit capacity", ["--model", moe + ",capacity=" + digits], "...' lies outside")
expect_error("a negative topk suggests a valid one", ["--model", moe + ",topk=-1"], "write a size such as topk=1")
expect_error("an empty --memory-limit", ["--model", small, "--memory-limit", ""], "memory size '' is not a number")
expect_error("a misspelled option", ["--model", small, "--stratgy", "auto"], "unknown option --stratgy; did you mean --strategy?")

# a pinned strategy over the memory limit: the plan printed, then one sentence with what fits and exit 1
# megatron ep carved from more devices than lie just outside the tensor-parallel ones (4 on 4x8
# with tp=2) is one sentence, not a mesh axis of 0 devices; its twin ep=4 plans
moe = "llama:layers=2,hidden=64,heads=4,kv_heads=2,ffn=64,experts=8,topk=2,capacity=0,seq=16,batch=16,vocab=96"
expect_error("megatron ep larger than the devices it is carved from", ["--model", moe, "--mesh", "4x8", "--strategy",
             "megatron:tp=2,ep=8"], "megatron ep=8 must divide the devices just outside the tensor-parallel ones on mesh 4x8 (4)")
r = run("--model", moe, "--mesh", "4x8", "--strategy", "megatron:tp=2,ep=4")
print(("ok  " if r.returncode == 0 else "FAIL") + f" its twin ep=4 plans: exit {r.returncode}: {r.stderr.strip()[:300]}")
if r.returncode != 0:
    failures.append("megatron ep=4 twin")
# --emit dtensor: DTensor placements describe one mesh, so a pipeline is refused; its twin pp=1 emits
expect_error("--emit dtensor of a pipeline plan", ["--model", small, "--mesh", "2", "--strategy", "megatron:pp=2",
             "--emit", "dtensor"], "--emit dtensor writes plans without pipeline stages; this plan has 2")
r = run("--model", small, "--mesh", "2", "--strategy", "megatron:tp=2", "--emit", "dtensor")
ok = r.returncode == 0 and json.loads(r.stdout)["format"] == "autoddl-dtensor"
print(("ok  " if ok else "FAIL") + f" its twin tp=2 emits: exit {r.returncode}: {r.stderr.strip()[:300]}")
if not ok:
    failures.append("--emit dtensor twin")
expect_error("--emit of an unknown form", ["--model", small, "--emit", "torch"], "--emit: torch not in {megatron,torchtitan,dtensor}")
r = run("--model", small, "--mesh", "4", "--strategy", "dp", "--memory-limit", "1MB")
ok = (r.returncode == 1 and "peak memory per device" in r.stdout and "(OVER THE LIMIT)" in r.stdout
      and r.stderr.count("\n") == 1 and "the dp plan peaks at" in r.stderr and "over the limit of 1 MB" in r.stderr
      and "--strategy auto fits (predicted step" in r.stderr)
print(("ok  " if ok else "FAIL") + f" a pinned plan over the limit exits 1: exit {r.returncode}: {r.stderr.strip()[:300]}")
if not ok:
    failures.append("a pinned plan over the limit")
r = run("--model", small, "--mesh", "4", "--strategy", "dp", "--memory-limit", "1MB", "--allow-over-limit", "--json")
ok = r.returncode == 0 and json.loads(r.stdout)["feasible"] is False and r.stderr == ""
print(("ok  " if ok else "FAIL") + f" --allow-over-limit accepts it: exit {r.returncode}")
if not ok:
    failures.append("--allow-over-limit")

print(f"{len(failures)} failed" + (": " + ", ".join(failures) if failures else ""))
sys.exit(1 if failures else 0)
