"""Which jobs were in flight when a fault struck, from two sides:

- the history (``in_flight``): acknowledged before the moment, and no
  client had yet seen it end;
- the services (``worked_on``): the jobs whose work spans on a replica
  (``<service>.process`` and every span naming a ``quire.job``) began
  before the moment and ended after it, from the replica's own span file;
  and the calls it was serving then (``open_calls``: admission's spans
  name no job). A killed process never wrote the spans it had open, so
  for a kill the jobs it had taken (``taken_unfinished``) are those whose
  delivery it received (its ``<stage>.queue_wait`` span ends when a
  delivery is taken) before the moment and whose work it never finished.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from quire.jobs import TERMINAL_STATES
from quire.testing.history import History, Kind

__all__ = ["in_flight", "open_calls", "taken_unfinished", "worked_on"]

JOB_ATTRIBUTE = "quire.job"


def in_flight(history: History, moment: float) -> tuple[str, ...]:
    """Jobs acknowledged before ``moment`` (``time.monotonic()``) whose end
    no client had seen by then."""
    acknowledged: dict[str, float] = {}
    for op in history.of(Kind.ACCEPTED):
        acknowledged.setdefault(op.job, op.monotonic)
    ended: dict[str, float] = {}
    for op in history.of(Kind.OBSERVED):
        if op.state in TERMINAL_STATES:
            ended[op.job] = min(ended.get(op.job, op.monotonic), op.monotonic)
    return tuple(
        sorted(
            job for job, at in acknowledged.items() if at <= moment < ended.get(job, float("inf"))
        )
    )


def _spans(directories: Iterable[Path]) -> Iterator[dict[str, Any]]:
    for directory in directories:
        try:
            lines = (directory / "spans.jsonl").read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                span = json.loads(line)
            except ValueError:
                continue
            if isinstance(span, dict):
                yield span


def taken_unfinished(directories: Iterable[Path], wall: float) -> tuple[str, ...]:
    """Jobs whose latest delivery a replica took before ``wall``
    (``time.time()``) it had not finished by then (no ``<service>.process``
    span of that attempt had ended): what a replica killed at ``wall`` held.
    An earlier attempt it never finished (its settling cut off, say) while
    a later one ended does not count."""
    moment = int(wall * 1e9)
    latest: dict[str, int] = {}
    finished: set[tuple[str, int]] = set()
    for span in _spans(directories):
        attributes = span.get("attributes") or {}
        job, attempt, end = (
            attributes.get(JOB_ATTRIBUTE),
            attributes.get("quire.attempt"),
            span.get("end_ns"),
        )
        if not job or not isinstance(attempt, int) or not isinstance(end, int) or end > moment:
            continue
        name = str(span.get("name"))
        if name.endswith(".queue_wait"):
            latest[str(job)] = max(latest.get(str(job), 0), attempt)
        elif name.endswith(".process"):
            finished.add((str(job), attempt))
    held = {job for job, attempt in latest.items() if (job, attempt) not in finished}
    return tuple(sorted(f"jobs/{job.removeprefix('jobs/')}" for job in held))


def _open_spans(directories: Iterable[Path], wall: float) -> Iterator[dict[str, Any]]:
    """The spans in ``<directory>/spans.jsonl`` open at ``wall`` (``time.time()``)."""
    moment = int(wall * 1e9)
    for span in _spans(directories):
        start, end = span.get("start_ns"), span.get("end_ns")
        if isinstance(start, int) and isinstance(end, int) and start <= moment <= end:
            yield span


def worked_on(directories: Iterable[Path], wall: float) -> tuple[str, ...]:
    """Jobs some span in ``<directory>/spans.jsonl`` was open on at ``wall``
    (``time.time()``)."""
    jobs = {
        f"jobs/{str(job).removeprefix('jobs/')}"
        for span in _open_spans(directories, wall)
        if (job := (span.get("attributes") or {}).get(JOB_ATTRIBUTE))
    }
    return tuple(sorted(jobs))


def open_calls(directories: Iterable[Path], wall: float) -> int:
    """The gRPC calls (server spans, ``/package.Service/Method``) open at ``wall``."""
    return sum(
        1 for span in _open_spans(directories, wall) if str(span.get("name")).startswith("/")
    )
