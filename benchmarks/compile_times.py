#!/usr/bin/env python3
"""The slowest translation units of a build: compile seconds and peak memory of each.

    benchmarks/compile_times.py [BUILD_DIR] [--top N] [--candidates K]

Takes the K translation units (default 20) that took longest in BUILD_DIR's last ninja run
(.ninja_log: its figures are wall times under parallel jobs, good enough to pick candidates),
compiles each again alone, one at a time, with the command in compile_commands.json (output to a
scratch file), and prints the N slowest (default 10): wall seconds, user+system CPU seconds and
the compiler's peak resident memory (from wait4's rusage of that one process). Run it on an
otherwise idle machine; it changes nothing in the build directory.
"""
import json
import os
import pathlib
import shlex
import subprocess
import sys
import tempfile
import time


def last_ninja_times(build: pathlib.Path) -> dict:
    """Output path -> seconds of its last build step in .ninja_log."""
    times = {}
    for line in (build / ".ninja_log").read_text().splitlines():
        if line.startswith("#"):
            continue
        start, end, _, out, _ = line.split("\t")
        times[out] = (int(end) - int(start)) / 1000
    return times


def measure(entry: dict, scratch: pathlib.Path):
    """Compiles one translation unit alone: (wall s, cpu s, peak KiB)."""
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out = args.index("-o")
    args = args[:out + 1] + [str(scratch)] + args[out + 2:]
    args = [a for a in args if a not in ("-MD",)]
    if "-MF" in args:
        i = args.index("-MF")
        del args[i:i + 2]
    if "-MQ" in args:
        i = args.index("-MQ")
        del args[i:i + 2]
    t0 = time.monotonic()
    proc = subprocess.Popen(args, cwd=entry["directory"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    if status != 0:
        raise RuntimeError(f"{entry['output']} does not compile: {proc.stderr.read().decode()[:2000]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def main() -> int:
    argv = sys.argv[1:]
    top, candidates = 10, 20
    if "--top" in argv:
        i = argv.index("--top")
        top = int(argv[i + 1])
        del argv[i:i + 2]
    if "--candidates" in argv:
        i = argv.index("--candidates")
        candidates = int(argv[i + 1])
        del argv[i:i + 2]
    build = pathlib.Path(argv[0] if argv else "build").resolve()
    commands = {e["output"]: e for e in json.loads((build / "compile_commands.json").read_text())}
    logged = last_ninja_times(build)
    chosen = sorted((o for o in commands if o in logged), key=lambda o: -logged[o])[:candidates]
    if not chosen:
        print(f"no compiled translation unit in {build}/.ninja_log; build first")
        return 1
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for o in chosen:
            wall, cpu, peak = measure(commands[o], pathlib.Path(tmp) / "tu.o")
            rows.append((wall, cpu, peak, o))
            print(f"  measured {o}: {wall:.1f} s", file=sys.stderr)
    rows.sort(reverse=True)
    print(f"The {min(top, len(rows))} slowest of {len(chosen)} candidate translation units of {build} "
          f"(compiled alone, one at a time):")
    print(f"{'wall s':>7} {'cpu s':>7} {'peak MiB':>9}  translation unit")
    for wall, cpu, peak, o in rows[:top]:
        print(f"{wall:7.1f} {cpu:7.1f} {peak / 1024:9.0f}  {o}")
    compiled = [logged[o] for o in commands if o in logged]
    print(f"its {len(compiled)} translation units took {sum(compiled):.0f} s of wall time in the last ninja run "
          f"(summed over parallel jobs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
