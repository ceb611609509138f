#!/usr/bin/env bash
# autoddl-calibrate end to end on 2 ranks with a short range: it writes a profile with positive
# link figures in the loader's schema, and a mesh that does not match the job is one error line.
#   calibrate.sh <mpirun> <autoddl-calibrate> <python3>
set -euo pipefail
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run=("$1" --allow-run-as-root --oversubscribe -np 2)
"${run[@]}" "$2" --max-bytes 262144 --gemm-n 128 --reps 2 --out "$tmp/p.json" >"$tmp/log"
"$3" - "$tmp/p.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
assert set(p) == {"name", "description", "sources", "devices_per_node", "overlap", "links", "device"}, p.keys()
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
if "${run[@]}" "$2" --mesh 3 --out "$tmp/q.json" 2>"$tmp/err" >/dev/null; then echo "mesh 3 on 2 ranks was accepted"; exit 1; fi
grep -q "mesh 3 has 3 devices but the job has 2 ranks" "$tmp/err" || { cat "$tmp/err"; exit 1; }
echo "mismatched mesh refused: $(head -n1 "$tmp/err")"
