"""Issue 21: the job resource counts its deliveries (``Job.deliveries``) and
says the current attempt (``Job.attempt``), from the ledger entries'
``attempt``: for each stage and generation the highest delivery count a
step recorded, summed; and the last step's.

Unit tests of audit's job view (the fold, over hand-made events), and a
private stack with the HTTP gateway where one stage is SIGKILLed once (the
supervisor restarts it and the delivery is retried): gRPC (audit's GetJob
and BatchGetJobs, admission's GetJob, WatchJob and ListJobs) and the HTTP
status agree with what the ledger's entries say."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from quire.audit.v1 import audit_service_pb2 as apb
from quire.audit.v1 import audit_service_pb2_grpc as agrpc
from quire.cli.args import bearer_metadata
from quire.client import AdmissionClient, PacketItem
from quire.faults import arm, fired
from quire.jobs import state_name
from quire.jobstatus import job_status_document
from quire.jobview import fold, step_stage
from quire.stack.supervisor import StackInfo
from quire.testing.faultpointstack import FaultPointStack
from quire.testing.pdfs import write_text_pdf
from quire.testing.quirecli import run_quire
from quire.transitions import EventFactory
from quire.type import job_pb2, queue_pb2

# -- unit: the fold -----------------------------------------------------------------

ADMISSION = EventFactory("admission", "a", "0")
VALIDATOR = EventFactory("validator", "v", "0")
ASSEMBLER = EventFactory("assembler", "as", "0")
SIGNER = EventFactory("signer", "s", "0")
AUDIT = EventFactory("audit", "au", "0")
OFFICE = EventFactory("dead-letter", "au", "0")
OPERATOR = EventFactory("operator", "ops", "0")


def _event(
    factory: EventFactory, before: str, after: str, attempt: int, generation: int = 0, **fields: Any
) -> queue_pb2.TransitionEvent:
    task = queue_pb2.JobTask(job="jobs/aa", tenant="t1", generation=generation)
    return factory.transition(task, before, after, attempt=attempt, lease_token=1, **fields)


def _counts(events: list[queue_pb2.TransitionEvent]) -> tuple[int, int]:
    facts = fold(events)
    assert facts is not None
    return facts.deliveries, facts.attempt


def test_a_plain_job_counts_one_delivery_per_stage() -> None:
    events = [
        _event(ADMISSION, "", "ACCEPTED", 1),
        _event(VALIDATOR, "ACCEPTED", "VALIDATING", 1),
        _event(VALIDATOR, "VALIDATING", "REVIEWING", 1),
        _event(VALIDATOR, "REVIEWING", "ASSEMBLING", 1),
        _event(ASSEMBLER, "ASSEMBLING", "SIGNING", 1),
        _event(SIGNER, "SIGNING", "COMMITTING", 1),
        _event(AUDIT, "COMMITTING", "COMPLETED", 1),
    ]
    assert _counts(events[:1]) == (0, 0), "acceptance is no stage step"
    assert _counts(events[:2]) == (1, 1)
    assert _counts(events[:4]) == (1, 1), "one delivery of validate, however many steps"
    assert _counts(events) == (4, 1)


def test_a_redelivered_stage_counts_its_highest_attempt() -> None:
    events = [
        _event(ADMISSION, "", "ACCEPTED", 1),
        # The entry event of the first delivery; the worker died, the second's is a duplicate.
        _event(VALIDATOR, "ACCEPTED", "VALIDATING", 1),
        _event(VALIDATOR, "VALIDATING", "REVIEWING", 3),
        _event(VALIDATOR, "REVIEWING", "ASSEMBLING", 3),
        _event(ASSEMBLER, "ASSEMBLING", "SIGNING", 2),
    ]
    assert _counts(events[:3]) == (3, 3)
    assert _counts(events) == (5, 2)
    # A late entry of an earlier delivery counts nothing new, but it is the last step.
    late = [*events, _event(VALIDATOR, "VALIDATING", "REVIEWING", 2)]
    assert _counts(late) == (5, 2)
    assert _counts([*events, _event(SIGNER, "SIGNING", "COMMITTING", 1)]) == (6, 1)


def test_a_review_decision_and_a_dead_letter_retry_are_no_deliveries() -> None:
    parked = [
        _event(ADMISSION, "", "ACCEPTED", 1),
        _event(VALIDATOR, "ACCEPTED", "VALIDATING", 2),
        _event(VALIDATOR, "VALIDATING", "REVIEWING", 2),
        _event(VALIDATOR, "REVIEWING", "NEEDS_REVIEW", 2),
    ]
    approved = [*parked, _event(OPERATOR, "NEEDS_REVIEW", "ASSEMBLING", 1, note="ok")]
    assert _counts(approved) == (2, 2)
    # The assembler's worker died on each of its 5 deliveries: the office ends the job.
    failed = [
        *approved,
        _event(OFFICE, "ASSEMBLING", "FAILED", 5, reason_code="RETRY_LIMIT_REACHED"),
    ]
    assert _counts(failed) == (7, 5)
    retried = [
        *failed,
        _event(OPERATOR, "FAILED", "ASSEMBLING", 1, 1, reason_code="DEAD_LETTER_RETRIED"),
    ]
    assert _counts(retried) == (7, 5)
    again = [
        *retried,
        _event(ASSEMBLER, "ASSEMBLING", "SIGNING", 1, 1),
        _event(SIGNER, "SIGNING", "COMMITTING", 1, 1),
        _event(AUDIT, "COMMITTING", "COMPLETED", 2, 1),
    ]
    assert _counts(again) == (7 + 1 + 1 + 2, 2), "a new generation's deliveries add up"


def test_step_stages() -> None:
    assert step_stage(_event(ADMISSION, "", "ACCEPTED", 1)) is None
    assert step_stage(_event(OPERATOR, "NEEDS_REVIEW", "ASSEMBLING", 1)) is None
    assert step_stage(_event(VALIDATOR, "REVIEWING", "ASSEMBLING", 1)) == "validate"
    assert step_stage(_event(AUDIT, "COMMITTING", "COMPLETED", 1)) == "commit"
    assert step_stage(_event(OFFICE, "SIGNING", "FAILED", 5)) == "sign"


def test_the_status_document_carries_the_counts() -> None:
    job = job_pb2.Job(name="jobs/aa", state=job_pb2.JOB_STATE_SIGNING, deliveries=5, attempt=2)
    document = job_status_document(job)
    assert (document["deliveries"], document["attempt"]) == (5, 2)
    fresh = job_status_document(job_pb2.Job(name="jobs/bb", state=job_pb2.JOB_STATE_ACCEPTED))
    assert (fresh["deliveries"], fresh["attempt"]) == (0, 0)


# -- the real stack -----------------------------------------------------------------


def _expected(entries: list[Any]) -> tuple[int, int]:
    """Deliveries and attempt as job.proto defines them, worked out here from
    the entries ListJobEvents returns (a second reading of the same rule)."""
    by_service = {"validator": "validate", "assembler": "assemble", "signer": "sign"}
    by_service["audit"] = "commit"
    working = {
        "ACCEPTED": "validate",
        "VALIDATING": "validate",
        "ASSEMBLING": "assemble",
        "SIGNING": "sign",
        "COMMITTING": "commit",
    }
    highest: dict[tuple[str, int], int] = {}
    last = 0
    for entry in entries:
        event = entry.event
        if event.actor.service == "dead-letter":
            stage = working.get(state_name(event.from_state))
        else:
            stage = by_service.get(event.actor.service)
        if stage is None or event.HasField("retirement"):
            continue
        key = (stage, event.generation)
        highest[key] = max(highest.get(key, 0), event.attempt)
        last = event.attempt
    return sum(highest.values()), last


async def _through_restarts(call: Callable[[], Any], timeout: float = 60) -> Any:
    """``call()`` awaited, asked again while a restarted service comes back."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await call()
        except grpc.aio.AioRpcError as error:
            if error.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN):
                raise
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.2)


