#!/usr/bin/env python3
"""Every output the tutorials quote is what the programs print now: a block of indented lines
that follows a marker

    <!-- output of: autoddl-plan --model mlp --mesh 2x4 --hardware dgx1-v100 -->

(the command as a reader types it; `autoddl-plan`, `autoddl-train` and `mpirun -np N
autoddl-train` run the build's programs) must have each of its lines in the command's output
(stdout and stderr), spaces collapsed. As in README.md's quote of scripts/demo: a quoted line that
contains "..." is elided text and is skipped; "(...)" at the end of a line stands for the rest of
it (what varies from run to run: search and step times).
Usage: check_quoted_outputs.py SOURCE_ROOT BUILD_ROOT MPIRUN"""
import pathlib
import re
import shlex
import subprocess
import sys


def squash(s: str) -> str:
    return " ".join(s.split())


def quoted(md: pathlib.Path):
    """(line number, command, quoted lines) of every marked block of md."""
    text = md.read_text()
    for m in re.finditer(r"<!-- output of: (.*?) -->\n\n?((?:    .*\n|\n)+)", text):
        lines = [l.strip() for l in m.group(2).splitlines() if l.strip()]
        yield text.count("\n", 0, m.start()) + 1, m.group(1), lines


def command(cmd: str, build: pathlib.Path, mpirun: str) -> list:
    words = shlex.split(cmd)
    if words[:2] == ["mpirun", "-np"]:
        words = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", words[2]] + words[3:]
    return [str(build / "tools" / w) if w in ("autoddl-plan", "autoddl-train") else w for w in words]


def main() -> int:
    root, build, mpirun = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
    env = {"OPENBLAS_NUM_THREADS": "1", "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "PATH": "/usr/bin:/bin:/usr/local/bin"}
    failures, blocks = [], 0
    for md in sorted((root / "docs" / "tutorials").glob("*.md")):
        for line, cmd, lines in quoted(md):
            blocks += 1
            where = f"{md.relative_to(root)}:{line}"
            r = subprocess.run(command(cmd, build, mpirun), capture_output=True, text=True, env=env, timeout=600)
            if r.returncode != 0:
                failures.append(f"{where}: `{cmd}` exited {r.returncode}: {r.stderr[-800:]}")
                continue
            printed = squash(r.stdout + "\n" + r.stderr)
            for q in lines:
                if q.endswith("(...)"):
                    q = q[: -len("(...)")]
                elif "..." in q:
                    continue
                if squash(q) not in printed:
                    failures.append(f"{where}: `{cmd}` does not print the quoted line: {q}")
            print(f"ok {where}: {len(lines)} quoted lines of `{cmd}`" if not any(f.startswith(where) for f in failures)
                  else f"FAIL {where}")
    for f in failures:
        print("FAIL " + f)
    print(f"{blocks} quoted outputs checked, {len(failures)} failures")
    return 1 if failures or blocks == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
