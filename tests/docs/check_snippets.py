#!/usr/bin/env python3
"""Compiles, links and runs every ```cpp block of docs/**/*.md and README.md (Hana's practice:
every docs example is compiled and run); a block fails when it does not compile or its program
exits non-zero.

Convention (docs/errors.md repeats it):
  - a block with `int main` is a whole translation unit, compiled as README.md's "Building a program
    with autoddl" says (from the source tree: -std=c++20 -I include -DAUTODDL_HARDWARE_DIR=...,
    OpenBLAS and MPI where it uses the CPU runtime); every block of docs/tutorials/ is one, so a
    reader can copy it as it is;
  - any other block is the body of a function: its `#include` lines are hoisted to the top,
    after `#include <autoddl/autoddl.hpp>`, and `using namespace autoddl;` comes first;
  - a block with `// scope: file` is put at namespace scope instead (for templates, functions);
  - a block whose text says `mpirun -np N` runs on N MPI ranks, any other block as one process;
  - a block with `// no-compile: tests/compile_fail/CASE.cpp` shows a deliberate error: it is
    not compiled here, and CASE.cpp must exist and be listed in tests/compile_fail/meson.build
    (or be an example that file runs), so the error itself is tested.
The function-body blocks that run as one process are compiled together, each the body of its own
function in one program that calls them in order (one compile of autoddl.hpp instead of one per
block); where that program fails to compile or to run, each of its blocks is compiled and run
alone, so the failure names its block. The other blocks are compiled one by one.
Usage: check_snippets.py SOURCE_ROOT CXX [ARGS...]"""
import concurrent.futures
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile


def blocks(md: pathlib.Path):
    text = md.read_text()
    for m in re.finditer(r"^```cpp[ \t]*\n(.*?)^```", text, re.M | re.S):
        line = text.count("\n", 0, m.start()) + 1
        yield line, m.group(1)


def pkg_libs(name: str) -> list:
    r = subprocess.run(["pkg-config", "--libs", name], capture_output=True, text=True)
    return r.stdout.split() if r.returncode == 0 else []


def wrap(code: str) -> str:
    if re.search(r"\bint\s+main\s*\(", code):
        return code
    incs = [l for l in code.splitlines() if l.lstrip().startswith("#include")]
    body = "\n".join(l for l in code.splitlines() if not l.lstrip().startswith("#include"))
    head = "#include <autoddl/autoddl.hpp>\n" + "\n".join(incs) + "\nusing namespace autoddl;\n"
    if "// scope: file" in code:
        return head + body + "\nint main() {}\n"
    return head + "int main() {\n" + body + "\n}\n"


def batchable(code: str) -> bool:
    """A function-body block that runs as one process."""
    return not (re.search(r"\bint\s+main\s*\(", code) or "// scope: file" in code or re.search(r"mpirun -np (\d+)", code))


def batch(snippets) -> str:
    """One program of several function-body blocks [(where, code)]: each the body of its own
    function returning int (a block may `return 1;` as main would), called in order, each
    announced on stderr first; the first non-zero return ends the program with it. Each body starts with `using
    autoddl::link;`: a header another block includes may bring POSIX's ::link, which would make the
    block's `link` ambiguous where alone it is not."""
    incs, funcs, calls = [], [], []
    for k, (where, code) in enumerate(snippets):
        incs += [l for l in code.splitlines() if l.lstrip().startswith("#include")]
        body = "\n".join(l for l in code.splitlines() if not l.lstrip().startswith("#include"))
        funcs.append(f"// {where}\nint snippet_{k}() {{\nusing autoddl::link;\n{body}\nreturn 0;\n}}\n")
        calls.append(f'  std::fputs("{where}\\n", stderr);\n  if (int r = snippet_{k}()) return r;\n')
    head = "#include <autoddl/autoddl.hpp>\n#include <cstdio>\n" + "\n".join(dict.fromkeys(incs)) + "\nusing namespace autoddl;\n"
    return head + "\n".join(funcs) + "int main() {\n" + "".join(calls) + "}\n"


