#!/usr/bin/env python3
"""Checks a Grafana dashboard (deploy/grafana/dashboards/sacfleet.json) against a live
Prometheus: every query of every panel must return at least one finite sample. Run by
tests/test_monitoring.sh while Prometheus scrapes a short embedded run.

    dashboard_check.py DASHBOARD.json PROMETHEUS_URL [--stall S] [--expect-empty QUERY]...

First the dashboard's shape: unique panel ids and uid, a Prometheus data source on every
panel and target (the ${datasource} variable, defined), a PromQL expression and a
distinct refId on every target. Then the queries, with Grafana's variables replaced by
fixed intervals ($__rate_interval 10s: four 1-s scrapes and then some), polled until all
answer; it fails when none has started answering for S seconds (default 30), naming each
query that returns nothing (or only NaN). --expect-empty QUERY: a query that must return
nothing at the end (a negative control: a misspelled metric name is caught).
Exit 0 pass, 1 fail.
"""
import argparse
import json
import math
import sys
import time
import urllib.parse
import urllib.request

VARS = {"$__rate_interval": "10s", "$__interval": "2s", "$__range": "1m"}


def panels_of(dash):
    for p in dash.get("panels", []):
        yield p
        yield from p.get("panels", [])  # a collapsed row keeps its panels inside


def shape_errors(dash):
    errs, ids = [], set()
    if not dash.get("uid") or not dash.get("title"):
        errs.append("the dashboard has no uid or title")
    var = [v for v in dash.get("templating", {}).get("list", []) if v.get("type") == "datasource"]
    if not var or var[0].get("query") != "prometheus" or var[0].get("name") != "datasource":
        errs.append("no Prometheus data source variable named datasource")
    for p in panels_of(dash):
        t = p.get("title", "?")
        if p.get("id") in ids:
            errs.append(f"panel id {p.get('id')} used twice")
        ids.add(p.get("id"))
        if "gridPos" not in p:
            errs.append(f"panel {t!r} has no gridPos")
        if p.get("type") == "row":
            continue
        refs = [x.get("refId") for x in p.get("targets", [])]
        if not refs or len(set(refs)) != len(refs):
            errs.append(f"panel {t!r}: no targets, or refIds repeated")
        for x in [p] + p.get("targets", []):
            ds = x.get("datasource", {})
            if ds.get("type") != "prometheus" or ds.get("uid") != "${datasource}":
                errs.append(f"panel {t!r}: data source {ds} is not the dashboard's Prometheus")
        for x in p.get("targets", []):
            if not x.get("expr", "").strip():
                errs.append(f"panel {t!r} target {x.get('refId')}: no expression")
    return errs


def queries(dash):
    out = []
    for p in panels_of(dash):
        for x in p.get("targets", []):
            if x.get("expr"):
                q = x["expr"]
                for k, v in VARS.items():
                    q = q.replace(k, v)
                out.append((p.get("title", "?"), q))
    return out


def answers(url, q):
    """True when the instant query returns at least one finite sample; the error text when
    Prometheus refuses the query."""
    u = f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    try:
        with urllib.request.urlopen(u, timeout=5) as r:
            body = json.load(r)
    except urllib.error.HTTPError as e:  # 400: the query does not parse or evaluate
        return json.load(e).get("error", str(e))
    except OSError as e:
        return f"no answer from Prometheus: {e}"
    res = body.get("data", {}).get("result", [])
    vals = [float(s["value"][1]) for s in res] if isinstance(res, list) else [float(res[1])]
    return any(not math.isnan(v) for v in vals)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dashboard")
    ap.add_argument("url")
    ap.add_argument("--stall", type=float, default=30)
    ap.add_argument("--expect-empty", action="append", default=[])
    a = ap.parse_args()
    with open(a.dashboard) as f:
        dash = json.load(f)
    errs = shape_errors(dash)
    for e in errs:
        print(f"FAIL shape: {e}")
    qs = queries(dash)
    print(f"{len(qs)} queries in {sum(1 for p in panels_of(dash) if p.get('type') != 'row')} panels")
    pending, broken, last_move = dict.fromkeys(qs), {}, time.monotonic()
    while pending and time.monotonic() - last_move < a.stall:
        for title, q in list(pending):
            r = answers(a.url, q)
            if r is True:
                print(f"ok   [{title}] {q}")
                del pending[(title, q)]
                last_move = time.monotonic()
            elif isinstance(r, str) and not r.startswith("no answer"):  # a query error does not heal
                broken[(title, q)] = r
                del pending[(title, q)]
        if pending:
            time.sleep(1)
    for (title, q), why in broken.items():
        print(f"FAIL [{title}] Prometheus refuses: {q} ({why})")
    for title, q in pending:
        print(f"FAIL [{title}] returns no data for {a.stall:.0f} s: {q}")
    bad_controls = [q for q in a.expect_empty if answers(a.url, q) is True]
    for q in bad_controls:
        print(f"FAIL control: {q} returned data, so a wrong name would pass unseen")
    for q in a.expect_empty:
        if q not in bad_controls:
            print(f"ok   control: {q} returns nothing, as it must")
    ok = not errs and not pending and not broken and not bad_controls
    n_ok = len(qs) - len(pending) - len(broken)
    print(f"{'PASS' if ok else 'FAIL'}: {n_ok} of {len(qs)} queries return data")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
