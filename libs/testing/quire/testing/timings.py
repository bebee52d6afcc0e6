"""Where the suite's time goes, as a pytest plugin (``tests/conftest.py`` loads it).

At the end of a run it prints, for each tier (``quire.testing.tiers``), the
time its tests took (setup, call and teardown together: a module's private
stack is started in its first test's setup) and the CPU they used; the
stacks the tests started; and the slowest tests. A test's CPU is its worker
process's and that of the processes it reaped meanwhile, so a private
stack's services count for the test that stopped them, and the suite's
shared stack for none. With pytest-xdist the figures come from the workers'
reports and add up every worker's: a tier's total is machine time, not wall
time.
"""

from __future__ import annotations

import json
import resource
from collections import defaultdict
from collections.abc import Generator
from typing import Any

import pytest

from quire.testing.tiers import STACK_START, TIERS, tier_of

__all__ = ["CPU", "SLOWEST", "TimingReport"]

SLOWEST = 15
CPU = "cpu_seconds"
"""A test report's user property: the CPU its test used, from setup to teardown."""
_CPU_AT_SETUP = pytest.StashKey[float]()


def _cpu_seconds() -> float:
    """This process's CPU, its reaped children's, and that of the services its
    stacks forked (reaped by their zygote, ``quire.stack.forked``)."""
    from quire.stack.forked import reaped_cpu_seconds

    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime + reaped_cpu_seconds()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    item.stash[_CPU_AT_SETUP] = _cpu_seconds()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    try:
        return (yield)
    finally:  # before the teardown report, which carries the properties
        if _CPU_AT_SETUP in item.stash:
            item.user_properties.append((CPU, _cpu_seconds() - item.stash[_CPU_AT_SETUP]))


class TimingReport:
    """Adds up each test's phases as their reports arrive; prints at the end."""

    def __init__(self, timeline: str = "") -> None:
        """``timeline``: a file to write every test phase to, one JSON line
        each (worker, test, phase, start, stop, and at teardown the test's CPU
        seconds): which worker ran what, when, at what cost."""
        self.seconds: dict[str, float] = defaultdict(float)
        self.tier: dict[str, str] = {}
        self.stack_starts: list[float] = []
        self.cpu: dict[str, float] = defaultdict(float)
        self.timeline = open(timeline, "w", encoding="utf-8") if timeline else None  # noqa: SIM115

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration
        if self.timeline is not None:
            node = getattr(report, "node", None)
            worker = getattr(getattr(node, "gateway", None), "id", "main")
            cpu = dict(report.user_properties).get(CPU) if report.when == "teardown" else None
            line = [worker, report.nodeid, report.when, report.start, report.stop, cpu]
            self.timeline.write(json.dumps(line) + "\n")
        if report.when == "teardown":  # each phase's report carries the test's properties so far
            for name, value in report.user_properties:
                if name == STACK_START:
                    self.stack_starts.append(float(value))  # type: ignore[arg-type]
                elif name == CPU:
                    self.cpu[report.nodeid] += float(value)  # type: ignore[arg-type]
        if report.when == "call" or report.nodeid not in self.tier:
            self.tier[report.nodeid] = tier_of(report.keywords)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.timeline is not None:
            self.timeline.close()
        if not self.seconds:
            return
        write = terminalreporter.write_line
        terminalreporter.section("time per tier (setup + call + teardown, all workers)")
        per_tier: dict[str, list[str]] = defaultdict(list)
        for nodeid in self.seconds:
            per_tier[self.tier.get(nodeid, "unit")].append(nodeid)
        total = sum(self.seconds.values())
        for tier in (*TIERS, "all"):
            nodeids = list(self.seconds) if tier == "all" else per_tier.get(tier, [])
            spent = sum(self.seconds[nodeid] for nodeid in nodeids)
            cpu = sum(self.cpu.get(nodeid, 0.0) for nodeid in nodeids)
            share = spent / total if total else 0.0
            write(
                f"{tier:>7}: {len(nodeids):5d} tests {spent:8.1f} s {share:6.1%}  {cpu:8.1f} s CPU"
            )
        write(
            f"stacks started: {len(self.stack_starts)}, "
            f"{sum(self.stack_starts):.1f} s until healthy in all"
        )
        terminalreporter.section(f"the {SLOWEST} slowest tests (setup + call + teardown)")
        slowest = sorted(self.seconds.items(), key=lambda pair: pair[1], reverse=True)
        for nodeid, seconds in slowest[:SLOWEST]:
            cpu = self.cpu.get(nodeid, 0.0)
            tier = self.tier.get(nodeid, "unit")
            write(f"{seconds:7.1f} s {cpu:6.1f} s CPU  {tier:>6}  {nodeid}")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--suite-timeline",
        default="",
        metavar="PATH",
        help="write every test phase's worker, start and stop to PATH (JSON lines); give it as --suite-timeline=PATH",
    )


def pytest_configure(config: pytest.Config) -> None:
    # In a pytest-xdist worker, the controller prints what the workers report.
    if not hasattr(config, "workerinput"):
        timeline = config.getoption("suite_timeline", "")
        config.pluginmanager.register(TimingReport(timeline), "quire-timings")