async def _run_job(
    client: AdmissionClient, tmp_path: Path, label: str
) -> tuple[job_pb2.Job, job_pb2.Job]:
    """Submit a one-page job and follow it to its end: (SubmitJob's reply,
    the view WatchJob ended with)."""
    path = write_text_pdf(tmp_path / f"{label}.pdf", [f"attempts {label} {time.time_ns()}"])
    digest = (await _through_restarts(lambda: client.upload(path))).sha256
    submitted = await _through_restarts(lambda: client.submit([PacketItem("d", digest)]))
    final = await _through_restarts(lambda: client.wait(submitted.name, timeout=120), 150)
    assert state_name(final.state) == "COMPLETED", final.reason_code
    return submitted, final


async def _views(info: StackInfo, client: AdmissionClient, name: str) -> dict[str, Any]:
    """The job as every door shows it, and its ledger entries."""
    operator = bearer_metadata(info.operator_token())
    async with grpc.aio.insecure_channel(info.endpoints["audit"]) as channel:
        audit = agrpc.AuditServiceStub(channel)
        entries = (
            await audit.ListJobEvents(
                apb.ListJobEventsRequest(job=name, page_size=100), metadata=operator, timeout=30
            )
        ).entries
        audit_job = await audit.GetJob(apb.GetJobRequest(name=name), metadata=operator, timeout=30)
        batch = await audit.BatchGetJobs(
            apb.BatchGetJobsRequest(names=[name]), metadata=operator, timeout=30
        )
    listed = {job.name: job for job in (await client.list_jobs()).jobs}
    headers = {"Authorization": f"Bearer {info.token()}"}
    async with httpx.AsyncClient(base_url=info.gateway_url, headers=headers, timeout=30) as http:
        answer = await http.get(f"/v1/pdf/job/get/{name.removeprefix('jobs/')}")
    assert answer.status_code == 200, answer.status_code
    return {
        "entries": list(entries),
        "audit GetJob": audit_job,
        "audit BatchGetJobs": batch.jobs[0],
        "admission GetJob": await client.get_job(name),
        "admission ListJobs": listed[name],
        "http": answer.json(),
    }


