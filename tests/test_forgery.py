"""Forged messages on the real stack sign, complete, reject and fail nothing.

The adversary is a process on the same network. Without credentials NATS
refuses it. With a service's NATS login it can publish on that service's
subjects, so every forgery is tried with a login that may publish there:
unsigned, signed with another service's identity key (a stolen key of a
stage that may not make that message), and — for tasks — signed by the right
producer but naming blobs of another job or tenant. Afterwards nothing
forged has taken effect, genuine work still completes, and ``quire check``
finds nothing."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import sqlite3
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import nats
import pytest
import pytest_asyncio
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from test_faults_common import (
    Running,
    eventually,
    ledger_rows,
    resume_promptly,
    running_stack,
    signer_of,
)

from quire.blobstore import assembled_key, signed_key, source_key
from quire.client import AdmissionClient, PacketItem, TenantAdminClient
from quire.invariants import check
from quire.jobgate import GATE_BUCKET
from quire.jobs import state_name
from quire.natsauth import audit_word_subject
from quire.runtime import connect_nats
from quire.testing.consumers import pause
from quire.testing.pdfs import write_form_pdf, write_text_pdf
from quire.transitions import EventFactory
from quire.type import job_pb2, queue_pb2
from quire.wire import SIGNATURE_HEADER, WireSigner
from quire.workqueue import (
    EVENTS_STREAM,
    PRIORITIES,
    WORK_STREAM,
    consumer_name,
    event_subject,
    work_subject,
)
from quire.workqueue.topology import EVENTS_CONSUMER

pytestmark = [pytest.mark.stack, pytest.mark.asyncio(loop_scope="module")]

ENV = {
    "QUIRE_ACK_WAIT_SECONDS": "3",
    "QUIRE_BACKOFF_CAP_SECONDS": "1",
    # A step that does not fit its job yet is kept aside after 3 s, not 2 minutes.
    "QUIRE_AUDIT_UNEXPLAINED_SECONDS": "3",
    # A task for a job audit never recorded is held 2 s a delivery, not 30.
    "QUIRE_AUTHORITY_PATIENCE_SECONDS": "2",
}
PRODUCER_OF_STAGE = {"validate": "admission", "assemble": "validator", "sign": "assembler"}
PRODUCER_OF_STAGE["commit"] = "signer"
STATES = (
    "ACCEPTED",
    "VALIDATING",
    "REVIEWING",
    "NEEDS_REVIEW",
    "ASSEMBLING",
    "SIGNING",
    "COMMITTING",
    "COMPLETED",
    "REJECTED",
    "FAILED",
    "CANCELLED",
)
SERVICES = ("admission", "validator", "assembler", "signer", "audit")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def running(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    async with running_stack(tmp_path_factory.mktemp("forgery"), ENV) as stack:
        yield stack


async def login(running: Running, user: str) -> NatsClient:
    return await connect_nats(
        running.stack.nats_url, f"forger-{user}", **running.stack.nats_login(user)
    )


def _rows(data_dir: Path, service: str, query: str, *args: Any) -> list[Any]:
    path = data_dir / service / f"{service}.db"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return list(db.execute(query, args))


def _task_of(running: Running, job: str) -> queue_pb2.JobTask:
    ((data,),) = _rows(running.data_dir, "admission", "SELECT task FROM jobs WHERE job = ?", job)
    return queue_pb2.JobTask.FromString(data)


async def _publish(
    js: JetStreamContext, subject: str, payload: bytes, signer: WireSigner | str | None
) -> None:
    """Publish with ``signer``'s signature, a made-up header (a str), or none."""
    headers = {"Nats-Msg-Id": uuid.uuid4().hex}
    if isinstance(signer, str):
        headers[SIGNATURE_HEADER] = signer
    elif signer is not None:
        headers[SIGNATURE_HEADER] = signer.header(subject, payload)
    await js.publish(subject, payload, headers=headers, timeout=5)


