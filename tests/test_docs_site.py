"""The documentation site: its reference pages are what the code says now,
and it builds in strict mode (no broken link, no page outside the nav)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest

from quire import metrics

ROOT = Path(__file__).resolve().parents[1]


def _docgen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docgen", ROOT / "tools" / "docgen.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_reference_page_is_what_the_code_says_now() -> None:
    assert _docgen().stale() == [], "run `make docs` and commit docs/reference"


def test_a_metric_added_without_regenerating_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    added = replace(metrics.CATALOGUE[0], name="quire_made_up_total", help="A new family.")
    monkeypatch.setattr(metrics, "CATALOGUE", (*metrics.CATALOGUE, added))
    assert _docgen().stale() == ["metrics.md"]


def test_a_setting_added_without_regenerating_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import create_model

    from quire.settings import WatchSettings

    grown = create_model("WatchSettings", __base__=WatchSettings, made_up_seconds=(float, 1.0))
    monkeypatch.setattr(WatchSettings, "model_fields", grown.model_fields)
    assert _docgen().stale() == ["settings.md"]


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [Path(sys.executable).with_name("mkdocs"), "build", "--strict", "-d", tmp_path / "site"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    for page in (
        "index.html",
        "reference/metrics/index.html",
        "reference/grpc/index.html",
        "reference/settings/index.html",
    ):
        assert (tmp_path / "site" / page).is_file(), page
