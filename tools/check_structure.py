#!/usr/bin/env python3
"""Structure limits for src/ (docs/architecture.md): no function body over MAX_FUNC lines, and a file over
LONG_FILE lines says at its top why (a line starting with LONG_MARKER among its first MARKER_LINES lines, with
the reason after the colon): a file holds one concept, and its length follows the concept, not a cap.
Functions are found by brace matching: a '{' that closes a line ending a signature ')' (or
') const', ') override', ...) at namespace depth opens a function; its length is the lines to the matching '}'.
Comments and string literals are blanked first. Exit 1 listing every violation."""
import re
import sys
from pathlib import Path

MAX_FUNC = 120
LONG_FILE = 700
LONG_MARKER = "// Over 700 lines:"
MARKER_LINES = 10
EXTS = {".h", ".cpp", ".cu", ".cuh"}


def strip(text):
    # Blank comments, string and char literals (keep newlines so line numbers stay right).
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + (m.group(1) if m else "") + '"', i)
            j = n if end < 0 else end + len(m.group(1) if m else "") + 2
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


SIG_END = re.compile(r"\)\s*(const|override|final|noexcept|mutable|->\s*[\w:<>,\s*&]+|\s)*$")


def functions(text):
    s = strip(text)
    stack = []  # (kind, start_line)
    line = 1
    for i, c in enumerate(s):
        if c == "\n":
            line += 1
        elif c == "{":
            before = s[max(0, i - 300):i].rstrip()
            outer_is_fn = any(k == "fn" for k, _ in stack)
            is_fn = not outer_is_fn and bool(SIG_END.search(before)) and not re.search(
                r"\b(if|for|while|switch|catch)\s*\([^;{}]*\)\s*$", before)
            stack.append(("fn" if is_fn else "block", line))
        elif c == "}" and stack:
            kind, start = stack.pop()
            if kind == "fn":
                yield start, line


def long_file_reason(text):
    for line in text.splitlines()[:MARKER_LINES]:
        if line.startswith(LONG_MARKER) and line[len(LONG_MARKER):].strip():
            return line[len(LONG_MARKER):].strip()
    return None


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "src")
    bad = []
    for p in sorted(root.rglob("*")):
        if p.suffix not in EXTS:
            continue
        text = p.read_text(encoding="utf-8", errors="replace")
        nlines = text.count("\n")
        if nlines > LONG_FILE and not long_file_reason(text):
            bad.append(f"{p}: {nlines} lines and no '{LONG_MARKER} <why>' line in its first {MARKER_LINES} lines")
        for start, end in functions(text):
            if end - start + 1 > MAX_FUNC:
                bad.append(f"{p}:{start}: function of {end - start + 1} lines (limit {MAX_FUNC})")
    for b in bad:
        print(b)
    print(f"check_structure: {len(bad)} violation(s) in {root}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
