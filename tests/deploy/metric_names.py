"""Metric names in PromQL (alert rules, dashboard queries) versus what the service exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry

from tests.deploy.promtool import DEPLOY

DASHBOARDS = sorted((DEPLOY / "grafana" / "dashboards").glob("*.json"))
_NAME = re.compile(r"\b(dpstream_[a-zA-Z0-9_]+)")
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "info": ("_info",)}


def names_in(expr: str) -> set[str]:
    return set(_NAME.findall(expr))


def alert_exprs() -> list[str]:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    return [r["expr"] for g in rules["groups"] for r in g["rules"]]


def dashboard_exprs(path: Path) -> list[str]:
    dash = json.loads(path.read_text())
    out = []

    def walk(panels: list[dict]) -> None:
        for p in panels:
            out.extend(t["expr"] for t in p.get("targets", []) if "expr" in t)
            walk(p.get("panels", []))

    walk(dash["panels"])
    for var in dash.get("templating", {}).get("list", []):
        q = var.get("query")
        out.append(q["query"] if isinstance(q, dict) else str(q or ""))
    return out


def declared(registry: CollectorRegistry) -> set[str]:
    """Every sample name the registry's families can export (counter ``_total``, histogram ``_bucket``…)."""
    names = set()
    for fam in registry.collect():
        names.add(fam.name)
        names.update(fam.name + s for s in _SUFFIXES.get(fam.type, ()))
        names.update(s.name for s in fam.samples)
    return names
