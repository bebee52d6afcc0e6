"""CompareTracks' summary (``quire.audit.trackcompare``) over a real SQLite
audit database whose entries are appended as audit appends them
(``quire.audit.ledger``): per-track jobs, endings, reasons, retries,
versions, nearest-rank latency percentiles, dead letters and the window's
edges."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from quire.audit import ledger, tables
from quire.audit.deadletterbook import record_letter
from quire.audit.trackcompare import MAX_SAMPLE, Window, compare_tracks, nearest_rank
from quire.database import Database
from quire.pipeline import State
from quire.reasons import ReasonCode
from quire.transitions import EventFactory
from quire.type import queue_pb2

T0 = (datetime.now(UTC) - timedelta(hours=1)).replace(microsecond=0)
"""The window's start: an hour ago (audit records the entries now)."""
WINDOW = Window(start=T0, end=T0 + timedelta(seconds=100), sample_size=10)

Step = tuple[str, str, str, int, float, str]
"""(service, build version, to_state, attempt, seconds after T0, reason code)."""


def _db(tmp_path: Path) -> Database:
    database = Database(f"sqlite:///{tmp_path / 'audit.db'}", tables.metadata)
    database.create_schema()
    return database


def _job(
    database: Database,
    job: str,
    track: str,
    steps: list[Step],
    *,
    generation: int = 0,
    previous: str = "",
) -> queue_pb2.JobTask:
    """Append ``job``'s entries as audit would, each occurring when ``steps`` says."""
    task = queue_pb2.JobTask(
        job=f"jobs/{job}",
        tenant="tenant-a",
        manifest_digest="m" * 64,
        track=track,
        generation=generation,
    )
    before = previous
    for service, version, to_state, attempt, seconds, reason in steps:
        event = EventFactory(service, "instance-1", version).transition(
            task, before, to_state, attempt=attempt, lease_token=1, reason_code=reason
        )
        event.occur_time.FromDatetime(T0 + timedelta(seconds=seconds))
        database.transaction(lambda s, e=event: ledger.append(s, e))
        before = to_state
    return task


def _completed(start: float, seconds: float, *, validator: str = "1.0") -> list[Step]:
    """Accepted at ``start``, completed ``seconds`` later; the assembler's step
    made on its second delivery."""
    return [
        ("admission", "1.0", State.ACCEPTED, 1, start, ""),
        ("validator", validator, State.VALIDATING, 1, start + 1, ""),
        ("validator", validator, State.ASSEMBLING, 1, start + 2, ""),
        ("assembler", "1.0", State.SIGNING, 2, start + 3, ""),
        ("signer", "1.0", State.COMMITTING, 1, start + 4, ""),
        ("audit", "1.0", State.COMPLETED, 1, start + seconds, ""),
    ]


def _fill(database: Database) -> None:
    # Candidate: one completed in 10 s (validator 2.0), one rejected after 4 s,
    # one still validating.
    _job(database, "c1", "candidate", _completed(1, 10, validator="2.0"))
    _job(
        database,
        "c2",
        "candidate",
        [
            ("admission", "1.0", State.ACCEPTED, 1, 2, ""),
            ("validator", "2.0", State.VALIDATING, 1, 3, ""),
            ("validator", "2.0", State.REJECTED, 1, 6, ReasonCode.REQUIRED_FIELD_MISSING),
        ],
    )
    _job(
        database,
        "c3",
        "candidate",
        [
            ("admission", "1.0", State.ACCEPTED, 1, 50, ""),
            ("validator", "2.0", State.VALIDATING, 1, 51, ""),
        ],
    )
    # Baseline: completed in 20 s and in 30 s, and one whose validation
    # exhausted its deliveries: FAILED by the dead-letter office after 50 s.
    _job(database, "b1", "baseline", _completed(10, 20))
    _job(database, "b2", "baseline", _completed(20, 30))
    failed = _job(
        database,
        "b3",
        "baseline",
        [
            ("admission", "1.0", State.ACCEPTED, 1, 30, ""),
            ("validator", "1.0", State.VALIDATING, 3, 40, ""),
            ("audit", "1.0", State.FAILED, 3, 80, ReasonCode.RETRY_LIMIT_REACHED),
        ],
    )
    database.transaction(
        lambda s: record_letter(
            s,
            queue_pb2.DeadLetter(
                task=failed,
                stage="validate",
                reason_code=ReasonCode.RETRY_LIMIT_REACHED,
                deliveries=3,
            ),
        )
    )
    # Outside the window: accepted a second before it (and retried by an
    # operator inside it: a retry is not an acceptance), and at its end.
    _job(
        database,
        "b4",
        "baseline",
        [
            ("admission", "1.0", State.ACCEPTED, 1, -1, ""),
            ("validator", "1.0", State.FAILED, 1, 0, ReasonCode.SOURCE_UNAVAILABLE),
        ],
    )
    _job(
        database,
        "b4",
        "baseline",
        [("operator", "1.0", State.ACCEPTED, 1, 5, ReasonCode.DEAD_LETTER_RETRIED)],
        generation=1,
        previous=State.FAILED,
    )
    _job(database, "b5", "baseline", _completed(100, 1))
    # Accepted while no rollout was open.
    _job(database, "e1", "", _completed(5, 7))


