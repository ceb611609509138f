#!/usr/bin/env python3
"""The include graph of include/autoddl/ follows the library's layering (NAMES below): a folder includes only
the folders it names (and what those name, transitively) and the top-level headers; no file
includes another folder's detail/; no cycle among files. Prints one line per breach; exit 1 if any."""
import pathlib
import re
import sys

NAMES = {  # each folder and the folders it may include (the list in this file is the rule)
    "sbp": [], "mesh": ["sbp"], "cost": ["sbp", "mesh"], "ops": ["sbp"], "models": ["ops"],
    "plan": ["models", "ops", "cost"], "search": ["plan", "models", "ops", "cost"], "backend": ["sbp", "mesh"],
    "runtime": ["plan", "backend", "cost"],
}


def reach(folder, seen=None):
    seen = set() if seen is None else seen
    for f in NAMES[folder]:
        if f not in seen:
            seen.add(f)
            reach(f, seen)
    return seen


def main() -> int:
    root = pathlib.Path(sys.argv[1]) / "include" / "autoddl"
    include = re.compile(r'#include "autoddl/([^"]+)"')
    edges, breaches = {}, []
    for path in sorted(list(root.rglob("*.hpp")) + list(root.rglob("*.cuh"))):
        rel = path.relative_to(root).as_posix()
        folder = rel.split("/")[0] if "/" in rel else None
        targets = include.findall(path.read_text())
        edges[rel] = targets
        for t in targets:
            tfolder = t.split("/")[0] if "/" in t else None
            if tfolder is None or folder is None:
                continue  # the top-level headers: every folder may use them; umbrellas include folders
            if "/detail/" in "/" + t and tfolder != folder:
                breaches.append(f"{rel} includes another folder's detail header {t}")
            if tfolder != folder and tfolder not in reach(folder):
                breaches.append(f"{rel} ({folder}/) includes {t}, but {folder}/ names only {sorted(reach(folder))}")
    state = {}

    def visit(f, stack):
        state[f] = 1
        for t in edges.get(f, []):
            if state.get(t) == 1:
                breaches.append("include cycle: " + " -> ".join(stack[stack.index(t):] + [t]))
            elif t in edges and t not in state:
                visit(t, stack + [t])
        state[f] = 2

    for f in edges:
        if f not in state:
            visit(f, [f])
    for b in breaches:
        print(b)
    print(f"{len(edges)} headers, {sum(map(len, edges.values()))} includes, {len(breaches)} breaches")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
