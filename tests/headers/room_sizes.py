#!/usr/bin/env python3
"""Rooms a reader can hold in their head: no file under include/ or tools/ longer than
600 lines, and no function body there longer than 60 lines.

File lengths are counted exactly. Function lengths come from a brace-matching scan: comments,
string and character literals are blanked, then every `{` whose preceding text (back to the
previous `;`, `{` or `}`) ends in a parameter list `)`, optionally followed by qualifiers
(`const`, `noexcept`, `override`, `-> T`, `requires ...`, a constructor's initialiser list), opens
a function body; its length is the number of lines from the line of that `{` to the line of its
matching `}`, both included. Lambdas count as functions of their own, and so do control statements
(`if (...) {`), which are never longer than the function that holds them. Prints one line per
breach and a summary; exit 1 if any.
    room_sizes.py SOURCE_ROOT [--list N]   (--list N: also print the N longest functions)"""
import pathlib
import re
import sys

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 60
SUFFIXES = {".hpp", ".cpp", ".cuh", ".cu", ".h"}
CONTROL = {"if", "for", "while", "switch", "catch", "constexpr", "requires"}  # requires: a concept's requirements


def blank(text: str) -> str:
    """Comments and literals replaced by spaces (newlines kept), so braces inside them do not count."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator: 1'000'000
                out.append(c)
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


QUALIFIERS = re.compile(
    r"\)\s*(?:const\b|noexcept(?:\s*\([^()]*\))?|override\b|final\b|mutable\b|constexpr\b|&&?|\s)*"
    r"(?:->\s*[^{;]*?)?(?:requires\b[^{;]*?)?(?::[^{;]*?)?\s*$",
    re.S)


def name_of(head: str) -> str:
    """The function's name: the identifier before the parameter list that the head ends with."""
    depth, i = 0, len(head) - 1
    close = head.rfind(")")
    i = close
    while i >= 0:
        if head[i] == ")":
            depth += 1
        elif head[i] == "(":
            depth -= 1
            if depth == 0:
                break
        i -= 1
    m = re.search(r"([A-Za-z_~][\w:~<>=!+\-*/\[\]]*|\])\s*$", head[:max(i, 0)])
    return m.group(1) if m else "?"


def functions(text: str):
    """(name, first line, length in lines) for every function body and lambda in the blanked text."""
    code = blank(text)
    lines = [0] * (len(code) + 1)
    line = 1
    for k, ch in enumerate(code):
        lines[k] = line
        if ch == "\n":
            line += 1
    found, stack = [], []
    last_stop = 0
    for k, ch in enumerate(code):
        if ch == "{":
            head = code[last_stop:k]
            is_function = False
            if QUALIFIERS.search(head):
                name = name_of(head)
                is_function = name.split("::")[-1] not in CONTROL and name != "?"
            # a brace inside an open parenthesis (a default argument `= {}`, a lambda passed to a call)
            # leaves the enclosing head going on after it closes
            inside_parens = head.count("(") > head.count(")")
            # a braced initialiser (`x_{n}`, `std::vector<int>{1, 2}`) is part of an expression or of a
            # constructor's initialiser list: the head goes on after it as well
            if k > 0 and (code[k - 1].isalnum() or code[k - 1] in "_>"):
                stack.append((k, False, "", last_stop))
                continue
            stack.append((k, is_function, name if is_function else "", last_stop if inside_parens else None))
            last_stop = k + 1
        elif ch == "}":
            resume = None
            if stack:
                start, is_function, name, resume = stack.pop()
                if is_function:
                    found.append((name, lines[start], lines[k] - lines[start] + 1))
            last_stop = k + 1 if resume is None else resume
        elif ch == ";":
            last_stop = k + 1
    return found


def main() -> int:
    root = pathlib.Path(sys.argv[1])
    listing = int(sys.argv[sys.argv.index("--list") + 1]) if "--list" in sys.argv else 0
    paths = sorted(p for folder in ("include", "tools") for p in (root / folder).rglob("*")
                   if p.suffix in SUFFIXES and p.is_file())
    breaches, every = [], []
    for path in paths:
        rel = path.relative_to(root).as_posix()
        text = path.read_text()
        n = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if n > MAX_FILE_LINES:
            breaches.append(f"{rel}: {n} lines (at most {MAX_FILE_LINES}); split it by job")
        for name, first, length in functions(text):
            every.append((length, rel, first, name))
            if length > MAX_FUNCTION_LINES:
                breaches.append(f"{rel}:{first}: function {name} is {length} lines "
                                f"(at most {MAX_FUNCTION_LINES}); split it into steps with names")
    for b in breaches:
        print(b)
    for length, rel, first, name in sorted(every, reverse=True)[:listing]:
        print(f"  {length:4d} {rel}:{first} {name}")
    print(f"{len(paths)} files, {len(every)} functions, {len(breaches)} breaches")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