def _assert_counts(views: dict[str, Any], watched: job_pb2.Job, expected: tuple[int, int]) -> None:
    assert _expected(views["entries"]) == expected, "the ledger records what the test expects"
    shown = {
        door: (view["deliveries"], view["attempt"])
        if door == "http"
        else (view.deliveries, view.attempt)
        for door, view in views.items()
        if door != "entries"
    }
    shown["admission WatchJob"] = (watched.deliveries, watched.attempt)
    assert shown == dict.fromkeys(shown, expected)


@pytest.mark.stack
@pytest.mark.fault
async def test_deliveries_and_attempt_follow_the_ledger_through_a_killed_stage(
    tmp_path: Path, fault_point_stack: FaultPointStack
) -> None:
    await fault_point_stack.settle()
    stack, info, faults = fault_point_stack.stack, fault_point_stack.info, fault_point_stack.faults
    async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
        # A plain job: validate, assemble, sign and commit, each delivered once.
        submitted, final = await _run_job(client, tmp_path, "plain")
        assert (submitted.deliveries, submitted.attempt) == (0, 0), "no stage step yet"
        views = await _views(info, client, final.name)
        _assert_counts(views, final, (4, 1))
        assert all(entry.event.attempt == 1 for entry in views["entries"])

        # The assembler dies before committing its work: the task is delivered
        # again and the job's ASSEMBLING -> SIGNING entry records attempt 2.
        restarts = stack.restarts("assembler")
        arm(faults, "assembler.before_commit")
        _submitted, final = await _run_job(client, tmp_path, "assembler")
        assert fired(faults, "assembler.before_commit")
        assert stack.restarts("assembler") == restarts + 1
        views = await _views(info, client, final.name)
        assembled = [
            e.event.attempt for e in views["entries"] if state_name(e.event.to_state) == "SIGNING"
        ]
        assert assembled == [2]
        _assert_counts(views, final, (5, 1))

        # Audit dies before committing the completion: the commit task's second
        # delivery completes the job, its last step at attempt 2.
        restarts = stack.restarts("audit")
        arm(faults, "audit.before_commit")
        _submitted, final = await _run_job(client, tmp_path, "audit")
        assert fired(faults, "audit.before_commit")
        for _ in range(100):
            if stack.restarts("audit") > restarts:
                break
            await asyncio.sleep(0.1)
        views = await _through_restarts(lambda: _views(info, client, final.name))
        _assert_counts(views, final, (5, 2))

        # `quire status` prints them, and --json has them.
        shown = await asyncio.to_thread(run_quire, stack.data_dir, "status", final.name)
        assert shown.returncode == 0, shown.stderr
        assert "deliveries 5, attempt 2" in shown.stdout
