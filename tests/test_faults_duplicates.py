"""Every kind of message delivered again: the validate, assemble, sign and
commit tasks and every transition event (alone, and in the batch its
commit sent) are republished raw (no Nats-Msg-Id,
or a fresh one, so JetStream's dedup does not drop them) after jobs completed
and while jobs run. Each job still has one ledger entry per event id, one
COMPLETED entry, one signed artifact and one signature record; nothing is
signed again, and the invariant checker finds nothing."""

from __future__ import annotations

import hashlib
import sqlite3
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from nats.js import JetStreamContext
from test_faults_common import (
    eventually,
    ledger_rows,
    resume_promptly,
    running_stack,
    signer_of,
    submit_text_jobs,
    wait_all,
)

from quire.invariants import check
from quire.jobs import state_name
from quire.pipeline import STAGE_NAMES
from quire.runtime import connect_nats
from quire.testing.consumers import pause, wait_quiet
from quire.testing.sealedstore import plaintext
from quire.type import job_pb2, queue_pb2
from quire.wire import SIGNATURE_HEADER, WireSigner
from quire.workqueue import (
    EVENTS_STREAM,
    WORK_STREAM,
    consumer_name,
    event_batch_subject,
    event_subject,
    work_subject,
)
from quire.workqueue.topology import EVENTS_CONSUMER

pytestmark = [pytest.mark.stack, pytest.mark.fault]

JOBS = 2
"""Jobs in each round (completed first, then running); two already show any
copy that lands on the wrong job."""
ENV = {
    "QUIRE_ACK_WAIT_SECONDS": "1",
    "QUIRE_BACKOFF_CAP_SECONDS": "1",
    "QUIRE_MAX_DELIVER": "20",
}
"""A copy taken in one fetch with its original comes back after the ack wait:
a short one keeps each stage's round to about a second (and the generous
delivery limit keeps a lease lapsed on a loaded machine from failing a job)."""
STAGE_SERVICES = ("validator", "assembler", "signer")


def _rows(data_dir: Path, service: str, query: str) -> list[Any]:
    path = data_dir / service / f"{service}.db"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return list(db.execute(query))


@dataclass(frozen=True)
class Message:
    key: str
    """What it is a copy of, so each is republished once per round."""
    subject: str
    data: bytes


def _messages(data_dir: Path, jobs: set[str]) -> list[Message]:
    """Every task and event these jobs have had so far, from where each is kept."""
    found: list[Message] = []
    for job, task, accepted in _rows(
        data_dir, "admission", "SELECT job, task, accepted_event FROM jobs"
    ):
        if job not in jobs:
            continue
        priority = queue_pb2.JobTask.FromString(task).priority or "interactive"
        found.append(Message(f"{job}.validate", work_subject("validate", priority), task))
        found.append(Message(f"{job}.accepted", event_subject("admission"), accepted))
    for service in STAGE_SERVICES:
        query = "SELECT job, outcome FROM stage_leases WHERE outcome IS NOT NULL"
        for job, data in _rows(data_dir, service, query):
            if job not in jobs:
                continue
            outcome = queue_pb2.StageOutcome.FromString(data)
            if outcome.HasField("next_task"):
                task = outcome.next_task.SerializeToString()
                found.append(Message(f"{job}.{service}.task", outcome.next_subject, task))
            for event in outcome.events:
                found.append(
                    Message(event.event_id, event_subject(service), event.SerializeToString())
                )
            if len(outcome.events) > 1:  # and as the one message a commit sends them in
                batch = queue_pb2.EventBatch(events=outcome.events).SerializeToString()
                found.append(Message(f"{job}.{service}.batch", event_batch_subject(service), batch))
    for event_id, job, data in _rows(data_dir, "audit", "SELECT event_id, job, event FROM ledger"):
        if job in jobs:
            actor = queue_pb2.TransitionEvent.FromString(data).actor.service
            producer = "audit" if actor in ("", "dead-letter") else actor
            found.append(Message(f"ledger.{event_id}", event_subject(producer), data))
    return found


