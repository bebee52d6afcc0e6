"""The source slowdown benchmark (bench/sources_bench.py, ``make
bench-sources``) runs its tiny profile end to end on a real stack and a real
local source server. Only what cannot be noise is asserted (its JSON
summary, not its text): every section printed, tax's breaker opened during
the slowdown, the orders-only jobs all completed, every tax job ended as a
slow source lets it, and calls to the slow system stayed bounded. Timing
figures are printed by the bench, never asserted here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = (
    "1. jobs by phase and class",
    "2. tax's breaker",
    "3. calls to tax",
    "4. validate queue, interactive",
    "5. backlog: the oldest job not yet ended",
)
TRIES_PER_DELIVERY = 3
SAMPLING_SLACK = 1.5
"""The breaker's state is sampled every second."""
CALLS_SLACK = 5
"""Calls of tax jobs that arrived before the slowdown, and a trial or two."""


def test_tiny_sources_bench_shows_an_open_breaker_and_bounded_calls(tmp_path: Path) -> None:
    summary_path = tmp_path / "sources.json"
    env = {
        **os.environ,
        "BENCH_SOURCES_PROFILE": "tiny",
        "BENCH_SOURCES_JSON": str(summary_path),
    }
    for knob in (  # the profile's own values, whatever the caller's shell says
        "BENCH_SOURCES_RATE",
        "BENCH_SOURCES_BASELINE",
        "BENCH_SOURCES_SLOW",
        "BENCH_SOURCES_RECOVERY",
        "BENCH_SOURCES_BUDGET",
        "BENCH_SOURCES_TIMEOUT",
        "BENCH_SOURCES_SLOW_DELAY",
        "BENCH_SOURCES_KEEP",
        "QUIRE_SOURCE_BREAKER_FAILURES",
        "QUIRE_SOURCE_BREAKER_OPEN_SECONDS",
        "QUIRE_JOB_BUDGET_RESERVE_SECONDS",
    ):
        env.pop(knob, None)
    done = subprocess.run(
        [sys.executable, "bench/sources_bench.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for section in SECTIONS:
        assert section in done.stdout, section
    summary = json.loads(summary_path.read_text())
    slow = summary["settings"]["slowdown"]

    opened = summary["breaker"]["opened_after_slowdown_start"]
    assert opened is not None, "tax's breaker never opened"
    assert 0 <= opened <= slow + SAMPLING_SLACK, f"opened {opened}s after the slowdown began"

    jobs = summary["jobs"]
    orders_only = [j for j in jobs if j["cls"] == "orders-only"]
    tax = [j for j in jobs if j["cls"] == "tax"]
    assert orders_only and tax
    assert {j["phase"] for j in jobs} == {"baseline", "slowdown", "recovery"}
    not_completed = [j for j in orders_only if j["state"] != "COMPLETED"]
    assert not not_completed, not_completed
    for job in tax:
        assert job["state"] == "COMPLETED" or (
            job["state"] == "FAILED"
            and job["reason"] in ("SOURCE_UNAVAILABLE", "DEADLINE_EXCEEDED")
        ), job

    calls = summary["calls"]
    tax_in_slowdown = sum(1 for j in tax if j["phase"] == "slowdown")
    assert calls["tax_jobs_in_slowdown"] == tax_in_slowdown > 0
    assert calls["tax_calls_in_slowdown"] <= tax_in_slowdown * TRIES_PER_DELIVERY + CALLS_SLACK, (
        calls["tax_calls_in_slowdown"],
        tax_in_slowdown,
    )
