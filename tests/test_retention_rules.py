"""Retention without a stack: audit records a retirement only for bytes the
ledger ties to an ended job, once, without changing the job's view, and the
ledger still verifies; the plan's rules keep what is shared with a job not
yet due, what a fresh copy of retired bytes holds, and bytes lost with no
record (those are for ``quire check`` to report); a repaired source's clean
rewrite, and the fetched bytes a source named by reference was pinned to, go
under the sources rule, once every job using them is due."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from quire.audit import ledger, tables
from quire.audit.retirement import record_retirement
from quire.audit.verification import verify_ledger
from quire.blobstore import assembled_key, fetched_key, normalized_key, signed_key, source_key
from quire.database import Database
from quire.errors import FailedPrecondition, InvalidInput
from quire.jobview import fold
from quire.retention import PlannedRetirement, plan
from quire.retention_records import (
    AcceptedJob,
    Fetched,
    LedgerJob,
    Records,
    StoredBlob,
    TenantPeriods,
    Upload,
)
from quire.settings import RetentionSettings
from quire.transitions import EventFactory
from quire.type import job_pb2, queue_pb2

FACTORY = EventFactory("test", "instance", "0")
STATES = ["ACCEPTED", "VALIDATING", "REVIEWING", "ASSEMBLING", "SIGNING", "COMMITTING", "COMPLETED"]
TENANT = "0123456789abcdef"
SOURCE = "a" * 64
SIGNED = "b" * 64
NORMALIZED = "f" * 64
FETCHED = "9" * 64
CARRIER = ("carrier", "shipments/S-1")
ACTOR = queue_pb2.Actor(service="operator", instance="op1", build_version="0")


@pytest.fixture
def audit(tmp_path: Path) -> Database:
    database = Database(f"sqlite:///{tmp_path / 'audit.db'}", tables.metadata)
    database.create_schema()
    for job, states in (("jobs/aa", STATES), ("jobs/bb", STATES[:3])):
        previous = ""
        for state in states:
            task = queue_pb2.JobTask(job=job, tenant=TENANT)
            task.sources.add(sha256=SOURCE)
            fields: dict[str, Any] = (
                {"output_digest": SIGNED} if state in ("COMMITTING", "COMPLETED") else {}
            )
            if state == "REVIEWING":
                fields["repairs"] = [_repair()]
                fields["pins"] = [_pin()]
            event = FACTORY.transition(task, previous, state, attempt=1, lease_token=1, **fields)
            database.transaction(lambda s, e=event: ledger.append(s, e))
            previous = state
    return database


def _repair(source: str = SOURCE, normalized: str = NORMALIZED) -> job_pb2.SourceRepair:
    return job_pb2.SourceRepair(
        position=0,
        sha256=source,
        normalized_sha256=normalized,
        normalized_size_bytes=7,
        warnings=["XREF_RECONSTRUCTED"],
    )


def _pin(
    sha256: str = FETCHED, reference: tuple[str, str] = CARRIER, position: int = 1
) -> job_pb2.SourcePin:
    system, key = reference
    return job_pb2.SourcePin(
        position=position,
        system=system,
        key=key,
        sha256=sha256,
        size_bytes=9,
        fetched_sha256="8" * 64,
    )


def _retirement(kind: str, sha256: str, job: str = "jobs/aa") -> queue_pb2.Retirement:
    keys = {
        "artifact": signed_key(TENANT, job),
        "packet": assembled_key(TENANT, sha256),
        "source": source_key(TENANT, sha256),
        "upload": source_key(TENANT, sha256),
        "normalized": normalized_key(TENANT, sha256),
        "fetched": fetched_key(TENANT, sha256),
    }
    rule = {
        "artifact": "artifacts",
        "packet": "packets",
        "source": "sources",
        "normalized": "sources",
        "fetched": "sources",
    }
    return queue_pb2.Retirement(
        kind=kind,
        blob_key=keys[kind],
        sha256=sha256,
        size_bytes=10,
        rule=rule.get(kind, "unused_uploads"),
        period_seconds=86400,
    )


def _events(database: Database, job: str) -> list[queue_pb2.TransitionEvent]:
    return database.transaction(
        lambda s: [
            queue_pb2.TransitionEvent.FromString(row.event)
            for row in s.execute(
                tables.ledger.select()
                .where(tables.ledger.c.job == job)
                .order_by(tables.ledger.c.sequence)
            )
        ]
    )


def test_a_retirement_is_recorded_once_and_changes_no_view(audit: Database) -> None:
    before = fold(_events(audit, "jobs/aa"))
    for kind, digest in (
        ("artifact", SIGNED),
        ("source", SOURCE),
        ("packet", "c" * 64),
        ("normalized", NORMALIZED),
        ("fetched", FETCHED),
    ):
        retirement = _retirement(kind, digest)
        first = audit.transaction(
            lambda s, r=retirement: record_retirement(s, TENANT, "jobs/aa", r, ACTOR)
        )
        again = audit.transaction(
            lambda s, r=retirement: record_retirement(s, TENANT, "jobs/aa", r, ACTOR)
        )
        assert first[1] and not again[1] and first[0] == again[0]
    upload = _retirement("upload", "d" * 64)
    assert audit.transaction(lambda s: record_retirement(s, TENANT, "", upload, ACTOR))[1]
    events = _events(audit, "jobs/aa")
    retired = [e for e in events if e.HasField("retirement")]
    assert len(retired) == 5
    assert all(e.from_state == e.to_state and e.reason_code == "BYTES_RETIRED" for e in retired)
    assert fold(events) == before
    index = audit.transaction(
        lambda s: s.execute(tables.jobs.select().where(tables.jobs.c.job == "jobs/aa")).one()
    )
    assert index.state == "COMPLETED"
    report = audit.transaction(lambda s: verify_ledger(s, []))
    assert report.ok, report.findings


@pytest.mark.parametrize(
    ("job", "retirement", "error"),
    [
        ("jobs/bb", _retirement("source", SOURCE, "jobs/bb"), FailedPrecondition),
        ("jobs/aa", _retirement("artifact", "e" * 64), InvalidInput),
        ("jobs/aa", _retirement("source", "e" * 64), InvalidInput),
        ("", _retirement("source", SOURCE), InvalidInput),
        ("jobs/aa", _retirement("upload", SOURCE), InvalidInput),
        ("jobs/aa", _retirement("normalized", SOURCE), InvalidInput),
        ("jobs/aa", _retirement("normalized", "e" * 64), InvalidInput),
        ("jobs/bb", _retirement("normalized", NORMALIZED, "jobs/bb"), FailedPrecondition),
        (
            "jobs/aa",
            queue_pb2.Retirement(
                kind="normalized",
                blob_key=source_key(TENANT, NORMALIZED),
                sha256=NORMALIZED,
                rule="sources",
            ),
            InvalidInput,
        ),
        (
            "jobs/aa",
            queue_pb2.Retirement(
                kind="normalized",
                blob_key=normalized_key(TENANT, NORMALIZED),
                sha256=NORMALIZED,
                rule="unused_uploads",
            ),
            InvalidInput,
        ),
        ("jobs/aa", _retirement("fetched", "e" * 64), InvalidInput),
        ("jobs/aa", _retirement("fetched", SOURCE), InvalidInput),
        ("jobs/aa", _retirement("fetched", NORMALIZED), InvalidInput),
        ("jobs/bb", _retirement("fetched", FETCHED, "jobs/bb"), FailedPrecondition),
        (
            "jobs/aa",
            queue_pb2.Retirement(
                kind="fetched",
                blob_key=normalized_key(TENANT, FETCHED),
                sha256=FETCHED,
                rule="sources",
            ),
            InvalidInput,
        ),
        (
            "jobs/aa",
            queue_pb2.Retirement(
                kind="fetched",
                blob_key=fetched_key(TENANT, FETCHED),
                sha256=FETCHED,
                rule="packets",
            ),
            InvalidInput,
        ),
        ("jobs/aa", _retirement("source", FETCHED), InvalidInput),
    ],
    ids=[
        "job-not-ended",
        "not-its-artifact",
        "not-its-source",
        "no-job",
        "upload-with-job",
        "uploaded-digest-is-not-its-rewrite",
        "not-its-rewrite",
        "rewrite-of-a-job-not-ended",
        "rewrite-under-another-key",
        "rewrite-under-another-rule",
        "no-job-pinned-it",
        "uploaded-digest-is-not-pinned",
        "rewrite-is-not-pinned",
        "pinned-by-a-job-not-ended",
        "pinned-under-another-key",
        "pinned-under-another-rule",
        "pinned-bytes-are-not-an-upload",
    ],
)
def test_a_retirement_the_ledger_does_not_back_is_refused(
    audit: Database, job: str, retirement: queue_pb2.Retirement, error: type[Exception]
) -> None:
    with pytest.raises(error):
        audit.transaction(lambda s: record_retirement(s, TENANT, job, retirement, ACTOR))


# -- the plan's rules ----------------------------------------------------------

NOW = datetime(2030, 1, 31, tzinfo=UTC)
DAY = timedelta(days=1)


class Present:
    def __init__(self, keys: set[str]) -> None:
        self.keys = keys

    def exists(self, key: str) -> bool:
        return key in self.keys


def _ended(
    days_ago: float,
    repairs: tuple[job_pb2.SourceRepair, ...] = (),
    pins: tuple[job_pb2.SourcePin, ...] = (),
) -> LedgerJob:
    job = LedgerJob()
    for state in STATES:
        fields: dict[str, Any] = {}
        if state == "REVIEWING":
            fields = {"repairs": list(repairs)}
        if state not in ("ACCEPTED", "VALIDATING"):
            fields["pins"] = list(pins)  # every entry after the pinning carries them
        event = FACTORY.transition(
            queue_pb2.JobTask(job="jobs/00", tenant=TENANT),
            "",
            state,
            attempt=1,
            lease_token=1,
            **fields,
        )
        event.occur_time.FromDatetime(NOW - timedelta(days=days_ago))
        job.take(event)
    return job


def _records(
    uploads: list[Upload], jobs: dict[str, tuple[float | None, datetime, frozenset[str]]]
) -> Records:
    ledger_jobs = {name: _ended(ago) for name, (ago, _, _) in jobs.items() if ago is not None}
    return Records(
        tenants={TENANT: TenantPeriods(sources_seconds=86400, packets_seconds=86400)},
        uploads=uploads,
        accepted={
            name: AcceptedJob(name, TENANT, created, sources)
            for name, (_, created, sources) in jobs.items()
        },
        ledger=ledger_jobs,
        retired_uploads=frozenset(),
        packets={
            name: StoredBlob(name, assembled_key(TENANT, "c" * 64), "c" * 64, 5) for name in jobs
        },
        artifacts={},
    )


def _plan(records: Records, present: set[str]) -> list[PlannedRetirement]:
    return plan(records, RetentionSettings(), now=NOW, blobs=Present(present))


def test_bytes_shared_with_a_job_not_yet_due_are_kept() -> None:
    upload = Upload(TENANT, SOURCE, 10, source_key(TENANT, SOURCE), NOW - 30 * DAY)
    keys = {upload.blob_key, assembled_key(TENANT, "c" * 64)}
    old, recent = "jobs/01", "jobs/02"
    due = _records(
        [upload],
        {old: (3, NOW - 9 * DAY, frozenset({SOURCE})), recent: (2, NOW - 9 * DAY, frozenset())},
    )
    assert {(p.kind, p.job) for p in _plan(due, keys)} == {
        ("source", old),
        ("packet", old),
        ("packet", recent),
    }
    shared = _records(
        [upload],
        {
            old: (3, NOW - 9 * DAY, frozenset({SOURCE})),
            recent: (0.5, NOW - 9 * DAY, frozenset({SOURCE})),
        },
    )
    assert _plan(shared, keys) == [], "one user ended half a day ago: nothing it shares goes"
    running = _records(
        [upload],
        {
            old: (3, NOW - 9 * DAY, frozenset({SOURCE})),
            recent: (None, NOW - 9 * DAY, frozenset({SOURCE})),
        },
    )
    assert _plan(running, keys) == [], "a job that has not ended keeps what it uses"


def test_a_fresh_copy_of_retired_bytes_is_an_unused_upload() -> None:
    fresh = Upload(TENANT, SOURCE, 10, source_key(TENANT, SOURCE), NOW - DAY / 2)
    records = _records([fresh], {"jobs/01": (10, NOW - 20 * DAY, frozenset({SOURCE}))})
    planned = _plan(records, {fresh.blob_key, assembled_key(TENANT, "c" * 64)})
    assert [p.kind for p in planned] == ["packet"], "the job before it used an earlier copy"


def test_bytes_lost_with_no_record_are_not_planned() -> None:
    upload = Upload(TENANT, SOURCE, 10, source_key(TENANT, SOURCE), NOW - 30 * DAY)
    records = _records([upload], {"jobs/01": (3, NOW - 9 * DAY, frozenset({SOURCE}))})
    assert _plan(records, set()) == []


def _repaired(
    jobs: dict[str, float | None],
    sources: dict[str, frozenset[str]],
    unrepaired: frozenset[str] = frozenset(),
) -> Records:
    """Jobs that repaired SOURCE into NORMALIZED (None: has not ended; those
    in ``unrepaired`` ended without recording the repair), and what admission
    says each job's sources are; no other bytes."""
    return Records(
        tenants={TENANT: TenantPeriods(sources_seconds=86400)},
        uploads=[],
        accepted={
            name: AcceptedJob(name, TENANT, NOW - 9 * DAY, names) for name, names in sources.items()
        },
        ledger={
            name: _ended(ago, () if name in unrepaired else (_repair(),))
            for name, ago in jobs.items()
            if ago is not None
        },
        retired_uploads=frozenset(),
        packets={},
        artifacts={},
    )