class Duplicator:
    """Republishes every message it finds, twice: once without a message id,
    once with a fresh one."""

    def __init__(self, js: JetStreamContext, data_dir: Path) -> None:
        self._js = js
        self._data_dir = data_dir
        self._sent: set[str] = set()
        self.published = 0

    def _signer(self, subject: str) -> WireSigner:
        kind, name = subject.split(".")[1:3]
        return signer_of(self._data_dir, KEPT_BY[name] if kind == "work" else name)

    async def round(self, jobs: set[str]) -> int:
        fresh = [m for m in _messages(self._data_dir, jobs) if m.key not in self._sent]
        for message in fresh:
            # Genuine copies: signed by the service that produced the original.
            signature = self._signer(message.subject).header(message.subject, message.data)
            headers = {SIGNATURE_HEADER: signature}
            await self._js.publish(message.subject, message.data, headers=headers)
            await self._js.publish(
                message.subject,
                message.data,
                headers={**headers, "Nats-Msg-Id": uuid.uuid4().hex},
            )
            self._sent.add(message.key)
            self.published += 2
        return len(fresh)

    def kinds(self) -> set[str]:
        return {key.rsplit(".", 1)[-1] for key in self._sent}


async def _hold(js: JetStreamContext, stream: str, consumer: str) -> None:
    """Pause a durable consumer: its messages wait until it is resumed."""
    await pause(js, stream, consumer, minutes=3)


KEPT_BY = {
    "validate": "admission",
    "assemble": "validator",
    "sign": "assembler",
    "commit": "signer",
}


async def _handed_to(data_dir: Path, stage: str, jobs: set[str]) -> None:
    """Wait until every job's task for ``stage`` has been committed upstream."""
    service = KEPT_BY[stage]
    query = (
        "SELECT job FROM jobs"
        if service == "admission"
        else "SELECT job FROM stage_leases WHERE outcome IS NOT NULL"
    )

    async def ready() -> bool:
        return jobs <= {str(job) for (job,) in _rows(data_dir, service, query)}

    await eventually(ready, 30, f"tasks for {stage}")


def _artifacts(data_dir: Path) -> dict[str, tuple[str, int, int]]:
    """Job id -> (sha256, inode, mtime) of every signed artifact."""
    found = {}
    for path in (data_dir / "blobs" / "signed").rglob("*.pdf"):
        stat = path.stat()
        digest = hashlib.sha256(
            plaintext(data_dir, path.relative_to(data_dir / "blobs").as_posix())
        )
        digest = digest.hexdigest()
        found[path.stem] = (digest, stat.st_ino, stat.st_mtime_ns)
    return found


def _signatures(data_dir: Path) -> list[Any]:
    return sorted(
        _rows(
            data_dir, "signer", "SELECT job, sha256, signed_at, certificate_sha256 FROM signatures"
        )
    )


def _one_of_everything(data_dir: Path, jobs: dict[str, job_pb2.Job]) -> None:
    rows = ledger_rows(data_dir)
    assert len({event_id for _s, event_id, _j, _t in rows}) == len(rows)
    per_job = Counter((job, state) for _s, _e, job, state in rows)
    assert max(per_job.values()) == 1, "one entry per job and state (one generation)"
    completed = Counter(job for _s, _e, job, state in rows if state == "COMPLETED")
    assert completed == Counter(list(jobs)), "one COMPLETED entry per job"
    artifacts = _artifacts(data_dir)
    assert len(artifacts) == len(jobs), "one signed artifact per job"
    signatures = _signatures(data_dir)
    assert [s[0] for s in signatures] == sorted(jobs), "one signature record per job"
    for job, sha256, _signed_at, _cert in signatures:
        assert artifacts[str(job).removeprefix("jobs/")][0] == sha256
        assert jobs[str(job)].output_digest == sha256


