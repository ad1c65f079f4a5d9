#!/usr/bin/env python3
"""Checks of the user documentation (tests/docs/CMakeLists.txt runs them).

  check_docs.py lint SRC FILE...           development-log markers and broken relative links
  check_docs.py troubleshooting SRC FILE   every quoted message is one the sources print

lint: README.md, docs/ and deploy/README.md are for users; a commit hash in prose, a dated
run, a bare issue number, session talk, and history told in prose (before/after a change,
an earlier run, runs named by letter, a branch name, "was changed after") belong in commit
messages. A relative link must name a file or folder that exists (its #anchor is not
checked). A sentence that cites the README (or another page's table or figures) for a
figure or a command must cite one that page has.

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
# History told in prose: a manual describes the system as it is; how it came to be goes in
# CHANGELOG.md and commit messages. Each pattern has a planted line in test_docs.sh.
HISTORY = [
    (re.compile(r"\b(?:[Bb]efore|[Aa]fter) (?:the|this|that|a|its|our) (?:fix|fixes|change|changes|rework|rewrite|"
                r"refactor|refactoring|patch|redesign)\b"), "before/after a change"),
    (re.compile(r"\b[Bb]efore (?:the|this|it) [\w-]+(?: [\w-]+)? (?:was|were) (?:rebuilt|reworked|rewritten|"
                r"changed|fixed|redesigned|replaced)\b"), "before/after a change"),
    (re.compile(r'\("(?:before|after)"|^\|(?:[^|]*\|)*\s*(?:before|after)(?:,[^|]*)?\s*\|'), "a before/after comparison"),
    (re.compile(r"\b(?:earlier|previous|prior|former) (?:run|runs|version|versions|measurement|measurements|"
                r"attempt|attempts|session|code|build|builds)\b", re.I), "an earlier run or version"),
    (re.compile(r"\b[Rr]uns? [A-H](?:\s*(?:[\u2013\u2014-]|to|and|,|/)\s*[A-H])*\b(?![\w-])"), "runs named by letter (a run log)"),
    (re.compile(r"\b(?:on|in|from|of) (?:this|that|the|a|my|our|[`'][\w./-]+[`']) branch\b|\bbranch(?:es)? [`'][\w./-]+[`']|"
                r"\b[a-z]\d{2,}-[a-z]+(?:-[a-z]+)*\b(?![./])"), "a branch name"),
    (re.compile(r"\b(?:was|were|has been|have been|got) (?:changed|fixed|rewritten|reworked|modified|added|removed|"
                r"replaced|renamed|rebuilt|tuned) (?:after|since|later|following)\b"), "a change told as history"),
    (re.compile(r"(?<!is )(?<!are )(?<!be )(?<!was )(?<!were )(?<!been )\bused to (?:be|take|run|print|say|read|write|"
                r"have|wait|send|log|cost|fail|pass|need|work)\b|\b(?:formerly|until recently|at the time of "
                r"writing|as of this writing)\b", re.I), "a change told as history"),
]
# hex that is not a hash: sizes and addresses in code, Z85/hex keys in examples
HEX_OK = re.compile(r"^(?:[0-9]+|[a-f]+)$")
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


# A figure said to be in another page must be there: a sentence that cites the README (or a
# page's table or figure: "LEARNER.md's table") with a measured figure (a number with its
# unit) or a quoted command, where the cited page has no such text.
CITE_README = re.compile(r"(?<![/\w])(?:[Tt]he README(?:'s)?|README(?:\.md)?'s|README\.md (?:gives|shows|has|reports|lists)|"
                         r"\(README(?:\.md)?\)|see README(?:\.md)?)")
CITE_PAGE = re.compile(r"\b([A-Z][A-Z_]+)\.md's (?:table|figure|figures|benchmark|timings?|results?)")
FIGURE = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)\s?(updates/s|steps/s|transitions/s|GFLOP/s|GB/s|MiB|GiB|ms|s\b|%|x\b|\u00d7)")
CODE = re.compile(r"`([^`]+)`")


def norm(x):
    return re.sub(r"[,\u202f\u2009 ]", "", x)


def cross_refs(src, path, text):
    """Sentences that cite a figure or command in another page that the page lacks."""
    bad = []
    pages = {"README": os.path.join(src, "README.md")}
    for name in os.listdir(os.path.join(src, "docs")):
        if name.endswith(".md") and name != "README.md":
            pages[name[:-3]] = os.path.join(src, "docs", name)
    # fenced blocks and HTML comments are not prose; blanked, so line numbers stay
    text = re.sub(r"(?ms)^\s*```.*?^\s*```|<!--.*?-->", lambda m: "\n" * m.group(0).count("\n"), text)
    paras = re.split(r"\n\s*\n|\n(?=\s*[-*] )", text)
    starts = [0] + [m.end() for m in re.finditer(r"\n\s*\n|\n(?=\s*[-*] )", text)]
    line_of = [text.count("\n", 0, st) + 1 for st in starts]
    for para, first in zip(paras, line_of):
        if para.lstrip().startswith(("```", "|")):
            continue
        for sent in re.split(r"(?<=[.;:])\s+(?=[A-Z(`])", para.replace("\n", " ")):
            cited, at = set(), len(sent)
            for m in CITE_README.finditer(sent):
                cited.add("README")
                at = min(at, m.end())
            for m in CITE_PAGE.finditer(sent):
                if m.group(1) in pages:
                    cited.add(m.group(1))
                    at = min(at, m.end())
            for page in cited:
                if os.path.abspath(pages[page]) == os.path.abspath(path):
                    continue
                body = norm(open(pages[page], encoding="utf-8").read())
                for m in FIGURE.finditer(sent):
                    if norm(m.group(1)) not in body:
                        bad.append(f"{os.path.relpath(path, src)}:{first}: cites {page} for '{m.group(0)}', which {page} does not have")
                # a command said to be in the page: a code span right after the citation
                for m in CODE.finditer(sent, at, at + 60):
                    if norm(m.group(1)) not in body and not m.group(1).endswith(".md"):
                        bad.append(f"{os.path.relpath(path, src)}:{first}: cites {page} for `{m.group(1)}`, which {page} does not have")
    return bad


def lint(src, files):
    bad = []
    for path in files:
        text = open(path, encoding="utf-8").read()
        fenced = False
        for n, line in enumerate(text.splitlines(), 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
            for rx, what in MARKERS:
                for m in rx.finditer(line):
                    if what == "a commit hash" and HEX_OK.match(m.group(0)):
                        continue
                    bad.append(f"{os.path.relpath(path, src)}:{n}: {what}: '{m.group(0)}'")
            prose = re.sub(r"`[^`]*`|\]\([^)]*\)", "", line)  # code spans and link targets are not prose
            for rx, what in HISTORY:
                if fenced:
                    break
                for m in rx.finditer(prose):
                    bad.append(f"{os.path.relpath(path, src)}:{n}: history in a manual ({what}): '{m.group(0).strip()}'")
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                    continue
                rel = target.split("#", 1)[0]
                if not os.path.exists(os.path.join(os.path.dirname(path), rel)):
                    bad.append(f"{os.path.relpath(path, src)}:{n}: broken relative link '{target}'")
        bad += cross_refs(src, path, text)
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
        ok = f"{len(sys.argv) - 3} files: no development-log markers, no history, no broken links or cross-references"
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
