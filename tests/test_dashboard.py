"""The Grafana dashboard (``k8s/monitoring/grafana``) as Grafana will provision it.

Valid dashboard JSON (panels with targets, unique ids, a grid without
overlaps), every query on the Prometheus datasource variable, naming only
catalogued metrics with PromQL fit for their type (``rate``/``increase`` of
counters, ``histogram_quantile`` over buckets, gauges raw), accepted by
promtool's parser, and every catalogue family on some panel.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from quire.metrics import CATALOGUE, metric_names

ROOT = Path(__file__).resolve().parent.parent
GRAFANA = ROOT / "k8s" / "monitoring" / "grafana"
DASHBOARD = GRAFANA / "quire-dashboard.json"
PROMTOOL = Path("/usr/bin/promtool")
METRIC = re.compile(r"\bquire_[A-Za-z0-9_]+")
GRID_COLUMNS = 24
# What Grafana substitutes before a query reaches Prometheus.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$stage": ".*"}
Doc = dict[str, Any]


@pytest.fixture(scope="module")
def dashboard() -> Doc:
    loaded = json.loads(DASHBOARD.read_text())
    assert isinstance(loaded, dict)
    return loaded


@pytest.fixture(scope="module")
def panels(dashboard: Doc) -> list[Doc]:
    """The panels that draw something (rows only group them)."""
    return [panel for panel in dashboard["panels"] if panel["type"] != "row"]


def _queries(dashboard: Doc) -> list[str]:
    """Every PromQL expression: panel targets and query variables."""
    found = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            found.append(variable["definition"])
            found.append(variable["query"]["query"])
    return found


def test_it_is_a_provisionable_dashboard(dashboard: Doc) -> None:
    assert dashboard.get("id") is None, "provisioned dashboards carry no database id"
    assert re.fullmatch(r"[a-z0-9-]{1,40}", dashboard["uid"])
    assert dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    assert dashboard["panels"]


def test_panels_have_unique_ids_targets_and_a_place_on_the_grid(
    dashboard: Doc, panels: list[Doc]
) -> None:
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert all(isinstance(i, int) for i in ids)
    assert len(ids) == len(set(ids)), "panel ids are unique"
    cells: dict[tuple[int, int], int] = {}
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert set(grid) == {"h", "w", "x", "y"}, panel["id"]
        assert all(isinstance(grid[k], int) and grid[k] >= 0 for k in grid), panel["id"]
        assert grid["w"] > 0 and grid["h"] > 0 and grid["x"] + grid["w"] <= GRID_COLUMNS
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                other = cells.setdefault((x, y), panel["id"])
                assert other == panel["id"], f"panels {other} and {panel['id']} overlap"
    for panel in panels:
        assert panel["title"], panel["id"]
        targets = panel["targets"]
        assert targets, f"panel {panel['id']} has no query"
        ref_ids = [target["refId"] for target in targets]
        assert len(ref_ids) == len(set(ref_ids)), panel["id"]
        assert all(target["expr"].strip() for target in targets), panel["id"]


def test_every_query_uses_the_prometheus_datasource_variable(
    dashboard: Doc, panels: list[Doc]
) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    chooser = [v for v in variables.values() if v["type"] == "datasource"]
    assert len(chooser) == 1 and chooser[0]["query"] == "prometheus"
    wanted = {"type": "prometheus", "uid": f"${{{chooser[0]['name']}}}"}
    for panel in panels:
        assert panel["datasource"] == wanted, panel["id"]
        for target in panel["targets"]:
            assert target.get("datasource", wanted) == wanted, panel["id"]
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == wanted, variable["name"]
    for expr in _queries(dashboard):
        for used in re.findall(r"\$(\w+)", expr):
            assert used.startswith("__") or used in variables, f"undefined ${used} in {expr}"


def test_queries_name_only_catalogued_metrics(dashboard: Doc) -> None:
    known = metric_names()
    for expr in _queries(dashboard):
        used = set(METRIC.findall(expr))
        assert used, f"names no Quire metric: {expr}"
        assert used <= known, f"not in quire.metrics.CATALOGUE: {sorted(used - known)}"


def test_every_catalogue_family_has_a_panel(panels: list[Doc]) -> None:
    shown = {
        name for panel in panels for t in panel["targets"] for name in METRIC.findall(t["expr"])
    }
    missing = []
    for family in CATALOGUE:
        series = f"{family.name}_bucket" if family.kind == "histogram" else family.name
        if series not in shown:
            missing.append(family.name)
    assert not missing, f"families with no panel: {missing}"


def test_each_metric_is_queried_as_its_type_allows(dashboard: Doc) -> None:
    kinds = {family.name: family.kind for family in CATALOGUE}
    selector = r"(\{[^}]*\})?"
    for expr in _queries(dashboard):
        if expr.startswith("label_values("):
            continue
        for name in set(METRIC.findall(expr)):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            kind = kinds[base if base in kinds else name]
            occurrences = len(re.findall(rf"\b{name}\b", expr))
            if kind == "counter":
                pattern = rf"\b(rate|increase)\(\s*{name}{selector}\[[^\]]+\]\s*\)"
                assert len(re.findall(pattern, expr)) == occurrences, f"counter raw: {expr}"
            elif kind == "histogram":
                assert name.endswith("_bucket"), f"a histogram by its buckets: {expr}"
                assert expr.startswith("histogram_quantile("), expr
                pattern = rf"\brate\(\s*{name}{selector}\[[^\]]+\]\s*\)"
                assert len(re.findall(pattern, expr)) == occurrences, expr
                assert re.search(r"\bby \([^)]*\ble\b", expr), f"keeps le: {expr}"
            else:
                assert not re.search(rf"\b{name}{selector}\[", expr), f"gauge as a range: {expr}"


def test_promql_parses(dashboard: Doc, tmp_path: Path) -> None:
    """Each query, with Grafana's variables filled in, as promtool reads a rule."""
    if not PROMTOOL.exists():
        pytest.fail(
            f"{PROMTOOL} is missing: the dashboard's queries are parsed with promtool; "
            "run `make system-deps` (Debian package prometheus) and run again"
        )
    rules = []
    for number, expr in enumerate(_queries(dashboard)):
        if expr.startswith("label_values("):
            continue  # a Grafana function, not PromQL
        for variable, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        rules.append({"record": f"dashboard:query_{number}", "expr": expr})
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run(
        [str(PROMTOOL), "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_provisioning_files_point_grafana_at_the_dashboard_and_prometheus() -> None:
    provider = yaml.safe_load((GRAFANA / "dashboards.yaml").read_text())
    assert provider["apiVersion"] == 1
    [quire] = provider["providers"]
    assert quire["type"] == "file" and quire["options"]["path"].startswith("/")
    sources = yaml.safe_load((GRAFANA / "datasource.example.yaml").read_text())
    assert sources["apiVersion"] == 1
    assert [s["type"] for s in sources["datasources"]] == ["prometheus"]
    assert all(
        "secureJsonData" not in s and "basicAuthPassword" not in s for s in sources["datasources"]
    )
