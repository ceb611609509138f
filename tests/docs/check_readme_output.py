#!/usr/bin/env python3
"""README's quoted output of scripts/demo is what the programs print: runs the demo's two
commands (autoddl-plan, and autoddl-train on 4 MPI ranks) and checks that every quoted line of
the README block that follows "`scripts/demo` plans a GPT" appears in their output, spaces
collapsed. A quoted line that contains "..." is elided text and is skipped; "(...)" at the end
of a line stands for the rest of that line.
Usage: check_readme_output.py SOURCE_ROOT BUILD_ROOT MPIRUN"""
import pathlib
import re
import subprocess
import sys


def quoted_lines(readme: str) -> list:
    start = readme.index("`scripts/demo` plans a GPT")
    block = re.search(r"\n\n((?:    .*\n)+)", readme[start:])
    return [l.strip() for l in block.group(1).splitlines()]


def squash(s: str) -> str:
    return " ".join(s.split())


def main() -> int:
    root, build, mpirun = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
    demo = (root / "scripts/demo").read_text()
    plan_args = re.search(r"^\s+build/tools/autoddl-plan (.*?)\n\s*fi", demo, re.S | re.M).group(1)
    train_args = re.search(r"^\s+mpirun -np 4 build/tools/autoddl-train (.*?)\n\s*fi", demo, re.S | re.M).group(1)
    split = lambda a: a.replace("\\\n", " ").split()
    env = {"OPENBLAS_NUM_THREADS": "1", "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "PATH": "/usr/bin:/bin:/usr/local/bin"}
    out = ""
    for cmd in ([str(build / "tools/autoddl-plan")] + split(plan_args),
                [mpirun, "-np", "4", str(build / "tools/autoddl-train")] + split(train_args)):
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        if r.returncode != 0:
            print(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
            return 1
        out += r.stdout
    printed = squash(out)
    missing = []
    for line in quoted_lines((root / "README.md").read_text()):
        if line.endswith("(...)"):
            line = line[: -len("(...)")]
        elif "..." in line:
            continue
        if squash(line) not in printed:
            missing.append(line)
    for line in missing:
        print(f"README.md quotes a line the demo does not print: {line}")
    if missing:
        print("--- the demo printed:\n" + out)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
