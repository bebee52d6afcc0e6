"""The suite's tiers, as a pytest plugin (``tests/conftest.py`` loads it).

Every test belongs to one tier, the first of these it is marked with:

- ``corpus``: reads the shared corpus of PDFs nobody here wrote;
- ``fault``: kills processes, fills disks or breaks storage under a stack;
- ``stack``: starts the embedded stack, the suite's shared one or its own;
- ``unit``: none of these (it may still start one real nats-server or
  PostgreSQL: a small real server, not the stack).

A test that asks for the ``stack`` or ``corpus`` fixture is marked by its
fixtures. Any other test that starts a stack must say so with a marker:
``Stack.start`` fails a test of the unit tier, so ``make test-unit`` (the
unit tier alone) never starts one by accident and the per-tier figures stay
true.

Tests marked ``only_in("<target>")`` run only from that ``make`` target
(which sets ``TEST_TARGET``); elsewhere they are deselected, never
skipped.

Under CI (``CI=true``, as ``.ci/run`` runs), a skip is a failure: a missing
prerequisite (the corpus, PostgreSQL, SoftHSM, pdfsig) must not make a test's
assertions vanish from a green run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest

__all__ = ["STACK_START", "TIERS", "in_ci", "tier_of"]

TIERS = ("corpus", "fault", "stack", "unit")
"""In precedence order: a corpus test that kills a process counts as corpus."""
MARKED_BY_FIXTURE = {"corpus": "corpus", "stack": "stack"}
"""Fixture name -> the tier marker a test that asks for it gets."""
TARGET_VAR = "TEST_TARGET"
STACK_START = "stack_start_seconds"
"""A test report's user property: one per stack its test started, with how long it took."""

_current: list[pytest.Item] = []


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def tier_of(keywords: Any) -> str:
    """The tier of a test from its markers (an item's or a report's keywords)."""
    for tier in TIERS[:-1]:
        if tier in keywords:
            return tier
    return "unit"


def pytest_configure(config: pytest.Config) -> None:
    for tier, text in (
        ("stack", "starts the embedded stack (nats-server and the service processes)"),
        ("fault", "kills processes or breaks storage, networks or time under a stack"),
        ("corpus", "reads the shared corpus of real PDFs"),
        ("only_in(target)", "runs only from `make <target>` (TEST_TARGET)"),
    ):
        config.addinivalue_line("markers", f"{tier}: {text}")
    _guard_stack_starts()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    target = os.environ.get(TARGET_VAR, "")
    kept, deselected = [], []
    for item in items:
        for fixture, marker in MARKED_BY_FIXTURE.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(marker)
        only = item.get_closest_marker("only_in")
        if only is not None and only.args[0] != target:
            deselected.append(item)
        else:
            kept.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _current.append(item)
    try:
        return (yield)
    finally:
        _current.pop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if not hasattr(report, "wasxfail"):
        _fail_a_skip_under_ci(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    _fail_a_skip_under_ci(report)
    return report


def _fail_a_skip_under_ci(report: pytest.TestReport | pytest.CollectReport) -> None:
    if in_ci() and report.skipped:
        report.outcome = "failed"
        report.longrepr = f"skipped under CI, which must run every test: {_reason(report)}"


def _reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def _guard_stack_starts() -> None:
    """``Stack.start`` in a unit-tier test fails that test with a clear line;
    elsewhere each start is recorded on the test's report."""
    from quire.stack.supervisor import Stack

    if getattr(Stack.start, "tier_guarded", False):
        return
    original: Callable[..., Any] = Stack.start

    def start(self: Stack) -> Any:
        item = _current[-1] if _current else None
        if item is not None and tier_of(item.keywords) == "unit":
            pytest.fail(
                f"{item.nodeid} starts a stack: mark it stack, fault or corpus", pytrace=False
            )
        began = time.monotonic()
        try:
            return original(self)
        finally:
            if item is not None:  # reported with the test: quire.testing.timings adds them up
                item.user_properties.append((STACK_START, time.monotonic() - began))

    start.tier_guarded = True  # type: ignore[attr-defined]
    Stack.start = start  # type: ignore[method-assign]