def main() -> int:
    root = pathlib.Path(sys.argv[1])
    cxx = sys.argv[2:]
    listed = (root / "tests/compile_fail/meson.build").read_text()
    mds = sorted((root / "docs").rglob("*.md")) + [root / "README.md"]
    jobs, failures, together = [], [], []
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="autoddl-docs-"))
    for md in mds:
        for line, code in blocks(md):
            where = f"{md.relative_to(root)}:{line}"
            m = re.search(r"// no-compile: (\S+)", code)
            if m:
                case = pathlib.Path(m.group(1))
                if not (root / case).is_file() or case.name not in listed:
                    failures.append(f"{where}: no-compile names {case}, which is not a compile-fail case")
                continue
            if md.parent.name == "tutorials" and not re.search(r"\bint\s+main\s*\(", code):
                failures.append(f"{where}: a tutorial's block is a whole program (its includes and int main), "
                                "built as README.md's 'Building a program with autoddl' says")
                continue
            if batchable(code):
                together.append((where, code))
                continue
            src = tmp / f"snippet{len(jobs)}.cpp"
            src.write_text(f"// {where}\n" + wrap(code))
            jobs.append((where, src))
    # -O0: the blocks are checked for compiling and running, not timed; against -O1 it takes a
    # quarter less compile time (167 s against 228 s of user time for the 25 blocks here)
    flags = ["-std=c++20", "-O0", "-Wall", "-Wextra", "-Wpedantic", f"-I{root / 'include'}",
             f'-DAUTODDL_HARDWARE_DIR="{root / "data/hardware"}"']
    libs = pkg_libs("openblas") or pkg_libs("cblas")
    mpirun = shutil.which("mpirun")
    if shutil.which("mpicxx"):  # snippets that train on MPI ranks (tutorial 4)
        flags += subprocess.run(["mpicxx", "--showme:compile"], capture_output=True, text=True).stdout.split()
        libs += subprocess.run(["mpicxx", "--showme:link"], capture_output=True, text=True).stdout.split()

    def compile_and_run(job):
        where, src = job
        exe = src.with_suffix("")
        r = subprocess.run(cxx + flags + [str(src), "-o", str(exe)] + libs, capture_output=True, text=True)
        if r.returncode != 0:
            return where, src, "does not compile", r.stderr
        ranks = re.search(r"mpirun -np (\d+)", src.read_text())
        cmd = [str(exe)]
        if ranks and mpirun:
            cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", ranks.group(1)] + cmd
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
        except subprocess.TimeoutExpired:
            return where, src, "did not finish in 120 s", ""
        if r.returncode != 0:
            return where, src, f"exits with {r.returncode}", r.stdout[-1500:] + r.stderr[-1500:]
        return where, src, None, r.stdout

    def report(results):
        for where, src, problem, out in results:
            if problem:
                failures.append(f"{where}: {problem}:\n{src.read_text()}\n{out[:3000]}")
            else:
                print(f"ok {where}" + (f" (prints {len(out.splitlines())} lines)" if out else ""))

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        batched = None
        if together:
            src = tmp / "together.cpp"
            src.write_text(batch(together))
            batched = pool.submit(compile_and_run, (f"{len(together)} function-body blocks together", src))
        report(pool.map(compile_and_run, jobs))
        if batched is not None:
            where, src, problem, out = batched.result()
            if problem is None:
                print(f"ok {where}: " + ", ".join(w for w, _ in together))
            else:  # find the failing blocks: each alone
                print(f"{where}: {problem}; compiling each alone")
                alone = []
                for k, (w, code) in enumerate(together):
                    one = tmp / f"alone{k}.cpp"
                    one.write_text(f"// {w}\n" + wrap(code))
                    alone.append((w, one))
                report(pool.map(compile_and_run, alone))
    for f in failures:
        print("FAIL " + f)
    print(f"{len(jobs) + len(together)} snippets compiled and run ({len(together)} of them as one program), "
          f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