async def _drained(running: Running, stream: str, consumers: list[str]) -> None:
    """Wait until these consumers have settled everything they were given."""
    nc = await login(running, "operator")
    js = nc.jetstream()

    async def settled() -> bool:
        for consumer in consumers:
            info = await js.consumer_info(stream, consumer)
            if info.num_pending or info.num_ack_pending:
                return False
        return True

    try:
        await eventually(settled, 30, f"{consumers} settled")
    finally:
        await nc.close()


async def _pause_validation(running: Running) -> NatsClient:
    nc = await login(running, "operator")
    for priority in PRIORITIES:
        await pause(nc.jetstream(), WORK_STREAM, consumer_name("validate", priority), minutes=5)
    return nc


async def _resume_validation(nc: NatsClient) -> None:
    for priority in PRIORITIES:
        await resume_promptly(nc.jetstream(), WORK_STREAM, consumer_name("validate", priority))
    await nc.close()


def _refusals(running: Running, service: str) -> int:
    log = (running.data_dir / "logs" / f"{service}.log").read_text(errors="replace")
    return log.count("forged message on") + log.count("refused:")


async def test_an_anonymous_nats_connection_is_refused(running: Running) -> None:
    with pytest.raises(Exception) as refused:  # noqa: B017 - nats-py's error type varies
        nc = await asyncio.wait_for(
            nats.connect(
                running.stack.nats_url,
                allow_reconnect=False,
                max_reconnect_attempts=0,
                connect_timeout=2,
            ),
            timeout=15,
        )
        await nc.close()
    assert "uthorization" in repr(refused.value) or "NoServers" in repr(refused.value)


async def test_a_service_login_cannot_administer_streams_or_leave_its_subjects(
    running: Running,
) -> None:
    nc = await login(running, "validator")
    js = nc.jetstream(timeout=3)
    try:
        # Denied: a timeout (no reply ever comes) or an error reply. All are
        # tried at once, each still given the whole 3 s to answer.
        attempts = (
            js.purge_stream(WORK_STREAM),
            js.delete_stream(EVENTS_STREAM),
            js.delete_consumer(EVENTS_STREAM, EVENTS_CONSUMER),
            js.purge_stream(f"KV_{GATE_BUCKET}"),
            # The validator hands on assemble tasks only; it cannot make a sign task.
            js.publish(work_subject("sign", "interactive"), b"x", timeout=3),
        )
        results = await asyncio.gather(*attempts, return_exceptions=True)
        assert all(isinstance(result, Exception) for result in results), results
        operator = await login(running, "operator")
        try:
            info = await operator.jetstream().stream_info(WORK_STREAM)
        finally:
            await operator.close()
        assert info.config.name == WORK_STREAM
    finally:
        await nc.close()


async def test_forged_tasks_sign_nothing(running: Running, tmp_path: Path) -> None:
    client = running.client
    # Tenant A's job completes: its source and assembled packet are on disk.
    a_digest = (await client.upload(write_text_pdf(tmp_path / "a.pdf", ["tenant a"]))).sha256
    a_job = await client.submit([PacketItem("a", a_digest)])
    assert state_name((await client.wait(a_job.name, timeout=60)).state) == "COMPLETED"
    ((outcome,),) = _rows(
        running.data_dir,
        "assembler",
        "SELECT outcome FROM stage_leases WHERE job = ? AND outcome IS NOT NULL",
        a_job.name,
    )
    a_task = queue_pb2.StageOutcome.FromString(outcome).next_task
    assert a_task.assembled.blob_key
    # Tenant B's job waits before validation, so nothing genuine moves it.
    async with TenantAdminClient(
        running.info.endpoints["admission"], running.info.operator_token()
    ) as admin:
        reply = await admin.create_tenant(f"victim-{uuid.uuid4().hex[:6]}")
    async with AdmissionClient(running.info.endpoints["admission"], reply.secret) as b_client:
        b_client.tenant = reply.tenant.name  # type: ignore[attr-defined]
        b_digest = (await b_client.upload(write_text_pdf(tmp_path / "b.pdf", ["b"]))).sha256
        control = await _pause_validation(running)
        try:
            b_job = await b_client.submit([PacketItem("b", b_digest)])
            b_task = _task_of(running, b_job.name)
            before = {s: _refusals(running, s) for s in ("assembler", "signer", "audit")}
            forgeries = _forged_tasks(running, a_task, b_task)
            for user, subject, task, signer in forgeries:
                nc = await login(running, user)
                try:
                    await _publish(nc.jetstream(), subject, task.SerializeToString(), signer)
                finally:
                    await nc.close()
            await _drained(
                running,
                WORK_STREAM,
                [consumer_name(stage, "interactive") for stage in ("assemble", "sign", "commit")],
            )
            # Nothing forged was acted on: B's job is untouched, nothing signed for it.
            assert state_name((await b_client.get_job(b_job.name)).state) == "ACCEPTED"
            assert not (running.data_dir / "blobs" / signed_key(b_task.tenant, b_job.name)).exists()
            assert not _rows(
                running.data_dir, "signer", "SELECT 1 FROM stage_leases WHERE job = ?", b_job.name
            )
            assert not [row for row in ledger_rows(running.data_dir) if row[2] == b_job.name][1:]
            after = {s: _refusals(running, s) for s in before}
            assert sum(after.values()) - sum(before.values()) >= len(forgeries)
        finally:
            await _resume_validation(control)
        final = await b_client.wait(b_job.name, timeout=60)
        assert state_name(final.state) == "COMPLETED"


