#!/usr/bin/env python3
"""Checks of the user documentation (tests/docs/CMakeLists.txt runs them).

  check_docs.py lint SRC FILE...           development-log markers and broken relative links
  check_docs.py troubleshooting SRC FILE   every quoted message is one the sources print

lint: README.md and docs/ are for users; a commit hash in prose, a dated run, a bare
issue number or session talk is history that belongs in commit messages. A relative
link must name a file or folder that exists (its #anchor is not checked).

troubleshooting: each entry is a "### " heading followed by a fenced block of the lines
the program prints (log level and module first, as in "ERROR config: ..."). Every line
must be produced by a format string in the C sources: the string literals (adjacent
literals joined) are turned into patterns where each printf conversion matches any text,
and one of them with at least 10 literal characters must match the whole line.
Exit 0 when clean, 1 with one line per finding."""
import os
import re
import sys

MARKERS = [
    (re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b"), "a commit hash"),
    (re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b"), "a date (a dated run)"),
    (re.compile(r"\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* \d{1,2},? 20\d\d\b"), "a date"),
    (re.compile(r"\b[Ii]ssues?[ -]#?\d+\b|(?<![\w/])#\d+\b"), "an issue number"),
    (re.compile(r"\b[Dd]efects? \d+\b"), "a defect number of an issue"),
    (re.compile(r"\b(?:this|these|previous|earlier|last|other) sessions?\b|\bsessions'|\ban earlier version of this\b", re.I), "session talk"),
]
# hex that is not a hash: sizes and addresses in code, Z85/hex keys in examples
HEX_OK = re.compile(r"^(?:[0-9]+|[a-f]+)$")
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def lint(src, files):
    bad = []
    for path in files:
        text = open(path, encoding="utf-8").read()
        for n, line in enumerate(text.splitlines(), 1):
            for rx, what in MARKERS:
                for m in rx.finditer(line):
                    if what == "a commit hash" and HEX_OK.match(m.group(0)):
                        continue
                    bad.append(f"{os.path.relpath(path, src)}:{n}: {what}: '{m.group(0)}'")
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                    continue
                rel = target.split("#", 1)[0]
                if not os.path.exists(os.path.join(os.path.dirname(path), rel)):
                    bad.append(f"{os.path.relpath(path, src)}:{n}: broken relative link '{target}'")
    return bad


LITERALS = re.compile(r'"((?:[^"\\\n]|\\.)*)"((?:\s*"(?:[^"\\\n]|\\.)*")*)')
CONV = re.compile(r"%[-+ #0]*(?:\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|z|j|t|L)?[diouxXeEfgGcsp]")
PREFIX = re.compile(r"^(?:ERROR|WARN|INFO|DEBUG)\s+[\w-]+: ")


def unescape(s):
    return re.sub(r'\\(["\\nt])', lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), s)


def formats(src):
    out = []
    for top in ("common", "learner", "replay", "actor", "envs"):
        for root, _, names in os.walk(os.path.join(src, top)):
            for name in names:
                if not name.endswith((".c", ".h", ".cu")):
                    continue
                text = open(os.path.join(root, name), encoding="utf-8", errors="replace").read()
                for m in LITERALS.finditer(text):
                    parts = [m.group(1)] + re.findall(r'"((?:[^"\\\n]|\\.)*)"', m.group(2))
                    fmt = unescape("".join(parts))
                    pieces = CONV.split(fmt.replace("%%", "\0"))
                    literal = sum(len(p) for p in pieces)
                    if literal < 10:
                        continue
                    rx = "(?:.*?)".join(re.escape(p.replace("\0", "%")) for p in pieces)
                    out.append(re.compile(rx, re.S))
    return out


def troubleshooting(src, path):
    fmts = formats(src)
    lines = open(path, encoding="utf-8").read().splitlines()
    bad, entries, i = [], 0, 0
    while i < len(lines):
        if lines[i].startswith("### ") and i + 2 < len(lines) and lines[i + 1].startswith("```"):
            entries += 1
            j = i + 2
            while j < len(lines) and not lines[j].startswith("```"):
                msg = PREFIX.sub("", lines[j].strip())
                if msg and not any(f.fullmatch(msg) for f in fmts):
                    bad.append(f"{os.path.relpath(path, src)}:{j + 1}: not printed by the sources: '{lines[j]}'")
                j += 1
            i = j
        i += 1
    if entries < 20:
        bad.append(f"{os.path.relpath(path, src)}: {entries} entries with a quoted message, fewer than 20")
    return bad, entries


def main():
    if len(sys.argv) < 4 or sys.argv[1] not in ("lint", "troubleshooting"):
        print(__doc__)
        return 2
    src = sys.argv[2]
    if sys.argv[1] == "lint":
        bad = lint(src, sys.argv[3:])
        ok = f"{len(sys.argv) - 3} files: no development-log markers, no broken relative links"
    else:
        bad, n = troubleshooting(src, sys.argv[3])
        ok = f"{n} troubleshooting entries, every quoted message printed by the sources"
    for b in bad:
        print(b)
    if not bad:
        print(ok)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
