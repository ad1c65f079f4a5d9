#!/usr/bin/env python3
"""Runs the runnable shell blocks of a Markdown file (README.md) and checks their output.

  readme_doctest.py FILE BUILD_DIR [--selftest]

A runnable block is a ```sh fence right after a line

  <!-- doctest: OLD => NEW | OLD2 => NEW2 -->     (or <!-- doctest --> with no rules)

Each rule is a plain text replacement applied before the block runs (short step counts, the
loopback address for a host's, metrics ports off); a rule that no longer applies fails the
test, so the shown command and the one run cannot drift apart silently. Each port 55xx in the
block is moved to a free port of this machine. The block runs in bash -e in an empty
temporary directory where `build` is BUILD_DIR, with no SAC_* variable set, for at most 300 s,
and must exit 0.

When a ```text fence marked <!-- doctest-output --> follows the block, each of its lines is a
pattern that must match the start of an output line (stdout and stderr), in order; in a
pattern every number stands for any number, since figures differ from run to run.
--selftest runs the harness on planted blocks first (a passing one, a failing command, an
output that does not match, a stale rule) and fails if it misjudges any."""
import os
import re
import socket
import subprocess
import sys
import tempfile

NUM = re.compile(r"[-\u2212]?\d+(?:[.,]\d+)*(?:e[-+]?\d+)?")


def blocks(text):
    lines = text.splitlines()
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^<!-- doctest(?::(.*))? -->$", lines[i].strip())
        if not m:
            i += 1
            continue
        if i + 1 >= len(lines) or lines[i + 1].strip() != "```sh":
            out.append({"line": i + 1, "error": "a doctest marker not followed by a ```sh fence"})
            i += 1
            continue
        j = i + 2
        body = []
        while j < len(lines) and lines[j].strip() != "```":
            body.append(lines[j])
            j += 1
        rules = [r.split("=>", 1) for r in (m.group(1) or "").split(" | ") if r.strip()]
        blk = {"line": i + 1, "body": "\n".join(body) + "\n", "rules": [(a.strip(), b.strip()) for a, b in rules],
               "expect": []}
        k = j + 1
        while k < len(lines) and not lines[k].strip():
            k += 1
        if k < len(lines) and lines[k].strip() == "<!-- doctest-output -->" and k + 1 < len(lines) \
                and lines[k + 1].startswith("```"):
            k += 2
            while k < len(lines) and lines[k].strip() != "```":
                if lines[k].strip():
                    blk["expect"].append(lines[k])
                k += 1
        out.append(blk)
        i = k
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pattern(line):
    parts, pos = [], 0
    for m in NUM.finditer(line):
        parts.append(re.escape(line[pos:m.start()]))
        parts.append(r"[-\u2212]?\d[\d.,e+-]*")
        pos = m.end()
    parts.append(re.escape(line[pos:]))
    return re.compile(re.sub(r"(\\ )+", r"\\s+", "".join(parts)))


def run_block(blk, build, name):
    if "error" in blk:
        return f"{name}:{blk['line']}: {blk['error']}"
    body = blk["body"]
    for old, new in blk["rules"]:
        if old not in body:
            return f"{name}:{blk['line']}: the rule '{old} => {new}' no longer applies to the block"
        body = body.replace(old, new)
    ports = {p: str(free_port()) for p in sorted(set(re.findall(r"(?<=:)55\d\d\b", body)))}
    body = re.sub(r"(?<=:)55\d\d\b", lambda m: ports[m.group(0)], body)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAC_")}
    with tempfile.TemporaryDirectory(prefix="sac-doctest.") as d:
        os.symlink(os.path.abspath(build), os.path.join(d, "build"))
        try:
            # the block's background jobs die with it (a failing line under -e would leave
            # them holding the output pipe open until the timeout)
            body = "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + body
            p = subprocess.run(["bash", "-e", "-c", body], cwd=d, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=300)
        except subprocess.TimeoutExpired as e:
            return f"{name}:{blk['line']}: the block ran past 300 s\n{(e.output or b'').decode(errors='replace')[-2000:]}"
    out = p.stdout.decode(errors="replace")
    if p.returncode != 0:
        return f"{name}:{blk['line']}: the block exited {p.returncode}; its last lines:\n" + \
            "\n".join(out.splitlines()[-15:])
    olines, at = out.splitlines(), 0
    for exp in blk["expect"]:
        rx = pattern(exp)
        while at < len(olines) and not rx.match(olines[at]):
            at += 1
        if at == len(olines):
            return f"{name}:{blk['line']}: no output line matches '{exp}'; the output's last lines:\n" + \
                "\n".join(olines[-15:])
        at += 1
    print(f"{name}:{blk['line']}: ran, exit 0, {len(blk['expect'])} shown line(s) matched")
    return None


def selftest(build):
    cases = [
        ("<!-- doctest: 41 => 42 -->\n```sh\necho result 41 of 7\n```\n<!-- doctest-output -->\n```text\n"
         "result 1 of 2\n```\n", True),
        ("<!-- doctest -->\n```sh\nfalse\n```\n", False),
        ("<!-- doctest -->\n```sh\necho result 1\n```\n<!-- doctest-output -->\n```text\nresults 1\n```\n", False),
        ("<!-- doctest: nothing => here -->\n```sh\necho hi\n```\n", False),
    ]
    for text, want in cases:
        got = all(run_block(b, build, "selftest") is None for b in blocks(text))
        if got != want:
            print(f"FAIL: the self-test misjudged this block (expected {'pass' if want else 'fail'}):\n{text}")
            return False
    print("self-test: the harness passes a good block and fails a bad command, a wrong output, a stale rule")
    return True


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    path, build = sys.argv[1], sys.argv[2]
    if "--selftest" in sys.argv[3:] and not selftest(build):
        return 1
    found = blocks(open(path, encoding="utf-8").read())
    if not found:
        print(f"FAIL: {path} has no <!-- doctest --> block")
        return 1
    bad = [e for e in (run_block(b, build, os.path.basename(path)) for b in found) if e]
    for e in bad:
        print("FAIL: " + e)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