async def test_a_parked_job_cannot_be_moved_by_forgeries(running: Running, tmp_path: Path) -> None:
    """A job parked for review: a forged assemble task does not get it assembled or
    signed, and forged events do not reject it with a made-up reason."""
    client = running.client
    unsigned_lease = write_form_pdf(
        tmp_path / "lease.pdf",
        [
            "The renewal term is twelve months. Monthly rent: 1,200. Lead-based paint "
            "disclosure attached.",
            uuid.uuid4().hex,
        ],
        {"property_address": "1 Main St", "tenant_signature": "A. Tenant"},
    )
    digest = (await client.upload(unsigned_lease)).sha256
    job = await client.submit([PacketItem("lease", digest)], ruleset="lease-renewal")
    assert state_name((await client.wait(job.name, timeout=60)).state) == "NEEDS_REVIEW"
    task = _task_of(running, job.name)
    made_up = base64.b64encode(b"x" * 64).decode()
    nc = await login(running, "validator")
    try:
        js = nc.jetstream()
        subject = work_subject("assemble", "interactive")
        for signer in (None, f"validator.{made_up}", signer_of(running.data_dir, "assembler")):
            await _publish(js, subject, task.SerializeToString(), signer)
        reject = EventFactory("validator", "forger", "0").transition(
            task, "NEEDS_REVIEW", "REJECTED", attempt=1, lease_token=0, reason_code="MADE_UP"
        )
        for signer in (None, f"validator.{made_up}", signer_of(running.data_dir, "signer")):
            await _publish(js, event_subject("validator"), reject.SerializeToString(), signer)
    finally:
        await nc.close()
    await _drained(running, WORK_STREAM, [consumer_name("assemble", "interactive")])
    await _drained(running, EVENTS_STREAM, [EVENTS_CONSUMER])
    view = await client.get_job(job.name)
    assert state_name(view.state) == "NEEDS_REVIEW" and view.reason_code != "MADE_UP"
    assert not _rows(
        running.data_dir, "assembler", "SELECT 1 FROM stage_leases WHERE job = ?", job.name
    )
    assert not (running.data_dir / "blobs" / signed_key(task.tenant, job.name)).exists()


