#!/usr/bin/env python3
"""The repository stands alone: no file cites a design or style document that is not in it, and
the docs speak of the project, not of the process that wrote them (no "session"). Prints one line
per breach (file:line: text); exit 1 if any."""
import pathlib
import re
import sys

FOLDERS = ["include", "src", "tools", "tests", "docs", "benchmarks", "examples", "scripts"]
SUFFIXES = {".hpp", ".cuh", ".cpp", ".cu", ".py", ".md", ".build", ".sh", ".txt", ".json", ""}
ABSENT = re.compile(r"\b(" + "DESIGN" + "|" + "STYLE" + r")\.md\b")  # documents kept outside the repository
PROCESS_TALK = re.compile(r"\bsessions?\b", re.IGNORECASE)


def files(root: pathlib.Path):
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.is_file() and path.suffix in SUFFIXES and "corpus" not in path.parts:
                yield path
    yield root / "README.md"
    yield root / "meson.build"


def main() -> int:
    root = pathlib.Path(sys.argv[1])
    breaches, seen = [], 0
    for path in files(root):
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        seen += 1
        rel = path.relative_to(root).as_posix()
        is_doc = rel.startswith("docs/") or rel == "README.md"
        for n, line in enumerate(text.splitlines(), 1):
            if ABSENT.search(line):
                breaches.append(f"{rel}:{n}: cites a document the repository lacks: {line.strip()}")
            if is_doc and PROCESS_TALK.search(line):
                breaches.append(f"{rel}:{n}: speaks of sessions, not of the project: {line.strip()}")
    for b in breaches:
        print(b)
    print(f"{seen} files, {len(breaches)} breaches")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
