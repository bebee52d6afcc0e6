"""Where the suite's time goes, as a pytest plugin (``tests/conftest.py`` loads it).

At the end of a run it prints the time spent in each tier (``quire.testing.tiers``)
the stacks the tests started, and the slowest tests, each test's setup, call and teardown together (a
module's private stack is started in its first test's setup). With
pytest-xdist the figures come from the workers' reports, so they add up the
work of every worker: a tier's total is machine time, not wall time.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from quire.testing.tiers import STACK_START, TIERS, tier_of

__all__ = ["SLOWEST", "TimingReport"]

SLOWEST = 15


class TimingReport:
    """Adds up each test's phases as their reports arrive; prints at the end."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.tier: dict[str, str] = {}
        self.stack_starts: list[float] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration
        if report.when == "teardown":  # each phase's report carries the test's properties so far
            starts = [float(v) for name, v in report.user_properties if name == STACK_START]  # type: ignore[arg-type]
            self.stack_starts += starts
        if report.when == "call" or report.nodeid not in self.tier:
            self.tier[report.nodeid] = tier_of(report.keywords)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.seconds:
            return
        write = terminalreporter.write_line
        terminalreporter.section("time per tier (setup + call + teardown, all workers)")
        per_tier: dict[str, list[float]] = defaultdict(list)
        for nodeid, seconds in self.seconds.items():
            per_tier[self.tier.get(nodeid, "unit")].append(seconds)
        total = sum(self.seconds.values())
        for tier in TIERS:
            spent = per_tier.get(tier, [])
            share = sum(spent) / total if total else 0.0
            write(f"{tier:>7}: {len(spent):5d} tests {sum(spent):8.1f} s  {share:6.1%}")
        write(f"{'all':>7}: {len(self.seconds):5d} tests {total:8.1f} s")
        write(
            f"stacks started: {len(self.stack_starts)}, "
            f"{sum(self.stack_starts):.1f} s until healthy in all"
        )
        terminalreporter.section(f"the {SLOWEST} slowest tests (setup + call + teardown)")
        slowest = sorted(self.seconds.items(), key=lambda pair: pair[1], reverse=True)
        for nodeid, seconds in slowest[:SLOWEST]:
            write(f"{seconds:7.1f} s  {self.tier.get(nodeid, 'unit'):>6}  {nodeid}")


def pytest_configure(config: pytest.Config) -> None:
    # In a pytest-xdist worker, the controller prints what the workers report.
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(TimingReport(), "quire-timings")
