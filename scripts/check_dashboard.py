#!/usr/bin/env python3
"""Checks the Grafana dashboard and the Prometheus alert rules against the metric names
Crucible exports (the table in docs/OPERATIONS.md, "Metrics"). Standard library only.

    check_dashboard.py [--contract docs/METRICS.md] [--emit-rules FILE] DASHBOARD [RULES...]

The dashboard: it parses; every panel id is unique; every panel but a row has a Prometheus
datasource (the dashboard's `datasource` variable) and at least one target, each with an
expression and a refId unique within its panel. Every `crucible_*` name in the dashboard's
expressions and in the rule files is in the table (a histogram's `_bucket`, `_sum` and `_count`
count as the histogram). --emit-rules writes each panel expression as a recording rule, the
Grafana variables replaced, for `promtool check rules` to parse (scripts/check_deploy.sh).
"""
import argparse
import json
import re
import sys

METRIC = re.compile(r"\bcrucible_[a-z0-9_]+")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# Grafana's variables, as a fixed value PromQL accepts.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}


def contract_names(path):
    """{name: type} from the metric tables of docs/METRICS.md: rows `| `name...` | type | ...`."""
    names = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"\|\s*`(crucible_[a-z0-9_]+)[^`]*`\s*\|\s*(\w+)", line)
            if m:
                names[m.group(1)] = m.group(2)
    if not names:
        sys.exit(f"{path}: no table rows of `crucible_*` metrics")
    return names


def unknown_metrics(text, names):
    """The crucible_* names in `text` that are not in the contract."""
    unknown = set()
    for name in METRIC.findall(text):
        if name in names:
            continue
        base = next((name[: -len(s)] for s in HISTOGRAM_SUFFIXES if name.endswith(s)), None)
        if base is not None and names.get(base) == "histogram":
            continue
        unknown.add(name)
    return unknown


def panels_of(dashboard):
    """Every panel, those inside collapsed rows included."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def check_dashboard(dashboard, names):
    """The dashboard's problems, one string each; and its (panel id, refId, expr) triples."""
    problems, exprs, ids = [], [], set()
    variables = {v.get("name") for v in dashboard.get("templating", {}).get("list", [])}
    if not dashboard.get("uid") or not dashboard.get("title"):
        problems.append("the dashboard needs a uid and a title")
    for panel in panels_of(dashboard):
        pid = panel.get("id")
        where = f"panel {pid} ({panel.get('title', '?')})"
        if not isinstance(pid, int):
            problems.append(f"{where}: no integer id")
        elif pid in ids:
            problems.append(f"{where}: id used twice")
        ids.add(pid)
        if "gridPos" not in panel:
            problems.append(f"{where}: no gridPos")
        if panel.get("type") == "row":
            continue
        ds = panel.get("datasource") or {}
        if ds.get("type") != "prometheus":
            problems.append(f"{where}: datasource is not Prometheus")
        uid = ds.get("uid", "")
        if uid.startswith("${") and uid[2:-1] not in variables:
            problems.append(f"{where}: datasource {uid} is no dashboard variable")
        targets = panel.get("targets") or []
        if not targets:
            problems.append(f"{where}: no targets")
        refs = set()
        for target in targets:
            expr, ref = (target.get("expr") or "").strip(), target.get("refId")
            if not expr:
                problems.append(f"{where}: a target without an expression")
                continue
            if not ref or ref in refs:
                problems.append(f"{where}: refId {ref!r} missing or used twice")
            refs.add(ref)
            for name in sorted(unknown_metrics(expr, names)):
                problems.append(f"{where}: {name} is not an exported metric")
            exprs.append((pid, ref, expr))
    return problems, exprs


def recording_rules(exprs):
    """A rule file with each expression as a recording rule (Grafana variables replaced)."""
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for pid, ref, expr in exprs:
        for var, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(var, value)
        lines.append(f"      - record: dashboard:panel{pid}_{ref}")
        lines.append(f"        expr: {json.dumps(expr)}")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contract", default="docs/METRICS.md")
    parser.add_argument("--emit-rules")
    parser.add_argument("dashboard")
    parser.add_argument("rules", nargs="*")
    args = parser.parse_args()
    names = contract_names(args.contract)
    try:
        with open(args.dashboard, encoding="utf-8") as f:
            dashboard = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"{args.dashboard}: {e}")
    problems, exprs = check_dashboard(dashboard, names)
    problems = [f"{args.dashboard}: {p}" for p in problems]
    for path in args.rules:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        problems += [f"{path}: {n} is not an exported metric" for n in sorted(unknown_metrics(text, names))]
    if args.emit_rules:
        with open(args.emit_rules, "w", encoding="utf-8") as f:
            f.write(recording_rules(exprs))
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"dashboard: {len(exprs)} expressions in {sum(1 for _ in panels_of(dashboard))} panels, "
          f"every metric among the {len(names)} exported")


if __name__ == "__main__":
    main()
