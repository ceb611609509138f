#!/usr/bin/env python3
"""Compiles every public header of include/autoddl/ on its own: a user may include any one first.

Generates one translation unit per header that includes only that header (twice: include guards
work), and checks it:
  - .hpp headers with the C++ compiler in -fsyntax-only mode; those under backend/mpi with MPI's
    compile flags, taken from `mpicxx --showme:compile` when present;
  - host .cuh headers (backend/cuda, backend/nccl: "Host-only") with the same C++ compiler and
    CUDA's include directory as a system directory, the NCCL ones with MPI's flags too, as the
    build compiles the tests that include them;
  - device headers (those that hold kernels or include kernels.cuh) with nvcc, as the build's
    autoddl_cuda library does (-arch=sm_90 --expt-relaxed-constexpr -std=c++20), -c to /dev/null.
The .cuh headers are checked when CUDA is found: nvcc given as --nvcc=PATH (the build passes the
one it configured), else on PATH, $CUDA_PATH/bin or /usr/local/cuda/bin; its ../include must hold
cuda_runtime_api.h. Otherwise they are skipped, as MPI headers are without mpicxx.

Usage: check.py SOURCE_ROOT [--nvcc=PATH] CXX [CXX ARGS...]
"""
import concurrent.futures as cf
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

NVCC_FLAGS = ["-arch=sm_90", "--expt-relaxed-constexpr", "-std=c++20", "-Xcompiler=-Wall,-Wextra",
              "-Werror=all-warnings"]


def find_nvcc(given):
    """nvcc and CUDA's include directory, or (None, None) when CUDA is not here."""
    candidates = [given] if given else []
    candidates += [shutil.which("nvcc")]
    candidates += [os.path.join(os.environ[v], "bin", "nvcc") for v in ("CUDA_PATH", "CUDA_HOME") if v in os.environ]
    candidates += ["/usr/local/cuda/bin/nvcc"]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            inc = pathlib.Path(c).resolve().parent.parent / "include"
            if (inc / "cuda_runtime_api.h").is_file():
                return c, inc
    return None, None


def needs_nvcc(text: str) -> bool:
    """A header that holds kernels (kernels.cuh refuses any compiler but nvcc) or includes them."""
    return bool(re.search(r'^\s*#\s*ifndef\s+__CUDACC__', text, re.M) or
                re.search(r'^\s*#\s*include\s+"autoddl/backend/cuda/kernels\.cuh"', text, re.M))


def main() -> int:
    root = pathlib.Path(sys.argv[1]).resolve()
    rest = sys.argv[2:]
    given_nvcc = next((a.split("=", 1)[1] for a in rest if a.startswith("--nvcc=")), None)
    cxx = [a for a in rest if not a.startswith("--nvcc=")]
    inc = root / "include"
    headers = sorted(p for ext in ("*.hpp", "*.cuh") for p in (inc / "autoddl").rglob(ext))
    mpi_flags = []
    if shutil.which("mpicxx"):
        mpi_flags = subprocess.run(["mpicxx", "--showme:compile"], capture_output=True, text=True).stdout.split()
    nvcc, cuda_inc = find_nvcc(given_nvcc)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="autoddl-headers-"))

    def check(h: pathlib.Path):
        rel = h.relative_to(inc).as_posix()
        is_cuda = h.suffix == ".cuh"
        if is_cuda and nvcc is None:
            return rel, None
        needs_mpi = "/mpi/" in rel or rel.endswith("/mpi.hpp") or "/nccl" in rel
        if needs_mpi and not mpi_flags:
            return rel, None
        device = is_cuda and needs_nvcc(h.read_text())
        tu = tmp / (rel.replace("/", "__") + (".cu" if device else ".cpp"))
        tu.write_text(f'#include "{rel}"\n#include "{rel}"\n')  # twice: include guards work
        if device:
            cmd = [nvcc] + NVCC_FLAGS + [f"-I{inc}", "-c", "-o", os.devnull]
        else:
            cmd = cxx + ["-std=c++20", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", f"-I{inc}"]
            cmd += ["-isystem", str(cuda_inc)] if is_cuda else []
        cmd += mpi_flags if needs_mpi else []
        r = subprocess.run(cmd + [str(tu)], capture_output=True, text=True)
        return rel, (r.returncode, r.stdout + r.stderr, "nvcc" if device else "c++")

    failed = 0
    checked = 0
    with cf.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        for rel, res in ex.map(check, headers):
            if res is None:
                print(f"skip  {rel} (needs a back end this build lacks)")
                continue
            checked += 1
            code, err, tool = res
            if code != 0:
                failed += 1
                print(f"FAIL  {rel} ({tool})\n{err}")
            else:
                print(f"ok    {rel} ({tool})")
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"{checked} headers compiled alone, {failed} failed")
    if checked == 0:
        print("no header was checked")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