def test_a_repaired_sources_rewrite_goes_under_the_sources_rule_once_due() -> None:
    key = normalized_key(TENANT, NORMALIZED)
    assert LedgerJob().repairs == {}
    assert _ended(3, (_repair(),)).repairs[key].size_bytes == 7
    sources = {"jobs/01": frozenset({SOURCE})}
    (planned,) = _plan(_repaired({"jobs/01": 3}, sources), {key})
    assert (planned.kind, planned.job, planned.rule) == ("normalized", "jobs/01", "sources")
    assert (planned.blob_key, planned.sha256, planned.size_bytes) == (key, NORMALIZED, 7)
    assert planned.period_seconds == 86400 and not planned.recorded
    assert planned.message().kind == "normalized"
    assert planned.event_id().endswith(f".retired.normalized.{NORMALIZED}")
    assert _plan(_repaired({"jobs/01": 0.5}, sources), {key}) == [], "not yet due"
    assert _plan(_repaired({"jobs/01": 3}, sources), set()) == [], "gone with no record"


def test_a_rewrite_shared_by_two_jobs_waits_for_both() -> None:
    key = normalized_key(TENANT, NORMALIZED)
    both = {"jobs/01": frozenset({SOURCE}), "jobs/02": frozenset({SOURCE})}
    assert _plan(_repaired({"jobs/01": 3, "jobs/02": 0.5}, both), {key}) == []
    due = _plan(_repaired({"jobs/01": 3, "jobs/02": 2}, both), {key})
    assert {(p.kind, p.job) for p in due} == {("normalized", "jobs/01"), ("normalized", "jobs/02")}
    # A job naming the upload that has not ended (or whose ledger does not
    # record the repair yet: it may be validating) keeps the rewrite too.
    assert _plan(_repaired({"jobs/01": 3, "jobs/02": None}, both), {key}) == []
    # One that ended without recording it waits too, but gets no entry:
    # audit would refuse it.
    other = _repaired({"jobs/01": 3, "jobs/02": 2}, both, unrepaired=frozenset({"jobs/02"}))
    assert [(p.kind, p.job) for p in _plan(other, {key})] == [("normalized", "jobs/01")]
    recent = _repaired({"jobs/01": 3, "jobs/02": 0.5}, both, unrepaired=frozenset({"jobs/02"}))
    assert _plan(recent, {key}) == []


