"""Quire's alert rules (``k8s/monitoring``) as Prometheus will load them.

``promtool`` checks the rules file and runs the unit tests beside it (each
alert fires on a series showing its symptom and stays silent on healthy
ones); the PrometheusRule carries exactly the same groups; every alert names
only catalogued metrics, has a severity, a summary and description that
name no job, tenant or document, and a runbook that exists.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from quire.metrics import CATALOGUE, metric_names

ROOT = Path(__file__).resolve().parent.parent
MONITORING = ROOT / "k8s" / "monitoring"
RULES_FILE = MONITORING / "quire-alerts.rules.yml"
PROMETHEUS_RULE = MONITORING / "prometheusrule.yaml"
RULE_TESTS = sorted((MONITORING / "tests").glob("*.yml"))
RUNBOOKS = ROOT / "docs" / "runbooks"
PROMTOOL = Path("/usr/bin/promtool")
SEVERITIES = {"critical", "warning", "info"}
# Labels an annotation may show: the catalogue's (low-cardinality by design)
# and the scrape target's address.
SHOWABLE_LABELS = {label for family in CATALOGUE for label in family.labels} | {"instance"}
METRIC = re.compile(r"\bquire_[A-Za-z0-9_]+")
Doc = dict[str, Any]


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    if not PROMTOOL.exists():
        pytest.fail(
            f"{PROMTOOL} is missing: the alert rules are tested with promtool; "
            "run `make system-deps` (Debian package prometheus) and run again"
        )
    return subprocess.run(
        [str(PROMTOOL), *args], capture_output=True, text=True, timeout=60, cwd=ROOT
    )


def _load(path: Path) -> Doc:
    loaded = yaml.safe_load(path.read_text())
    assert isinstance(loaded, dict), path
    return loaded


@pytest.fixture(scope="module")
def groups() -> list[Doc]:
    loaded = _load(RULES_FILE)["groups"]
    assert isinstance(loaded, list)
    return loaded


@pytest.fixture(scope="module")
def alerts(groups: list[Doc]) -> dict[str, Doc]:
    found: dict[str, Doc] = {}
    for group in groups:
        for rule in group["rules"]:
            assert "alert" in rule, f"{group['name']}: only alerts here, no recording rules"
            assert rule["alert"] not in found, f"{rule['alert']} is defined twice"
            found[rule["alert"]] = rule
    assert len(found) >= 6, "an alert per symptom"
    return found


@pytest.fixture(scope="module")
def rule_tests() -> list[tuple[Path, Doc]]:
    assert RULE_TESTS, f"no promtool unit tests in {MONITORING / 'tests'}"
    return [(path, _load(path)) for path in RULE_TESTS]


# -- promtool --------------------------------------------------------------------


def test_promtool_accepts_the_rules_file() -> None:
    done = _promtool("check", "rules", str(RULES_FILE))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_the_unit_tests_pass_against_the_rules_file(rule_tests: list[tuple[Path, Doc]]) -> None:
    for path, suite in rule_tests:
        files = [(path.parent / name).resolve() for name in suite["rule_files"]]
        assert files == [RULES_FILE], f"{path.name} tests the rules file itself"
    done = _promtool("test", "rules", *map(str, RULE_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAILED" not in done.stdout


def test_the_unit_tests_catch_a_broken_rule(tmp_path: Path, groups: list[Doc]) -> None:
    """A saturation threshold moved past the symptom fails its firing case."""
    broken = yaml.safe_load(yaml.safe_dump(groups))
    for group in broken:
        for rule in group["rules"]:
            if rule["alert"] == "QuireTempSpaceSaturated":
                assert "> 0.9" in rule["expr"]
                rule["expr"] = rule["expr"].replace("> 0.9", "> 0.99")
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": broken}))
    suite = _load(RULE_TESTS[0])
    firing = [
        case
        for case in suite["tests"]
        if any(
            t["alertname"] == "QuireTempSpaceSaturated" and t["exp_alerts"]
            for t in case["alert_rule_test"]
        )
    ]
    assert firing, "a case where temporary space saturates"
    suite.update(rule_files=["rules.yml"], tests=firing)
    (tmp_path / "test.yml").write_text(yaml.safe_dump(suite))
    done = _promtool("test", "rules", str(tmp_path / "test.yml"))
    assert done.returncode != 0, done.stdout
    assert "QuireTempSpaceSaturated" in done.stdout + done.stderr


def test_every_alert_fires_on_its_symptom_and_stays_silent_when_healthy(
    alerts: dict[str, Doc], rule_tests: list[tuple[Path, Doc]]
) -> None:
    fires: set[str] = set()
    silent: set[str] = set()
    for _, suite in rule_tests:
        for case in suite["tests"]:
            fed = {name for s in case["input_series"] for name in METRIC.findall(s["series"])}
            for check in case["alert_rule_test"]:
                name = check["alertname"]
                assert name in alerts, f"a test for an unknown alert {name}"
                if check.get("exp_alerts"):
                    fires.add(name)
                elif set(METRIC.findall(alerts[name]["expr"])) & fed:
                    # silent on series of the metrics it reads, not on nothing
                    silent.add(name)
    assert set(alerts) - fires == set(), "alerts no test sees firing"
    assert set(alerts) - silent == set(), "alerts no test sees silent on healthy series"


# -- one source of truth -------------------------------------------------------------


def test_the_prometheus_rule_holds_exactly_the_rules_file(groups: list[Doc]) -> None:
    resource = _load(PROMETHEUS_RULE)
    assert resource["apiVersion"] == "monitoring.coreos.com/v1"
    assert resource["kind"] == "PrometheusRule"
    assert set(resource["spec"]) == {"groups"}
    assert resource["spec"]["groups"] == groups, (
        "prometheusrule.yaml's spec.groups differ from quire-alerts.rules.yml's groups: "
        "edit both the same way"
    )


def test_the_monitoring_kustomization_renders_the_rule_and_the_dashboard(
    groups: list[Doc],
) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is not installed: k8s/monitoring is rendered with `kubectl kustomize`")
    done = subprocess.run(
        [kubectl, "kustomize", str(MONITORING)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    docs = {doc["kind"]: doc for doc in yaml.safe_load_all(done.stdout) if doc}
    assert set(docs) == {"PrometheusRule", "ConfigMap", "PodMonitor"}
    scraped = docs["PodMonitor"]["spec"]["podMetricsEndpoints"]
    assert [endpoint["port"] for endpoint in scraped] == ["metrics"]
    assert docs["PrometheusRule"]["metadata"]["namespace"] == "quire"
    assert docs["PrometheusRule"]["spec"]["groups"] == groups
    dashboard = docs["ConfigMap"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    json_text = (MONITORING / "grafana" / "quire-dashboard.json").read_text()
    assert dashboard["data"] == {"quire-dashboard.json": json_text}


# -- what each alert says ------------------------------------------------------------


def test_rule_expressions_name_only_catalogued_metrics(alerts: dict[str, Doc]) -> None:
    known = metric_names()
    for name, rule in alerts.items():
        used = set(METRIC.findall(rule["expr"]))
        assert used, f"{name} reads no Quire metric"
        assert used <= known, f"{name}: not in quire.metrics.CATALOGUE: {sorted(used - known)}"


def test_every_alert_has_a_severity_a_summary_a_description_and_a_runbook(
    alerts: dict[str, Doc],
) -> None:
    for name, rule in alerts.items():
        assert re.fullmatch(r"Quire[A-Z][A-Za-z]+", name), name
        assert rule["labels"]["severity"] in SEVERITIES, name
        annotations = rule["annotations"]
        assert set(annotations) == {"summary", "description", "runbook_url"}, name
        assert annotations["runbook_url"] == f"docs/runbooks/{name}.md", name
        runbook = ROOT / annotations["runbook_url"]
        assert runbook.is_file(), f"{name}: no runbook at {annotations['runbook_url']}"
        assert runbook.read_text().startswith(f"# {name}\n"), runbook
    pages = {path.stem for path in RUNBOOKS.glob("*.md")} - {"index"}
    assert pages == set(alerts), "a runbook per alert, and none for an alert that is gone"


def test_annotations_show_only_low_cardinality_labels(alerts: dict[str, Doc]) -> None:
    """No job id, tenant, file name or document text can reach a notification."""
    for name, rule in alerts.items():
        for key in ("summary", "description"):
            text = rule["annotations"][key]
            shown = set(re.findall(r"\$labels\.(\w+)", text))
            assert shown <= SHOWABLE_LABELS, f"{name} {key}: {sorted(shown - SHOWABLE_LABELS)}"
            templates = re.findall(r"{{(.*?)}}", text)
            for template in templates:
                assert re.fullmatch(
                    r"\s*(\$labels\.\w+|\$value(\s*\|\s*humanize\w*)?)\s*", template
                ), f"{name} {key}: only labels and the value, not {template!r}"


def test_runbooks_use_only_commands_the_cli_has(capsys: pytest.CaptureFixture[str]) -> None:
    """Each ``quire …`` a runbook tells an operator to type parses (its ``--help``)."""
    from quire.cli.main import main

    commands = set()
    for page in RUNBOOKS.glob("*.md"):
        for line in re.findall(r"(?:^ {4}|`)(quire [^`#\n]*)", page.read_text(), re.MULTILINE):
            words = [("x" if word.startswith("<") else word) for word in line.split()[1:]]
            commands.add(tuple(words))
    assert ("dlq", "list") in commands, "the runbooks show operators the dead-letter commands"
    for words in sorted(commands):
        with pytest.raises(SystemExit) as exited:
            main([*words, "--help"])
        assert exited.value.code == 0, f"`quire {' '.join(words)}` is not a command"
    capsys.readouterr()
