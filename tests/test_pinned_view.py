"""A job's deadline and what was pinned for its sources named by reference
travel on its ledger entries, and audit's view and the status document show
them from there (the entries' hashed bytes), never from a table."""

from __future__ import annotations

from quire.audit.servicer import _job
from quire.jobs import job_name, new_job_id
from quire.jobstatus import job_status_document
from quire.jobview import fold
from quire.transitions import EventFactory
from quire.type import job_pb2, queue_pb2


def _task() -> queue_pb2.JobTask:
    task = queue_pb2.JobTask(job=job_name(new_job_id()), tenant="t1", manifest_digest="m" * 64)
    task.deadline.FromSeconds(1_900_000_000)
    pinned = job_pb2.SourceRef(position=0, document_id="tax", sha256="a" * 64)
    pinned.pin.CopyFrom(
        job_pb2.SourcePin(position=0, system="tax", key="k/1", sha256="a" * 64, size_bytes=9)
    )
    pinned.pin.fetch_time.FromSeconds(1_800_000_000)
    task.sources.extend([pinned, job_pb2.SourceRef(position=1, sha256="b" * 64)])
    return task


def test_every_entry_carries_the_deadline_and_the_pins_and_the_view_shows_them() -> None:
    events = EventFactory(service="validator", instance="i", build_version="1")
    task = _task()
    accepted = events.transition(task, "", "ACCEPTED", attempt=1, lease_token=0)
    later = events.transition(task, "VALIDATING", "REVIEWING", attempt=1, lease_token=1)
    assert accepted.deadline.seconds == 1_900_000_000
    assert [pin.key for pin in later.pins] == ["k/1"], "only sources that were pinned"

    job = _job(fold([accepted, later]))  # type: ignore[arg-type]
    assert job.deadline.seconds == 1_900_000_000
    assert [(pin.system, pin.sha256) for pin in job.pins] == [("tax", "a" * 64)]
    document = job_status_document(job)
    assert document["deadline"] == "2030-03-17T17:46:40Z"
    assert document["pins"][0]["key"] == "k/1"
    assert document["pins"][0]["fetch_time"] == "2027-01-15T08:00:00Z"


def test_a_job_without_a_budget_has_no_deadline() -> None:
    events = EventFactory(service="admission", instance="i", build_version="1")
    event = events.transition(
        queue_pb2.JobTask(job=job_name(new_job_id()), tenant="t1"),
        "",
        "ACCEPTED",
        attempt=1,
        lease_token=0,
    )
    assert not event.HasField("deadline") and not event.pins
    job = _job(fold([event]))  # type: ignore[arg-type]
    assert not job.HasField("deadline")
    assert job_status_document(job)["deadline"] is None


def test_quire_status_shows_the_deadline_each_pin_and_each_systems_fetch_time() -> None:
    from quire.cli.jobcommands import pin_lines, timing_line

    events = EventFactory(service="validator", instance="i", build_version="1")
    event = events.transition(_task(), "VALIDATING", "REVIEWING", attempt=1, lease_token=1)
    fetch = job_pb2.PhaseTiming(stage="validate", phase="fetch", source_system="tax")
    fetch.duration.FromMilliseconds(12)
    event.timings.append(fetch)
    job = _job(fold([event]))  # type: ignore[arg-type]
    lines = pin_lines(job)
    assert lines[0] == "deadline 2030-03-17T17:46:40Z"
    assert lines[1] == f"source 0 from tax:k/1 sha256={'a' * 64} (fetched 08:00:00Z)"
    assert timing_line(job) == "validate: fetch tax 12 ms"