def _fetched(
    jobs: dict[str, float | None],
    references: dict[str, frozenset[tuple[str, str]]],
    unpinned: frozenset[str] = frozenset(),
    pinned: frozenset[str] = frozenset(),
) -> Records:
    """Jobs whose CARRIER source was pinned to FETCHED (None: has not ended;
    those in ``unpinned`` ended without the ledger recording it), what
    admission says each job names by reference, and the jobs the validator
    pinned to FETCHED (``pinned``, besides those the ledger records)."""
    key = fetched_key(TENANT, FETCHED)
    return Records(
        tenants={TENANT: TenantPeriods(sources_seconds=86400)},
        uploads=[],
        accepted={
            name: AcceptedJob(name, TENANT, NOW - 9 * DAY, frozenset({""}), refs)
            for name, refs in references.items()
        },
        ledger={
            name: _ended(ago, pins=() if name in unpinned else (_pin(),))
            for name, ago in jobs.items()
            if ago is not None
        },
        retired_uploads=frozenset(),
        packets={},
        artifacts={},
        pinned={key: pinned} if pinned else {},
    )


def test_fetched_bytes_go_under_the_sources_rule_once_due() -> None:
    key = fetched_key(TENANT, FETCHED)
    assert LedgerJob().pins == {}
    assert _ended(3, pins=(_pin(),)).pins[key] == Fetched(
        TENANT, frozenset({CARRIER}), key, FETCHED, 9
    )
    twice = _ended(3, pins=(_pin(), _pin(reference=("tax", "orders/A-1"), position=2)))
    assert twice.pins[key].references == {CARRIER, ("tax", "orders/A-1")}, "one blob, two sources"
    references = {"jobs/01": frozenset({CARRIER})}
    (planned,) = _plan(_fetched({"jobs/01": 3}, references), {key})
    assert (planned.kind, planned.job, planned.rule) == ("fetched", "jobs/01", "sources")
    assert (planned.blob_key, planned.sha256, planned.size_bytes) == (key, FETCHED, 9)
    assert planned.period_seconds == 86400 and not planned.recorded
    assert planned.message().kind == "fetched"
    assert planned.event_id().endswith(f".retired.fetched.{FETCHED}")
    assert _plan(_fetched({"jobs/01": 0.5}, references), {key}) == [], "not yet due"
    assert _plan(_fetched({"jobs/01": 3}, references), set()) == [], "gone with no record"
    assert _plan(_fetched({"jobs/01": None}, references), {key}) == [], "a running job keeps it"


