"""The alert rules, the Grafana dashboard and docs/operations.md name the metrics silos export,
as Prometheus scrapes them from Ray (``ray_`` first, ``_total`` on counters): an alert on a name
nothing exports never fires, and says nothing of it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from cluster.runtime.metrics import prometheus_series

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "timeshard-alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "timeshard.json"
OPERATIONS = ROOT / "docs" / "operations.md"

# PromQL's words that an expression here may use besides metric names (functions, aggregations,
# keywords) and the labels it groups by. Anything else is a name that must be exported or recorded.
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "by", "without", "on", "ignoring", "group_left", "group_right",
    "and", "or", "unless", "rate", "increase", "irate", "histogram_quantile", "vector", "scalar", "abs",
    "absent", "changes", "delta", "deriv", "clamp_min", "clamp_max", "time", "bool", "offset",
}
LABELS = {"le", "silo"}


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def _dashboard_exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dash["panels"] for target in panel["targets"]]


def _names(expr: str) -> set[str]:
    """Identifiers of ``expr`` outside strings, label matchers and ranges; balanced parentheses."""
    depth = 0
    for char in expr:
        depth += {"(": 1, ")": -1}.get(char, 0)
        assert depth >= 0, f"unbalanced ')' in {expr!r}"
    assert depth == 0, f"unclosed '(' in {expr!r}"
    bare = re.sub(r'"[^"]*"|\{[^}]*\}|\[[^\]]*\]', " ", expr)
    bare = re.sub(r"\b\d+(\.\d+)?\b", " ", bare)
    return set(re.findall(r"[A-Za-z_:][\w:]*", bare))


def _unknown(expr: str, recorded: set[str]) -> set[str]:
    exported = set(prometheus_series())
    return {n for n in _names(expr) if n not in exported | recorded | PROMQL_WORDS | LABELS}


def test_every_name_in_the_rules_is_exported_by_silos_or_recorded_by_a_rule() -> None:
    rules = _rules()
    recorded = {r["record"] for r in rules if "record" in r}
    for rule in rules:
        assert _unknown(rule["expr"], recorded) == set(), (
            f"{rule.get('alert') or rule.get('record')}: names no silo exports (Ray adds 'ray_', counters end in '_total')")


def test_every_name_in_the_dashboard_is_exported_or_recorded() -> None:
    recorded = {r["record"] for r in _rules() if "record" in r}
    for expr in _dashboard_exprs():
        assert _unknown(expr, recorded) == set(), expr


def test_the_alerts_cover_what_needs_an_operator() -> None:
    alerted = set().union(*(_names(r["expr"]) for r in _rules() if "alert" in r))
    recorded = {r["record"]: _names(r["expr"]) for r in _rules() if "record" in r}
    for name in list(alerted):
        alerted |= recorded.get(name, set())
    needed = {"ray_timeshard_heartbeats_total", "timeshard:silos_target",  # silos below target
              "ray_timeshard_lateness_seconds_bucket", "ray_timeshard_lease_lapses_total",
              "ray_timeshard_shards_quarantined", "ray_timeshard_jobs_parked",
              "ray_timeshard_records_unreadable_total", "ray_timeshard_records_lost_total",
              "ray_timeshard_shards_damaged_total", "ray_timeshard_clock_skew_exceeded",
              "ray_timeshard_store_errors_total", "ray_timeshard_append_seconds_bucket"}
    assert needed <= alerted, f"no alert on {sorted(needed - alerted)}"


def _family(series: str) -> str:
    return re.sub(r"_(total|bucket|count|sum)$", "", series)


def test_the_dashboard_shows_every_metric_silos_export() -> None:
    shown = {_family(n) for expr in _dashboard_exprs() for n in _names(expr)}
    missing = {_family(s) for s in prometheus_series()} - shown
    assert missing == set(), f"deploy/grafana/timeshard.json: no panel shows {sorted(missing)}"


def test_the_operations_page_lists_every_exported_series_and_no_other() -> None:
    section = OPERATIONS.read_text().split("## Metrics and alerts", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`(ray_timeshard_\w+)`", section))
    assert listed == set(prometheus_series()), (
        f"docs/operations.md: not listed {sorted(set(prometheus_series()) - listed)}, "
        f"not exported {sorted(listed - set(prometheus_series()))}")

