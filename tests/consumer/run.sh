#!/usr/bin/env bash
# Installs autoddl into a scratch prefix and builds tests/consumer/project against it twice:
# through the generated pkg-config file, and as a subproject; and tutorial 3's first program with
# README.md's installed command (pkg-config's flags and its hardwaredir variable).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
meson setup "$tmp/lib" "$src" --prefix="$tmp/prefix" -Dtests=false -Dtools=false -Dmpi=disabled \
  -Dcuda=disabled -Dblas=disabled >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
meson install -C "$tmp/lib" >>"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
pc=$(dirname "$(find "$tmp/prefix" -name autoddl.pc | head -n1)")
echo "installed: $(find "$tmp/prefix" -name '*.hpp' | wc -l) headers, pkg-config file in ${pc#$tmp/}"
# README.md's installed command builds tutorial 3's first program as written, and it runs
python3 - "$src/docs/tutorials/3-plans.md" "$tmp/tutorial3.cpp" <<'PY'
import re, sys
block = re.search(r"^```cpp[ \t]*\n(.*?)^```", open(sys.argv[1]).read(), re.M | re.S).group(1)
open(sys.argv[2], "w").write(block)
PY
g++ -O1 "$tmp/tutorial3.cpp" -o "$tmp/tutorial3" $(PKG_CONFIG_PATH="$pc" pkg-config --cflags autoddl nlohmann_json) \
  -DAUTODDL_HARDWARE_DIR=\"$(PKG_CONFIG_PATH="$pc" pkg-config --variable=hardwaredir autoddl)\" >>"$tmp/log" 2>&1 \
  || { cat "$tmp/log"; exit 1; }
"$tmp/tutorial3"
echo "tutorial 3's first program built with README.md's installed command and ran"
PKG_CONFIG_PATH="$pc" meson setup "$tmp/c1" "$src/tests/consumer/project" >>"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
meson compile -C "$tmp/c1" >>"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
"$tmp/c1/consumer"
cp -r "$src/tests/consumer/project" "$tmp/sub"
mkdir -p "$tmp/sub/subprojects"
ln -s "$src" "$tmp/sub/subprojects/autoddl"
meson setup "$tmp/c2" "$tmp/sub" -Duse_subproject=true -Dautoddl:tests=false -Dautoddl:tools=false \
  -Dautoddl:mpi=disabled -Dautoddl:cuda=disabled >>"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
meson compile -C "$tmp/c2" >>"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
"$tmp/c2/consumer"
echo "consumer built and ran against the installed library and as a subproject"