def test_fetched_bytes_shared_by_jobs_wait_for_every_job_that_may_use_them() -> None:
    key = fetched_key(TENANT, FETCHED)
    both = {"jobs/01": frozenset({CARRIER}), "jobs/02": frozenset({CARRIER})}
    assert _plan(_fetched({"jobs/01": 3, "jobs/02": 0.5}, both), {key}) == []
    due = _plan(_fetched({"jobs/01": 3, "jobs/02": 2}, both), {key})
    assert {(p.kind, p.job) for p in due} == {("fetched", "jobs/01"), ("fetched", "jobs/02")}
    # A job naming the same reference that has not ended (it may be fetching
    # the same bytes again) keeps them.
    assert _plan(_fetched({"jobs/01": 3, "jobs/02": None}, both), {key}) == []
    # So does a running job the validator pinned to the same bytes under
    # another reference, before its ledger says so.
    other = {"jobs/01": frozenset({CARRIER}), "jobs/02": frozenset({("tax", "orders/A-1")})}
    running = _fetched({"jobs/01": 3, "jobs/02": None}, other, pinned=frozenset({"jobs/02"}))
    assert _plan(running, {key}) == []
    # A running job naming another reference, that no one pinned to these
    # bytes, does not.
    unrelated = _fetched({"jobs/01": 3, "jobs/02": None}, other)
    assert [(p.kind, p.job) for p in _plan(unrelated, {key})] == [("fetched", "jobs/01")]
    # One that ended without the ledger recording the pin waits too, but
    # gets no entry: audit would refuse it.
    unrecorded = _fetched({"jobs/01": 3, "jobs/02": 2}, both, unpinned=frozenset({"jobs/02"}))
    assert [(p.kind, p.job) for p in _plan(unrecorded, {key})] == [("fetched", "jobs/01")]
    recent = _fetched({"jobs/01": 3, "jobs/02": 0.5}, both, unpinned=frozenset({"jobs/02"}))
    assert _plan(recent, {key}) == []
