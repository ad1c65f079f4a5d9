#!/usr/bin/env python3
"""Audit of the launchers in deploy/: every SAC_* variable they read is an option of a
sacfleet program, an old name the programs still take, or a launcher variable that
deploy/README.md documents and the programs leave alone.

  deploy_audit.py SRC LEARNER ACTOR REPLAY [--selftest]

Files: deploy/docker-compose*.yml, deploy/entrypoint.sh, deploy/Dockerfile*, deploy/slurm/*.
A variable is every SAC_NAME token in them (compose's ${SAC_X:-...}, an environment key, a
shell expansion or a comment that names one); "SAC_SLURM_*" in prose stands for the prefix.
The programs' vocabulary is what their --help-markdown prints (each option's variable, the
other variables they read, their old names). A launcher variable must be listed in the table
of deploy/README.md's section "Variables only the launchers read", and each program must
start with it set (no "unknown key"). --selftest first audits a planted compose file with an
undocumented variable and fails unless the audit catches it.
Exit 0 clean, 1 with one line per finding."""
import glob
import os
import re
import subprocess
import sys
import tempfile

TOKEN = re.compile(r"\bSAC_[A-Z0-9_]*[A-Z0-9]\b|\bSAC_[A-Z0-9_]+_(?=\*)")


def deploy_files(root):
    pats = ["docker-compose*.yml", "entrypoint.sh", "Dockerfile*", "slurm/*"]
    out = []
    for p in pats:
        out += sorted(glob.glob(os.path.join(root, "deploy", p)))
    return out


def vocabulary(bins):
    known = set()
    for b in bins:
        text = subprocess.run([b, "--help-markdown"], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}).stdout
        known |= set(re.findall(r"`(SAC_[A-Z0-9_]+)`", text))
    return known


def launcher_table(readme):
    text = open(readme, encoding="utf-8").read()
    m = re.search(r"^#+ Variables only the launchers read\n(.*?)(?=^#+ |\Z)", text, re.S | re.M)
    if not m:
        return None
    names = set()
    for line in m.group(1).splitlines():
        if line.startswith("|"):
            first = line.split("|")[1]
            names |= set(re.findall(r"`(SAC_[A-Z0-9_]+\*?)`", first))
    return names


def accepted(bins, var):
    """Each program loads its configuration with var set (an unknown environment ID then
    stops it before anything starts)."""
    bad = []
    for b in bins:
        env = {"PATH": "/usr/bin:/bin", var: "1"}
        args = [b, "--env", "NoSuchEnv-v0", "--metrics_port", "-1"]
        r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=30)
        if f"{var}: unknown key" in r.stderr + r.stdout:
            bad.append(os.path.basename(b))
    return bad


def audit(root, bins, known, files=None):
    findings = []
    table = launcher_table(os.path.join(root, "deploy", "README.md"))
    if table is None:
        return ["deploy/README.md: no section 'Variables only the launchers read'"]
    prefixes = {t[:-1] for t in table if t.endswith("*")}
    seen = {}
    for path in files or deploy_files(root):
        for n, line in enumerate(open(path, encoding="utf-8", errors="replace").read().splitlines(), 1):
            for m in TOKEN.finditer(line):
                seen.setdefault(m.group(0), f"{os.path.relpath(path, root)}:{n}")
    checked = {}
    for var, where in sorted(seen.items()):
        if var in known:
            continue
        in_table = var in table or any(var.startswith(p) for p in prefixes) or (var.endswith("_") and var + "*" in table)
        if not in_table:
            findings.append(f"{where}: {var} is no program's option or old name, and deploy/README.md's launcher table does not list it")
            continue
        if var.endswith("_"):
            var = var + "X"
        if var not in checked:
            checked[var] = accepted(bins, var)
        if checked[var]:
            findings.append(f"{where}: {var}: refused as an unknown key by {', '.join(checked[var])}")
    return findings


def main():
    if len(sys.argv) < 5:
        print(__doc__)
        return 2
    root, bins = sys.argv[1], sys.argv[2:5]
    known = vocabulary(bins)
    if len(known) < 50:
        print(f"FAIL: the programs' --help-markdown gave only {len(known)} variables")
        return 1
    if "--selftest" in sys.argv:
        with tempfile.TemporaryDirectory() as d:
            planted = os.path.join(d, "docker-compose.planted.yml")
            with open(planted, "w") as f:
                f.write("services:\n  x:\n    environment:\n      SAC_LR: ${SAC_LR:-}\n      SAC_BOGUS_KNOB: ${SAC_BOGUS_KNOB:-}\n")
            got = audit(root, bins, known, [planted])
            if len(got) != 1 or "SAC_BOGUS_KNOB" not in got[0]:
                print("FAIL: the negative control (an undocumented SAC_BOGUS_KNOB) was not caught exactly:", got)
                return 1
            print(f"negative control caught: {got[0].split(': ', 1)[1]}")
    findings = audit(root, bins, known)
    for f in findings:
        print(f)
    if not findings:
        n = len(deploy_files(root))
        print(f"{n} deploy files: every SAC_* variable is an option, an old name or a documented launcher variable")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
