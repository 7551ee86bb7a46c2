"""deploy/grafana/onnx-reducer.json (issue 29): a Grafana dashboard that loads (its structure as
Grafana's dashboard model has it: panels with ids, grid positions, a Prometheus datasource through
the ``datasource`` variable, targets with refIds and queries), and every metric its queries name is
one that a running app's ``/metrics`` serves after a job ran (the embedded service over HTTP)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.service.conftest import finished_job
from tests.service.web_harness import Service

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "onnx-reducer.json"
PANEL_TYPES = {"timeseries", "stat", "gauge", "bargauge", "table", "text"}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SAMPLE_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
METRIC = re.compile(r"\bonnx_reducer_[a-z0-9_]+\b")
# what the issue asks the dashboard to show, as the metrics behind it
REQUIRED = {
    "queue depth per queue": "onnx_reducer_queue_depth",
    "checks per second": "onnx_reducer_checks_total",
    "check time percentiles": "onnx_reducer_check_seconds",
    "workers alive": "onnx_reducer_workers",
    "jobs by outcome": "onnx_reducer_jobs",
}


def _dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return data


def _queries(dashboard: dict[str, Any]) -> list[str]:
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def test_the_dashboard_has_grafanas_shape() -> None:
    dashboard = _dashboard()
    assert isinstance(dashboard["title"], str) and dashboard["title"]
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", dashboard["uid"])
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels) >= 5
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        assert panel["type"] in PANEL_TYPES and panel["title"]
        grid = panel["gridPos"]
        assert all(isinstance(grid[k], int) for k in ("h", "w", "x", "y"))
        assert grid["w"] >= 1 and grid["h"] >= 1 and grid["x"] + grid["w"] <= 24  # Grafana's 24 columns
        covered = {
            (x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not covered & cells, f"panel {panel['title']!r} overlaps another"
        cells |= covered
        assert panel["datasource"] == DATASOURCE
        refs = [target["refId"] for target in panel["targets"]]
        assert refs and len(set(refs)) == len(refs)
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE and target["expr"].strip()
            assert target["expr"].count("(") == target["expr"].count(")")
    named = {m for query in _queries(dashboard) for m in METRIC.findall(query)}
    for what, metric in REQUIRED.items():
        assert any(name.startswith(metric) for name in named), f"no panel shows {what} ({metric})"


def test_every_metric_a_query_names_is_served(service: Service) -> None:
    finished_job(service)  # checks ran: the check time percentiles have samples
    scrape = httpx.get(service.url + "/metrics", timeout=30)
    scrape.raise_for_status()
    served = set()
    for family in text_string_to_metric_families(scrape.text):  # a family with no sample now is served too
        served |= {family.name, *(sample.name for sample in family.samples)}
        served |= {family.name + suffix for suffix in SAMPLE_SUFFIXES.get(family.type, ())}
    named = {m for query in _queries(_dashboard()) for m in METRIC.findall(query)}
    assert named and named <= served, f"not served: {sorted(named - served)}"
    quantiles = {
        sample.labels["quantile"]
        for family in text_string_to_metric_families(scrape.text)
        for sample in family.samples
        if sample.name == "onnx_reducer_check_seconds"
    }
    assert quantiles == {"0.5", "0.9", "0.99"}
