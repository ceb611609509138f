#!/usr/bin/env python3
"""Compiles every ```cpp block of docs/**/*.md and README.md (Hana's practice: every docs
example is compiled).

Convention (docs/errors.md repeats it):
  - a block with `int main` is a whole translation unit;
  - any other block is the body of a function: its `#include` lines are hoisted to the top,
    after `#include <autoddl/autoddl.hpp>`, and `using namespace autoddl;` comes first;
  - a block with `// scope: file` is put at namespace scope instead (for templates, functions);
  - a block with `// no-compile: tests/compile_fail/CASE.cpp` shows a deliberate error: it is
    not compiled here, and CASE.cpp must exist and be listed in tests/compile_fail/meson.build
    (or be an example that file runs), so the error itself is tested.
Usage: check_snippets.py SOURCE_ROOT CXX [ARGS...]"""
import concurrent.futures
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


def wrap(code: str) -> str:
    if re.search(r"\bint\s+main\s*\(", code):
        return code
    incs = [l for l in code.splitlines() if l.lstrip().startswith("#include")]
    body = "\n".join(l for l in code.splitlines() if not l.lstrip().startswith("#include"))
    head = "#include <autoddl/autoddl.hpp>\n" + "\n".join(incs) + "\nusing namespace autoddl;\n"
    if "// scope: file" in code:
        return head + body + "\nint main() {}\n"
    return head + "int main() {\n" + body + "\n}\n"


def main() -> int:
    root = pathlib.Path(sys.argv[1])
    cxx = sys.argv[2:]
    listed = (root / "tests/compile_fail/meson.build").read_text()
    mds = sorted((root / "docs").rglob("*.md")) + [root / "README.md"]
    jobs, failures = [], []
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
            src = tmp / f"snippet{len(jobs)}.cpp"
            src.write_text(f"// {where}\n" + wrap(code))
            jobs.append((where, src))
    flags = ["-std=c++20", "-fsyntax-only", "-Wall", "-Wextra", "-Wpedantic", f"-I{root / 'include'}",
             f'-DAUTODDL_HARDWARE_DIR="{root / "data/hardware"}"']
    if shutil.which("mpicxx"):  # snippets that train on MPI ranks (tutorial 4)
        flags += subprocess.run(["mpicxx", "--showme:compile"], capture_output=True, text=True).stdout.split()

    def compile_one(job):
        where, src = job
        r = subprocess.run(cxx + flags + [str(src)], capture_output=True, text=True)
        return where, src, r

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for where, src, r in pool.map(compile_one, jobs):
            if r.returncode != 0:
                failures.append(f"{where}: does not compile:\n{src.read_text()}\n{r.stderr[:3000]}")
            else:
                print(f"ok {where}")
    for f in failures:
        print("FAIL " + f)
    print(f"{len(jobs)} snippets compiled, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