async def _commit_deliveries(js: JetStreamContext) -> int:
    """Commit tasks delivered to audit so far (copies included)."""
    info = await js.consumer_info(WORK_STREAM, consumer_name("commit", "interactive"))
    return int(info.delivered.consumer_seq or 0)


async def test_duplicates_of_every_message_change_nothing(tmp_path: Path) -> None:
    async with running_stack(tmp_path / "stack", env=ENV) as running:
        data_dir = running.data_dir
        nc = await connect_nats(
            running.stack.nats_url, "quire-test-duplicates", **running.stack.nats_login()
        )
        js = nc.jetstream(timeout=10)
        try:
            # After completion: every message again, twice.
            done = await submit_text_jobs(running.client, tmp_path / "done", JOBS)
            first = await wait_all(running.client, done, timeout=60)
            assert {state_name(j.state) for j in first.values()} == {"COMPLETED"}
            await wait_quiet(js)
            ledger_before = ledger_rows(data_dir)
            artifacts_before = _artifacts(data_dir)
            signatures_before = _signatures(data_dir)
            commits_before = await _commit_deliveries(js)
            after = Duplicator(js, data_dir)
            assert await after.round(set(done)) > 0
            assert {"validate", "accepted", "task"} <= after.kinds()
            await wait_quiet(js)
            assert ledger_rows(data_dir) == ledger_before, "no entry added"
            assert _artifacts(data_dir) == artifacts_before, "nothing signed or written again"
            assert _signatures(data_dir) == signatures_before
            for service in STAGE_SERVICES:
                tokens = dict(_rows(data_dir, service, "SELECT job, token FROM stage_leases"))
                assert all(int(tokens[job]) >= 3 for job in done), f"{service} saw the copies"
            # Audit finds each job ended before taking a token: the deliveries show it.
            copies = await _commit_deliveries(js) - commits_before
            assert copies >= 2 * len(done), "audit saw the copies"

            # While running: every stage's queue held, so that each task waits
            # beside its copies and they are taken together; events held too.
            held = [consumer_name(stage, "interactive") for stage in STAGE_NAMES]
            for consumer in held:
                await _hold(js, WORK_STREAM, consumer)
            await _hold(js, EVENTS_STREAM, EVENTS_CONSUMER)
            commits_before = await _commit_deliveries(js)
            running_jobs = await submit_text_jobs(running.client, tmp_path / "running", JOBS)
            during = Duplicator(js, data_dir)
            for stage, consumer in zip(STAGE_NAMES, held, strict=True):
                await _handed_to(data_dir, stage, set(running_jobs))
                await during.round(set(running_jobs))
                if stage == "assemble":
                    # The assembler asks audit before acting: the events held
                    # so far (and their copies) go in together now.
                    await resume_promptly(js, EVENTS_STREAM, EVENTS_CONSUMER)
                await resume_promptly(js, WORK_STREAM, consumer)
            await resume_promptly(js, EVENTS_STREAM, EVENTS_CONSUMER)
            second = await wait_all(running.client, running_jobs, timeout=60)
            await during.round(set(running_jobs))
            await wait_quiet(js)
            assert {"validate", "accepted", "task", "COMPLETED"} <= during.kinds()
            for service in STAGE_SERVICES:
                tokens = dict(_rows(data_dir, service, "SELECT job, token FROM stage_leases"))
                assert all(int(tokens[job]) >= 3 for job in running_jobs), service
            copies = await _commit_deliveries(js) - commits_before
            assert copies >= 3 * len(running_jobs), "audit saw each commit task and its copies"
        finally:
            await nc.close()
        assert {state_name(j.state) for j in second.values()} == {"COMPLETED"}
        jobs = {**first, **second}
        _one_of_everything(data_dir, jobs)
        assert ledger_rows(data_dir)[: len(ledger_before)] == ledger_before, "history kept"
    report = check(data_dir)
    assert report.stopped and report.findings == [], report.findings
    assert dict(report.jobs_by_state) == {"COMPLETED": len(jobs)}