async def _a_packet_and_a_rejected_job(
    running: Running, tmp_path: Path
) -> tuple[str, job_pb2.Artifact, Any]:
    """A source digest, the packet its completed job's assembler handed on
    (the tenant's own, so a forged task's blob binding holds), and a job the
    validator rejected (a PDF cut in half)."""
    client = running.client
    good = (await client.upload(write_text_pdf(tmp_path / "ok.pdf", ["ok"]))).sha256
    done = await client.submit([PacketItem("ok", good)])
    assert state_name((await client.wait(done.name, timeout=60)).state) == "COMPLETED"
    ((outcome,),) = _rows(
        running.data_dir,
        "assembler",
        "SELECT outcome FROM stage_leases WHERE job = ? AND outcome IS NOT NULL",
        done.name,
    )
    packet = queue_pb2.StageOutcome.FromString(outcome).next_task.assembled
    whole = write_text_pdf(tmp_path / "cut.pdf", ["cut short"]).read_bytes()
    (tmp_path / "cut.pdf").write_bytes(whole[: len(whole) // 2])
    bad = (await client.upload(tmp_path / "cut.pdf")).sha256
    rejected = await client.submit([PacketItem("cut", bad)])
    assert state_name((await client.wait(rejected.name, timeout=60)).state) == "REJECTED"
    return good, packet, rejected


async def test_a_rejected_job_takes_no_step_after_its_ending(
    running: Running, tmp_path: Path
) -> None:
    """Even a task signed with the assembler's own key (a stolen key, or a replay)
    cannot get a job signed once the validator has rejected it."""
    client = running.client
    good, packet, rejected = await _a_packet_and_a_rejected_job(running, tmp_path)
    sign = _task_of(running, rejected.name)
    sign.assembled.CopyFrom(packet)  # the same tenant's real packet, so the binding holds
    nc = await login(running, "assembler")
    try:
        subject = work_subject("sign", "interactive")
        await _publish(
            nc.jetstream(),
            subject,
            sign.SerializeToString(),
            signer_of(running.data_dir, "assembler"),
        )
    finally:
        await nc.close()
    await _drained(running, WORK_STREAM, [consumer_name("sign", "interactive")])
    assert not (running.data_dir / "blobs" / signed_key(sign.tenant, rejected.name)).exists()
    assert state_name((await client.get_job(rejected.name)).state) == "REJECTED"
    log = (running.data_dir / "logs" / "signer.log").read_text(errors="replace")
    assert "the job ended REJECTED" in log


def _forged_tasks(
    running: Running, a_task: queue_pb2.JobTask, b_task: queue_pb2.JobTask
) -> list[tuple[str, str, queue_pb2.JobTask, WireSigner | str | None]]:
    """(login, subject, task, signer) of each forgery against B's job."""
    data_dir = running.data_dir
    stolen = signer_of(data_dir, "validator")  # a real key of a service not allowed there
    sign = queue_pb2.JobTask()
    sign.CopyFrom(b_task)
    # A's document under B's job: the signer would sign another tenant's packet.
    sign.assembled.CopyFrom(a_task.assembled)
    assert sign.assembled.blob_key == assembled_key(a_task.tenant, a_task.assembled.sha256)
    other_source = queue_pb2.JobTask()
    other_source.CopyFrom(b_task)
    other_source.sources[0].blob_key = source_key(a_task.tenant, a_task.sources[0].sha256)
    other_source.sources[0].sha256 = a_task.sources[0].sha256
    commit = queue_pb2.JobTask()
    commit.CopyFrom(b_task)  # an "empty" commit task: no artifact at all
    sign_subject = work_subject("sign", "interactive")
    assemble_subject = work_subject("assemble", "interactive")
    commit_subject = work_subject("commit", "interactive")
    return [
        ("assembler", sign_subject, sign, None),
        ("assembler", sign_subject, sign, stolen),
        ("assembler", sign_subject, sign, signer_of(data_dir, "assembler")),
        ("validator", assemble_subject, other_source, None),
        ("validator", assemble_subject, other_source, signer_of(data_dir, "validator")),
        ("signer", commit_subject, commit, None),
        ("signer", commit_subject, commit, stolen),
        ("signer", commit_subject, commit, f"signer.{base64.b64encode(b'x' * 64).decode()}"),
    ]


async def test_forged_events_of_every_kind_change_nothing(running: Running, tmp_path: Path) -> None:
    client = running.client
    digest = (await client.upload(write_text_pdf(tmp_path / "e.pdf", ["events"]))).sha256
    control = await _pause_validation(running)
    ghost = f"jobs/{uuid.uuid4().hex}"  # a job admission never accepted
    try:
        job = await client.submit([PacketItem("e", digest)])
        task = _task_of(running, job.name)
        ghost_task = queue_pb2.JobTask()
        ghost_task.CopyFrom(task)
        ghost_task.job = ghost
        stolen = signer_of(running.data_dir, "assembler")
        published = 0
        for producer in SERVICES:
            nc = await login(running, producer)
            try:
                for target in (task, ghost_task):
                    for to_state in STATES:
                        event = EventFactory(producer, "forger", "0").transition(
                            target, "", to_state, attempt=1, lease_token=0
                        )
                        event.event_id = f"forged-{uuid.uuid4().hex}"
                        # Unsigned, claiming the producer with a made-up signature,
                        # and signed with another stage's real key.
                        made_up = f"{producer}.{base64.b64encode(b'x' * 64).decode()}"
                        for signer in (None, made_up, stolen if producer != "assembler" else None):
                            await _publish(
                                nc.jetstream(),
                                event_subject(producer),
                                event.SerializeToString(),
                                signer,
                            )
                            published += 1
            finally:
                await nc.close()
        await _drained(running, EVENTS_STREAM, [EVENTS_CONSUMER])
        forged = [row for row in ledger_rows(running.data_dir) if row[1].startswith("forged-")]
        assert forged == [] and published > 100
        assert not _rows(running.data_dir, "audit", "SELECT 1 FROM jobs WHERE job = ?", ghost)
        assert state_name((await client.get_job(job.name)).state) == "ACCEPTED"
    finally:
        await _resume_validation(control)
    assert state_name((await client.wait(job.name, timeout=60)).state) == "COMPLETED"


async def test_a_forged_gate_entry_does_not_refuse_a_cancel(
    running: Running, tmp_path: Path
) -> None:
    client = running.client
    digest = (await client.upload(write_text_pdf(tmp_path / "g.pdf", ["gate"]))).sha256
    control = await _pause_validation(running)
    try:
        job = await client.submit([PacketItem("g", digest)])
        nc = await login(running, "validator")
        try:
            js = nc.jetstream(timeout=3)
            entry = f"$KV.{GATE_BUCKET}.{job.name.removeprefix('jobs/')}"
            # "Signing has started", as an impostor would write it: under the
            # signer's name the server refuses it; under the validator's own
            # name it is stored, but no reader takes it for the signer's.
            with pytest.raises(Exception):  # noqa: B017 - a refusal or no answer
                await js.publish(f"{entry}.signer.s0", b"SIGNING|0|signer.Zm9yZ2Vk")
            await js.publish(f"{entry}.validator.s0", b"SIGNING|0|signer.Zm9yZ2Vk")
            await js.publish(f"{entry}.validator.g0", b"REJECTED|0|validator.Zm9yZ2Vk")
        finally:
            await nc.close()
        cancelled = await client.cancel(job.name)
        assert state_name(cancelled.state) == "CANCELLED"
    finally:
        await _resume_validation(control)
    final = await client.wait(job.name, timeout=60)
    assert state_name(final.state) == "CANCELLED"


async def test_after_the_attacks_the_checker_finds_nothing(running: Running) -> None:
    async def idle() -> bool:
        report = check(running.data_dir, stopped=False)
        return report.ok

    await eventually(idle, 60, "quire check clean", every=0.5)


async def _publish_as(
    running: Running, producer: str, events: list[queue_pb2.TransitionEvent]
) -> None:
    """Publish ``events`` with ``producer``'s own login and identity key: a
    producer taken over, whose every message verifies."""
    nc = await login(running, producer)
    try:
        for event in events:
            subject = event_subject(producer)
            await _publish(
                nc.jetstream(),
                subject,
                event.SerializeToString(),
                signer_of(running.data_dir, producer),
            )
    finally:
        await nc.close()


def _refused_rows(running: Running) -> list[tuple[str, str, str, str]]:
    return _rows(
        running.data_dir,
        "audit",
        "SELECT job, producer, kind, to_state FROM refused_events ORDER BY job, kind",
    )


async def test_validly_signed_steps_that_do_not_fit_the_history_stay_out_of_the_ledger(
    running: Running, tmp_path: Path
) -> None:
    """A taken-over validator and signer, signing with their own keys: a
    rejection after COMPLETED, a step naming another tenant, a commit for a job
    never accepted and one before its stage's turn. None is appended; each is
    a finding, counted and alerted on; genuine work goes on, even the step
    whose id a forgery took first."""
    client = running.client
    digest = (await client.upload(write_text_pdf(tmp_path / "h1.pdf", ["history"]))).sha256
    done = await client.submit([PacketItem("h1", digest)])
    assert state_name((await client.wait(done.name, timeout=60)).state) == "COMPLETED"
    other = (await client.upload(write_text_pdf(tmp_path / "h2.pdf", ["waiting"]))).sha256
    control = await _pause_validation(running)
    try:
        waiting = await client.submit([PacketItem("h2", other)])
        finished, accepted = _task_of(running, done.name), _task_of(running, waiting.name)
        ghost = queue_pb2.JobTask()
        ghost.CopyFrom(accepted)
        ghost.job = f"jobs/{uuid.uuid4().hex}"
        validator = EventFactory("validator", "taken-over", "0")
        signer = EventFactory("signer", "taken-over", "0")
        rejection = validator.transition(
            finished,
            "VALIDATING",
            "REJECTED",
            attempt=1,
            lease_token=0,
            reason_code="MALFORMED_PDF",
        )
        elsewhere = validator.transition(
            accepted, "ACCEPTED", "VALIDATING", attempt=1, lease_token=0
        )
        elsewhere.tenant = "someone-else"
        early = signer.transition(accepted, "SIGNING", "COMMITTING", attempt=1, lease_token=0)
        unknown = signer.transition(ghost, "SIGNING", "COMMITTING", attempt=1, lease_token=0)
        await _publish_as(running, "validator", [rejection, elsewhere])
        await _publish_as(running, "signer", [early, unknown])
        expected = sorted(
            [
                (done.name, "validator", "AFTER_END", "REJECTED"),
                (waiting.name, "validator", "OTHER_TENANT", "VALIDATING"),
                (waiting.name, "signer", "OUT_OF_TURN", "COMMITTING"),
                (ghost.job, "signer", "UNKNOWN_JOB", "COMMITTING"),
            ]
        )

        ours = {done.name, waiting.name, ghost.job}

        async def all_kept_aside() -> bool:
            return sorted(r for r in _refused_rows(running) if r[0] in ours) == expected

        await eventually(all_kept_aside, 30, "the four steps kept aside")
        entries = ledger_rows(running.data_dir)
        assert not [e for e in entries if e[2] == ghost.job]
        assert [e[3] for e in entries if e[2] == done.name][-1] == "COMPLETED"
        assert [e[3] for e in entries if e[2] == waiting.name] == ["ACCEPTED"]
        assert state_name((await client.get_job(done.name)).state) == "COMPLETED"
        assert state_name((await client.get_job(waiting.name)).state) == "ACCEPTED"
        metrics = httpx.get(f"http://{running.info.metrics_endpoints['audit']}/metrics").text
        for kind in ("AFTER_END", "OTHER_TENANT", "OUT_OF_TURN", "UNKNOWN_JOB"):
            assert f'quire_audit_events_refused_total{{kind="{kind}"}} 1.0' in metrics, kind
        report = check(running.data_dir, stopped=False)
        refused = sorted(
            (f.job, f.detail)
            for f in report.findings
            if f.kind == "ledger_event_refused" and f.job in ours
        )
        assert refused == sorted(
            (job, f"{kind} {state} by {by}") for job, by, kind, state in expected
        )
    finally:
        await _resume_validation(control)
    # The genuine commit step carries the id the early forgery used: it still lands.
    assert state_name((await client.wait(waiting.name, timeout=60)).state) == "COMPLETED"


async def _forge_word(running: Running, task: queue_pb2.JobTask) -> None:
    """Audit's word that the task's job reached signing, forged into the
    signer's inbox: signed with the assembler's key, and unsigned. (Only audit
    may publish there; the operator login stands in for a way in.)"""
    word = job_pb2.Job(
        name=task.job,
        tenant=task.tenant,
        manifest_digest=task.manifest_digest,
        state="JOB_STATE_SIGNING",
    ).SerializeToString()
    inbox = audit_word_subject("signer")
    stolen = signer_of(running.data_dir, "assembler")
    operator = await login(running, "operator")
    try:
        await operator.publish(inbox, word)
        await operator.publish(inbox, word, headers={SIGNATURE_HEADER: stolen.header(inbox, word)})
        await operator.flush()
    finally:
        await operator.close()


async def _forge_sign_task(running: Running, task: queue_pb2.JobTask) -> None:
    """What a taken-over assembler does: try to clear the job's gate entries
    (the server refuses), say audit's word itself, then send a sign task
    signed with its own key."""
    await _forge_word(running, task)
    nc = await login(running, "assembler")
    try:
        kv = await nc.jetstream(timeout=2).key_value(GATE_BUCKET)
        for claim in ("admission.c0", "validator.g0", "assembler.g0"):
            with contextlib.suppress(Exception):
                await kv.purge(f"{task.job.removeprefix('jobs/')}.{claim}")
        subject = work_subject("sign", "interactive")
        await _publish(
            nc.jetstream(),
            subject,
            task.SerializeToString(),
            signer_of(running.data_dir, "assembler"),
        )
    finally:
        await nc.close()


async def test_a_taken_over_assembler_gets_nothing_signed_that_audit_did_not_record(
    running: Running, tmp_path: Path
) -> None:
    """Gate entries cleared, audit's word forged and sign tasks signed with
    the assembler's own key: for a rejected job, a cancelled one, one never
    accepted, and another tenant's job under the attacker's tenant, the
    signer asks audit first and signs none of them. No step is recorded for
    the victims' jobs."""
    client = running.client
    good, packet, rejected = await _a_packet_and_a_rejected_job(running, tmp_path)
    async with TenantAdminClient(
        running.info.endpoints["admission"], running.info.operator_token()
    ) as admin:
        victim_tenant = await admin.create_tenant(f"victim-{uuid.uuid4().hex[:8]}")
    control = await _pause_validation(running)
    try:
        cancelled = await client.submit([PacketItem("c", good)])
        assert state_name((await client.cancel(cancelled.name)).state) == "CANCELLED"
        async with AdmissionClient(
            running.info.endpoints["admission"], victim_tenant.secret
        ) as victim:
            theirs = await victim.submit(
                [PacketItem("v", (await victim.upload(tmp_path / "ok.pdf")).sha256)]
            )
        forged: list[queue_pb2.JobTask] = []
        for name in (rejected.name, cancelled.name, f"jobs/{uuid.uuid4().hex}", theirs.name):
            task = _task_of(running, rejected.name)
            task.job = name
            task.assembled.CopyFrom(packet)  # the attacker's own tenant's real packet
            forged.append(task)
        for task in forged:
            await _forge_sign_task(running, task)
        await _drained(running, WORK_STREAM, [consumer_name("sign", "interactive")])
        for task in forged:
            assert not (running.data_dir / "blobs" / signed_key(task.tenant, task.job)).exists()
        victims = {rejected.name, cancelled.name, theirs.name}
        stepped = [e for e in ledger_rows(running.data_dir) if e[2] in victims]
        assert not [e for e in stepped if e[3] in ("SIGNING", "COMMITTING", "COMPLETED")]
        log = (running.data_dir / "logs" / "signer.log").read_text(errors="replace")
        assert "does not match the job audit recorded" in log
        assert "the job ended" in log
    finally:
        await _resume_validation(control)
    final = await client.get_job(rejected.name)
    assert state_name(final.state) == "REJECTED"