def test_nearest_rank_percentiles() -> None:
    values = [float(v) for v in range(100, 0, -1)]
    assert [nearest_rank(values, p) for p in (50, 95, 99, 100)] == [50.0, 95.0, 99.0, 100.0]
    assert nearest_rank([3.0], 99) == 3.0
    assert nearest_rank([], 50) == 0.0
    assert nearest_rank([4.0, 10.0], 50) == 4.0  # rank ceil(0.5 × 2) = 1


def test_each_track_is_summarised_from_its_entries(tmp_path: Path) -> None:
    database = _db(tmp_path)
    _fill(database)
    summaries = database.transaction(lambda s: compare_tracks(s, WINDOW))
    assert [t.track for t in summaries] == ["candidate", "baseline", ""]
    candidate, baseline, legacy = summaries

    assert candidate.jobs == 3
    assert dict(candidate.endings) == {"COMPLETED": 1, "REJECTED": 1}
    assert dict(candidate.reasons) == {"REQUIRED_FIELD_MISSING": 1}
    assert (
        candidate.latency_p50_seconds,
        candidate.latency_p95_seconds,
        candidate.latency_p99_seconds,
    ) == (4.0, 10.0, 10.0)
    # c1: 4 steps, the assembler's a retry; c2: 2; c3: 1.
    assert (candidate.steps, candidate.retried_steps) == (7, 1)
    assert dict(candidate.versions) == {"validator@2.0": 5, "assembler@1.0": 1, "signer@1.0": 1}
    assert candidate.dead_letters == 0
    assert list(candidate.completed_sample) == ["jobs/c1"]

    assert baseline.jobs == 3  # b4 (before the window) and b5 (at its end) are not in it
    assert dict(baseline.endings) == {"COMPLETED": 2, "FAILED": 1}
    assert dict(baseline.reasons) == {"RETRY_LIMIT_REACHED": 1}
    assert (
        baseline.latency_p50_seconds,
        baseline.latency_p95_seconds,
        baseline.latency_p99_seconds,
    ) == (30.0, 50.0, 50.0)
    # b1, b2: 4 steps each (one retried); b3: 1 step on the third delivery;
    # the dead-letter office's FAILED entry is audit's, not a stage worker's.
    assert (baseline.steps, baseline.retried_steps) == (9, 3)
    assert dict(baseline.versions) == {
        "validator@1.0": 5,
        "assembler@1.0": 2,
        "signer@1.0": 2,
    }
    assert baseline.dead_letters == 1
    assert list(baseline.completed_sample) == ["jobs/b2", "jobs/b1"]  # newest first

    assert (legacy.jobs, dict(legacy.endings), legacy.latency_p50_seconds) == (
        1,
        {"COMPLETED": 1},
        7.0,
    )


def test_versions_of_one_stage_and_the_sample_size(tmp_path: Path) -> None:
    database = _db(tmp_path)
    _fill(database)
    window = Window(start=WINDOW.start, end=WINDOW.end, stage_service="validator", sample_size=1)
    candidate, baseline, _legacy = database.transaction(lambda s: compare_tracks(s, window))
    assert dict(candidate.versions) == {"validator@2.0": 5}
    assert dict(baseline.versions) == {"validator@1.0": 5}
    assert candidate.steps == 7  # steps still count every stage's
    assert list(baseline.completed_sample) == ["jobs/b2"]
    big = Window(start=WINDOW.start, end=WINDOW.end, sample_size=10 * MAX_SAMPLE)
    assert len(database.transaction(lambda s: compare_tracks(s, big))[1].completed_sample) == 2


@pytest.mark.parametrize(
    ("start", "end", "jobs"),
    [
        (-1, 100, {"candidate": 3, "baseline": 4, "": 1}),  # b4's acceptance is in
        (0, 101, {"candidate": 3, "baseline": 4, "": 1}),  # b5's too
        (2, 50, {"candidate": 1, "baseline": 3, "": 1}),  # c2; b1-b3; e1 (c3 at 50 is not)
        (200, 300, {}),
    ],
)
def test_the_window_holds_the_jobs_accepted_in_it(
    tmp_path: Path, start: float, end: float, jobs: dict[str, int]
) -> None:
    database = _db(tmp_path)
    _fill(database)
    window = Window(start=T0 + timedelta(seconds=start), end=T0 + timedelta(seconds=end))
    summaries = database.transaction(lambda s: compare_tracks(s, window))
    assert {t.track: t.jobs for t in summaries} == jobs
