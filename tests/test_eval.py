"""The fidelity harness (``make eval``): no change on the committed renderer;
a changed renderer constant reported as exactly the pages that moved; a
misprinted number reported as a changed total that no longer matches its
source."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.eval.main import MANIFEST, run
from quire.assembler import render

ROOT = Path(__file__).resolve().parent.parent


def _pages_text(source: Path, document: str, profile: str, folder: Path) -> list[str]:
    """Each page's text, rendered and extracted here, not by the harness."""
    pdf = folder / f"{document}-{profile}-{render.WRAP}.pdf"
    pages = render.render_structured(str(source), str(pdf), profile, document)
    text = subprocess.run(
        ["pdftotext", "-raw", "-enc", "UTF-8", str(pdf), "-"], capture_output=True, check=True
    ).stdout
    return [hashlib.sha256(page).hexdigest() for page in text.split(b"\f")[:pages]]


def _renderings() -> list[tuple[str, str, Path]]:
    manifest = json.loads(MANIFEST.read_text())
    return [
        (doc["id"], profile, MANIFEST.parent / doc["source"])
        for doc in manifest["documents"]
        for profile in manifest["profiles"]
    ]


def test_the_committed_renderer_reports_no_change() -> None:
    figures, changes = run()
    assert changes == []
    assert len(figures) == len(_renderings()) == 10
    for figure in figures.values():
        assert figure["totals"] == figure["source_totals"]


def test_make_eval_exits_zero_and_writes_its_report(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.eval.main", "--report", str(report)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no change" in done.stdout
    assert json.loads(report.read_text())["changed"] == []


def test_a_changed_wrap_width_is_reported_as_exactly_the_pages_that_moved(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    before = {(d, p): _pages_text(s, d, p, tmp_path) for d, p, s in _renderings()}
    monkeypatch.setattr(render, "WRAP", 60)
    after = {(d, p): _pages_text(s, d, p, tmp_path) for d, p, s in _renderings()}
    moved = set()
    for key, pages in after.items():
        was = before[key]
        moved |= {
            (*key, i + 1) for i in range(max(len(was), len(pages))) if _at(was, i) != _at(pages, i)
        }
    assert moved and ("invoice-short", "simple", 1) not in moved

    _figures, changes = run()
    reported = {(c.document, c.profile, c.page) for c in changes if c.page is not None}
    assert reported == moved
    assert not [c for c in changes if c.what.startswith("total")], "wrapping moves no total"
    images = [c for c in changes if c.what == "image changed"]
    assert images and all(" pt from the top" in c.where for c in images)


def _at(pages: list[str], index: int) -> str | None:
    return pages[index] if index < len(pages) else None


def test_a_misprinted_number_changes_a_total_and_parts_it_from_the_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    printed = render._normalise  # noqa: SLF001 - the renderer's own formatting, wrapped

    def cut(value: Any) -> str:  # a renderer that prints at most five characters
        return printed(value)[:5]

    monkeypatch.setattr(render, "_normalise", cut)
    _figures, changes = run()
    lines = [c.line() for c in changes]
    assert "invoice-short/simple: total invoice.total: 117.50 -> 117.5" in lines
    assert "invoice-short/strict: rendered totals disagree with the source's" in lines
    assert "tax-record/simple: rendered totals disagree with the source's" not in lines


def test_the_rasterizer_draws_with_the_pinned_fonts_only() -> None:
    """Chromium's packages bring Liberation fonts: pdftoppm must not start
    drawing Helvetica with them, or every fingerprint would move."""
    from bench.eval.measure import FONTS

    env = {"FONTCONFIG_FILE": str(FONTS), "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}
    files = subprocess.run(
        ["fc-list", "--format", "%{file}\\n"], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert files and all(f.startswith("/usr/share/fonts/truetype/dejavu/") for f in files)
    helvetica = subprocess.run(
        ["fc-match", "--format", "%{family}", "Helvetica"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert helvetica.startswith("DejaVu Sans"), helvetica
