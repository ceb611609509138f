#!/usr/bin/env bash
# Calibrates the cost model on this machine, then compares its predicted ring collective times
# with measured ones on 2, 4 and 8 ranks (oversubscribed where the cores are fewer). Each rank
# count gets its own calibration, because ranks sharing cores are slower devices.
#   benchmarks/collectives.sh [build-dir]        (writes <build-dir>/cpu-local-np<N>.json)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
meson compile -C "$build" -j2 autoddl-calibrate bench_collectives >/dev/null
export OPENBLAS_NUM_THREADS=1
run=(mpirun --allow-run-as-root --oversubscribe)
for np in ${AUTODDL_BENCH_RANKS:-2 4 8}; do
  "${run[@]}" -np "$np" "$build/tools/autoddl-calibrate" --out "$build/cpu-local-np$np.json" >"$build/calibrate-np$np.log"
  "${run[@]}" -np "$np" "$build/benchmarks/bench_collectives" --hardware "$build/cpu-local-np$np.json" --markdown
done
