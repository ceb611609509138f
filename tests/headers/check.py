#!/usr/bin/env python3
"""Compiles every public header of include/autoddl/ on its own (STYLE.md rule 12).

Generates one translation unit per header that includes only that header, and checks it with
the C++ compiler in -fsyntax-only mode. CUDA headers (.cuh) are left to the CUDA build; headers
under backend/mpi need MPI's compile flags, taken from `mpicxx --showme:compile` when present.
"""
import concurrent.futures as cf
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile


def main() -> int:
    root = pathlib.Path(sys.argv[1]).resolve()
    cxx = sys.argv[2:]
    inc = root / "include"
    headers = sorted(p for p in (inc / "autoddl").rglob("*.hpp"))
    mpi_flags = []
    if shutil.which("mpicxx"):
        mpi_flags = subprocess.run(["mpicxx", "--showme:compile"], capture_output=True, text=True).stdout.split()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="autoddl-headers-"))

    def check(h: pathlib.Path):
        rel = h.relative_to(inc).as_posix()
        if "/cuda/" in rel or "/nccl/" in rel:
            return rel, None
        needs_mpi = "/mpi/" in rel or rel.endswith("/mpi.hpp")
        if needs_mpi and not mpi_flags:
            return rel, None
        tu = tmp / (rel.replace("/", "__") + ".cpp")
        tu.write_text(f'#include "{rel}"\n#include "{rel}"\n')  # twice: include guards work
        cmd = cxx + ["-std=c++20", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", f"-I{inc}"]
        cmd += mpi_flags if needs_mpi else []
        r = subprocess.run(cmd + [str(tu)], capture_output=True, text=True)
        return rel, (r.returncode, r.stderr)

    failed = 0
    checked = 0
    with cf.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        for rel, res in ex.map(check, headers):
            if res is None:
                print(f"skip  {rel} (needs a back end this build lacks)")
                continue
            checked += 1
            code, err = res
            if code != 0:
                failed += 1
                print(f"FAIL  {rel}\n{err}")
            else:
                print(f"ok    {rel}")
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"{checked} headers compiled alone, {failed} failed")
    if checked == 0:
        print("no header was checked")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
