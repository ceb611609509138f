#!/usr/bin/env bash
# Times `g++ -O2` on benchmarks/typed_gpt_compile.cpp (12-layer typed GPT, every candidate
# instantiated as an executable instance on cpu_device) and reports seconds and the number of
# instantiated signatures.
# Usage: benchmarks/typed_compile_time.sh [CXX]   (run from anywhere; needs no build/)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cxx=${1:-g++}
out=$(mktemp -d)
start=$(date +%s.%N)
# shellcheck disable=SC2046  # pkg-config's flags are words
"$cxx" -std=c++20 -O2 -I"$root/include" "$root/benchmarks/typed_gpt_compile.cpp" -o "$out/typed_gpt_compile" \
  $(pkg-config --cflags --libs openblas)
end=$(date +%s.%N)
secs=$(echo "$end - $start" | bc)
"$out/typed_gpt_compile" > "$out/run.txt"
echo "compiler: $("$cxx" --version | head -n1)"
echo "compile_seconds $secs"
cat "$out/run.txt"
rm -rf "$out"
