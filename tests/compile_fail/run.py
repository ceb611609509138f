#!/usr/bin/env python3
"""Runs one compile-fail case: the case must fail to compile with a diagnostic matching its
`// expect:` regex, and its positive twin (-DAUTODDL_TWIN) must compile ({fmt}'s practice: no
test passes by failing for the wrong reason)."""
import pathlib
import re
import subprocess
import sys


def main() -> int:
    case = pathlib.Path(sys.argv[1])
    inc = sys.argv[2]
    cxx = sys.argv[3:]
    src = case.read_text()
    pats = [m.group(1).strip() for m in re.finditer(r"^// expect: (.*)$", src, re.M)]
    if not pats:
        print(f"{case}: no '// expect: REGEX' line")
        return 1
    base = cxx + ["-std=c++20", "-fsyntax-only", f"-I{inc}", "-x", "c++", str(case)]
    bad = subprocess.run(base, capture_output=True, text=True)
    twin = subprocess.run(base + ["-DAUTODDL_TWIN"], capture_output=True, text=True)
    ok = True
    if bad.returncode == 0:
        print(f"FAIL {case.name}: the case compiled, but it must not")
        ok = False
    else:
        for p in pats:
            if not re.search(p, bad.stderr, re.S):
                print(f"FAIL {case.name}: diagnostic does not match /{p}/:\n{bad.stderr[:4000]}")
                ok = False
    if twin.returncode != 0:
        print(f"FAIL {case.name}: the positive twin does not compile:\n{twin.stderr[:4000]}")
        ok = False
    if ok:
        print(f"ok {case.name}: fails with /{'/, /'.join(pats)}/; twin compiles")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
