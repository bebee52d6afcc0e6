"""Operations on dead letters: `quire dlq list|retry|discard` on the real stack.

A job is made to fail for real: a fault point SIGKILLs the stage's process on
every delivery until JetStream gives the message up; the dead-letter office
ends the job FAILED and the dead-letter book records it. An operator then
retries it (a new generation, recorded in the ledger, that completes) or
discards it (it stays FAILED).

The tests share one stack (each makes its own jobs and arms its own fault
point, and counts only the restarts it caused).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from test_faults_common import kept_armed

from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
from quire.cli.args import bearer_metadata
from quire.client import AdmissionClient, PacketItem
from quire.grpcstatus import reason_of
from quire.jobs import state_name
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.pdfs import write_text_pdf
from quire.testing.quirecli import run_quire
from quire.tls import aio_channel

pytestmark = pytest.mark.stack


async def _events(info: StackInfo, job: str) -> list[audit_service_pb2.LedgerEntry]:
    async with aio_channel(info.endpoints["audit"], None) as channel:
        reply = await audit_service_pb2_grpc.AuditServiceStub(channel).ListJobEvents(
            audit_service_pb2.ListJobEventsRequest(job=job, page_size=100),
            metadata=bearer_metadata(info.operator_token()),
        )
    return list(reply.entries)


async def _until_listed(data_dir: Path, job: str, timeout: float = 30.0) -> str:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        listing = await asyncio.to_thread(run_quire, data_dir, "dlq", "list")
        assert listing.returncode == 0, listing.stderr
        if job in listing.stdout:
            return listing.stdout
        assert asyncio.get_running_loop().time() < deadline, listing.stdout
        await asyncio.sleep(0.3)


@pytest.fixture(scope="module")
def dying_stack(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Stack, StackInfo, Path]]:
    directory = tmp_path_factory.mktemp("dying")
    faults = directory / "faults"
    stack = Stack(
        directory / "stack",
        env={
            "QUIRE_FAULTS_DIR": str(faults),
            "QUIRE_MAX_DELIVER": "2",
            "QUIRE_ACK_WAIT_SECONDS": "1",
            "QUIRE_BACKOFF_BASE_SECONDS": "0.1",
            "QUIRE_DRAIN_SECONDS": "3",
        },
    )
    info = stack.start()
    try:
        yield stack, info, faults
    finally:
        stack.stop()


async def test_a_dead_lettered_job_retried_by_an_operator_completes_in_a_new_generation(
    dying_stack: tuple[Stack, StackInfo, Path], tmp_path: Path
) -> None:
    stack, info, faults = dying_stack
    async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
        digest = (await client.upload(write_text_pdf(tmp_path / "d.pdf", ["retry me"]))).sha256
        restarts = stack.restarts("signer")
        async with kept_armed(faults, "signer.before_commit"):
            name = (await client.submit([PacketItem("d", digest)])).name
            failed = await client.wait(name, timeout=90)
        assert (state_name(failed.state), failed.reason_code) == ("FAILED", "RETRY_LIMIT_REACHED")
        assert stack.restarts("signer") - restarts >= 2, "the signer really died on each delivery"

        listing = await _until_listed(stack.data_dir, name)
        line = next(row for row in listing.splitlines() if name in row)
        assert " sign " in f" {line} " and "RETRY_LIMIT_REACHED" in line and " dead " in line

        retried = await asyncio.to_thread(run_quire, stack.data_dir, "dlq", "retry", name)
        assert retried.returncode == 0, retried.stderr
        assert "retried" in retried.stdout and "generation=0" in retried.stdout
        done = await client.wait(name, timeout=60)
        assert state_name(done.state) == "COMPLETED"
        again = await asyncio.to_thread(run_quire, stack.data_dir, "dlq", "retry", name)
        assert again.returncode == 0, "asking twice is harmless"

    entries = await _events(info, name)
    moves = [
        (state_name(e.event.from_state), state_name(e.event.to_state), e.event.generation)
        for e in entries
    ]
    retry_at = moves.index(("FAILED", "SIGNING", 1))
    retry = entries[retry_at].event
    assert retry.reason_code == "DEAD_LETTER_RETRIED" and retry.actor.service == "operator"
    assert moves[retry_at - 1][1] == "FAILED", "the retry follows the failure it reopens"
    assert moves[retry_at + 1 :] == [("SIGNING", "COMMITTING", 1), ("COMMITTING", "COMPLETED", 1)]
    assert [m[1] for m in moves].count("COMPLETED") == 1
    signed = list((stack.data_dir / "blobs" / "signed").rglob("*.pdf"))  # none by the others
    assert len(signed) == 1, "the retry reused the artifact of the failed attempt"

    still_listed = await asyncio.to_thread(run_quire, stack.data_dir, "dlq", "list")
    assert name not in still_listed.stdout, "a retried letter leaves the open list"
    everything = await asyncio.to_thread(run_quire, stack.data_dir, "dlq", "list", "--all")
    assert name in everything.stdout and "retried" in everything.stdout


async def test_a_discarded_dead_letter_leaves_the_job_failed_and_cannot_be_retried(
    dying_stack: tuple[Stack, StackInfo, Path], tmp_path: Path
) -> None:
    stack, info, faults = dying_stack
    async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
        digest = (await client.upload(write_text_pdf(tmp_path / "d.pdf", ["discard"]))).sha256
        restarts = stack.restarts("validator")
        async with kept_armed(faults, "validator.before_commit"):
            name = (await client.submit([PacketItem("d", digest)])).name
            failed = await client.wait(name, timeout=90)
        assert state_name(failed.state) == "FAILED"
        assert stack.restarts("validator") - restarts >= 2, (
            "the validator really died on each delivery"
        )
        await _until_listed(stack.data_dir, name)

        discarded = await asyncio.to_thread(run_quire, stack.data_dir, "dlq", "discard", name)
        assert discarded.returncode == 0, discarded.stderr
        assert "discarded" in discarded.stdout
        refused = await asyncio.to_thread(run_quire, stack.data_dir, "dlq", "retry", name)
        assert refused.returncode == 5 and "DEAD_LETTER_RESOLVED" in refused.stderr
        await asyncio.sleep(1.0)
        assert state_name((await client.get_job(name)).state) == "FAILED"


async def test_dead_letter_operations_need_an_operator_and_a_known_job(
    dying_stack: tuple[Stack, StackInfo, Path],
) -> None:
    _stack, info, _faults = dying_stack
    async with aio_channel(info.endpoints["audit"], None) as channel:
        stub = audit_service_pb2_grpc.AuditServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as anonymous:
            await stub.ListDeadLetters(audit_service_pb2.ListDeadLettersRequest())
        assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED
        tenant = (("authorization", f"Bearer {info.token()}"),)
        with pytest.raises(grpc.aio.AioRpcError) as not_operator:
            await stub.ListDeadLetters(audit_service_pb2.ListDeadLettersRequest(), metadata=tenant)
        assert not_operator.value.code() == grpc.StatusCode.UNAUTHENTICATED
        operator = (("authorization", f"Bearer {info.operator_token()}"),)
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await stub.RetryDeadLetter(
                audit_service_pb2.RetryDeadLetterRequest(job="jobs/0123456789abcdef"),
                metadata=operator,
            )
        assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
        assert reason_of(unknown.value) == "DEAD_LETTER_NOT_FOUND"
