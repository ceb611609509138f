#!/usr/bin/env bash
# autoddl-calibrate end to end on 2 ranks with a short range: it writes a profile with positive
# link figures in the loader's schema, and a mesh that does not match the job is one error line.
#   calibrate.sh <mpirun> <autoddl-calibrate> <python3> [<autoddl-plan>]
# With autoddl-plan: the profile records this machine's CPU, and loaded as another CPU's it is
# named in one line on stderr.
set -euo pipefail
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run=("$1" --allow-run-as-root --oversubscribe -np 2)
"${run[@]}" "$2" --max-bytes 262144 --gemm-n 128 --reps 2 --out "$tmp/p.json" >"$tmp/log"
"$3" - "$tmp/p.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
# the CPU measured, as /proc/cpuinfo names it (where it does)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")
keys = {"name", "description", "sources", "devices_per_node", "overlap", "links", "device"} | ({"cpu_model"} if cpu else set())
assert set(p) == keys, p.keys()
assert p.get("cpu_model", "") == cpu, (p.get("cpu_model"), cpu)
assert p["overlap"] == "none", p["overlap"]  # the CPU trainer overlaps nothing
for level in ("intra_node", "inter_node"):
    l = p["links"][level]
    assert l["alpha"] > 0 and l["beta"] > 1e6, l
assert p["device"]["peak_flops"]["fp32"] > 1e8 and p["devices_per_node"] == 2
print("profile ok:", p["links"]["intra_node"])
PY
# --model on top of that profile: a measured kernel table the planner's candidates all find
"${run[@]}" "$2" --base "$tmp/p.json" --model mlp:layers=2,hidden=32,batch=8,in=16,out=4 --kernel-reps 2 --out "$tmp/m.json" >"$tmp/log"
"$3" - "$tmp/m.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
assert len(p["kernels"]) > 0 and all(k["forward_s"] > 0 and k["backward_s"] > 0 for k in p["kernels"]), p.get("kernels")
assert p["copy"]["bandwidth"] > 1e8 and p["optimizer"]["adam"]["per_element"] > 0
print("kernel table ok:", len(p["kernels"]), "kernels")
PY
# a calibrated profile loaded on another CPU says so in one line, and the plan goes on; on this
# CPU it says nothing
"$3" - "$tmp/m.json" "$tmp/other.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["cpu_model"] = "Some Other CPU @ 1.00GHz"
json.dump(p, open(sys.argv[2], "w"))
PY
plan="${4:-}"
if [ -n "$plan" ]; then
  "$plan" --model mlp:layers=2,hidden=32,batch=8,in=16,out=4 --mesh 2 --hardware "$tmp/other.json" >/dev/null 2>"$tmp/warn"
  [ "$(wc -l <"$tmp/warn")" -eq 1 ] && grep -q "was calibrated on a 'Some Other CPU @ 1.00GHz' CPU, this machine's is .*run autoddl-calibrate" "$tmp/warn" \
    || { echo "no one-line warning for another CPU:"; cat "$tmp/warn"; exit 1; }
  echo "another CPU: $(cat "$tmp/warn")"
  "$plan" --model mlp:layers=2,hidden=32,batch=8,in=16,out=4 --mesh 2 --hardware "$tmp/m.json" >/dev/null 2>"$tmp/warn"
  [ ! -s "$tmp/warn" ] || { echo "a warning on the calibrating CPU:"; cat "$tmp/warn"; exit 1; }
fi
if "${run[@]}" "$2" --mesh 3 --out "$tmp/q.json" 2>"$tmp/err" >/dev/null; then echo "mesh 3 on 2 ranks was accepted"; exit 1; fi
grep -q "mesh 3 has 3 devices but the job has 2 ranks" "$tmp/err" || { cat "$tmp/err"; exit 1; }
echo "mismatched mesh refused: $(head -n1 "$tmp/err")"
