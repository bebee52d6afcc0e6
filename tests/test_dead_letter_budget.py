"""A dead-lettered job past its deadline, retried with a new budget
(``quire dlq retry JOB --budget 30s``), on the session's stack.

The job names a source by reference and has a short budget; its source
system refuses the first fetch (403), so the validator ends it FAILED
(``SOURCE_REFUSED``) and it is dead-lettered. Once its deadline has passed
and the system answers again, a retry without a budget fails again at once
(``DEADLINE_EXCEEDED``, no fetch made), and the CLI says why and what to do;
a retry with ``--budget`` gives it a new deadline, recorded on the retry's
ledger entry as the operator's action, and the job completes, signed once.
A budget that is not positive or longer than the longest a job may ask for
is refused with its reason code and changes nothing.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2

from quire.audit.v1 import audit_service_pb2 as apb
from quire.audit.v1 import audit_service_pb2_grpc as agrpc
from quire.cli.args import bearer_metadata
from quire.client import AdmissionClient, PacketItem, TenantAdminClient
from quire.grpcstatus import details_of, reason_of
from quire.jobs import job_id, state_name
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.pdfs import write_text_pdf
from quire.testing.quirecli import run_quire
from quire.testing.sourcerecords import TAX_RECORD
from quire.testing.sourceserver import SourceServer
from quire.tls import aio_channel

pytestmark = pytest.mark.stack

BUDGET_SECONDS = 6.5
"""Just above the shortest a job may ask for (the 5 s reserve plus one second)."""
NEW_BUDGET_SECONDS = 30


async def _entries(info: StackInfo, job: str) -> list[apb.LedgerEntry]:
    async with aio_channel(info.endpoints["audit"], None) as channel:
        reply = await agrpc.AuditServiceStub(channel).ListJobEvents(
            apb.ListJobEventsRequest(job=job, page_size=200),
            metadata=bearer_metadata(info.operator_token()),
            timeout=30,
        )
    return list(reply.entries)


async def _dead_again(data_dir: Path, job: str, generation: int, timeout: float = 30) -> None:
    """Until ``quire dlq list`` shows the job's letter of ``generation``, open."""
    deadline = time.monotonic() + timeout
    while True:
        listing = await asyncio.to_thread(run_quire, data_dir, "dlq", "list", "--json")
        assert listing.returncode == 0, listing.stderr
        letters = [
            letter
            for letter in json.loads(listing.stdout)["dead_letters"]
            if letter["job"] == job and letter.get("generation", 0) == generation
        ]
        if letters:
            return
        assert time.monotonic() < deadline, listing.stdout
        await asyncio.sleep(0.2)


async def _refused_budgets(info: StackInfo, job: str) -> None:
    """Budgets that are not positive or too long: INVALID_ARGUMENT, nothing done."""
    cases = [
        (duration_pb2.Duration(seconds=0), "BUDGET_TOO_SHORT"),
        (duration_pb2.Duration(seconds=-5), "BUDGET_TOO_SHORT"),
        (duration_pb2.Duration(seconds=1, nanos=-1), "BUDGET_TOO_SHORT"),  # not a duration
        (duration_pb2.Duration(seconds=10 * 86400), "BUDGET_TOO_LONG"),
    ]
    async with aio_channel(info.endpoints["audit"], None) as channel:
        audit = agrpc.AuditServiceStub(channel)
        for budget, reason in cases:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await audit.RetryDeadLetter(
                    apb.RetryDeadLetterRequest(
                        job=job, request_id=str(uuid.uuid4()), budget=budget
                    ),
                    metadata=bearer_metadata(info.operator_token()),
                    timeout=30,
                )
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, budget
            assert reason_of(refused.value) == reason
            assert [v[0] for v in details_of(refused.value).violations] == ["budget"]


async def test_a_job_dead_lettered_past_its_deadline_completes_with_a_new_budget(
    stack: Stack, tmp_path: Path
) -> None:
    info = StackInfo.read(stack.data_dir)
    data_dir = Path(info.data_dir)
    tag = uuid.uuid4().hex[:6]
    tax = f"tax-{tag}"
    with SourceServer() as server:
        server.put_json(tax, "records/NL-1", TAX_RECORD)
        server.behave(tax, status=403)
        async with TenantAdminClient(info.endpoints["admission"], info.operator_token()) as admin:
            made = await admin.create_tenant(f"budget-{tag}")
            await admin.put_source_system(
                made.tenant.name,
                "tax",
                base_url=server.base_url(tax),
                timeout=2.0,
                schema="tax-record@1",
            )
        async with AdmissionClient(info.endpoints["admission"], made.secret) as client:
            cover = write_text_pdf(tmp_path / "cover.pdf", [f"Cover {uuid.uuid4().hex}"])
            digest = (await client.upload(cover)).sha256
            accepted = await client.submit(
                [PacketItem("cover", digest), PacketItem.reference("tax", "tax", "records/NL-1")],
                budget=BUDGET_SECONDS,
            )
            name = accepted.name
            failed = await client.wait(name, timeout=60)
            assert (state_name(failed.state), failed.reason_code) == ("FAILED", "SOURCE_REFUSED")
            await _dead_again(data_dir, name, 0)

            # Past its deadline, with the system answering again.
            old_deadline = accepted.deadline.ToDatetime().timestamp()
            await asyncio.sleep(max(0.0, old_deadline - time.time()) + 0.5)
            server.behave(tax)
            calls_before = len(server.calls(tax))

            as_before = await asyncio.to_thread(run_quire, data_dir, "dlq", "retry", name)
            assert as_before.returncode == 0, as_before.stderr
            assert " retried " in as_before.stdout
            assert f"deadline={accepted.deadline.ToJsonString()}" in as_before.stdout
            assert "DEADLINE_EXCEEDED" in as_before.stdout and "--budget" in as_before.stdout
            again = await client.wait(name, timeout=60)
            assert (state_name(again.state), again.reason_code) == ("FAILED", "DEADLINE_EXCEEDED")
            assert len(server.calls(tax)) == calls_before, "failed at once, before any fetch"
            await _dead_again(data_dir, name, 1)

            await _refused_budgets(info, name)
            usage = await asyncio.to_thread(
                run_quire, data_dir, "dlq", "retry", name, "--budget", "0s"
            )
            assert usage.returncode == 2 and "Traceback" not in usage.stderr, usage.stderr

            retried = await asyncio.to_thread(
                run_quire,
                data_dir,
                "dlq",
                "retry",
                name,
                "--budget",
                f"{NEW_BUDGET_SECONDS}s",
                "--json",
            )
            assert retried.returncode == 0, retried.stderr
            record = json.loads(retried.stdout)["dead_letter"]
            assert record["status"] == "retried" and record["generation"] == 1
            done = await client.wait(name, timeout=60)
            assert state_name(done.state) == "COMPLETED", done.reason_code
            new_deadline = done.deadline.ToDatetime().timestamp()
            assert record["deadline"] == done.deadline.ToJsonString()
            assert new_deadline > old_deadline + NEW_BUDGET_SECONDS / 2
            assert len(server.calls(tax)) == calls_before + 1, "fetched once, in the new budget"

    entries = await _entries(info, name)
    retries = [e.event for e in entries if e.event.reason_code == "DEAD_LETTER_RETRIED"]
    assert [r.generation for r in retries] == [1, 2]
    plain, budgeted = retries
    assert plain.reason_detail == "" and plain.deadline == accepted.deadline
    assert budgeted.actor.service == "operator" and budgeted.actor.instance
    assert budgeted.reason_detail == "NEW_BUDGET"
    given = budgeted.deadline.ToNanoseconds() - budgeted.occur_time.ToNanoseconds()
    assert given == NEW_BUDGET_SECONDS * 10**9, "the budget, read from the entry's bytes"
    assert budgeted.deadline == done.deadline
    later = [e.event for e in entries if e.event.generation == 2]
    assert all(event.deadline == budgeted.deadline for event in later), "every stage's entry"
    assert [state_name(e.event.to_state) for e in entries].count("COMPLETED") == 1
    signed = [p for p in (data_dir / "blobs" / "signed").rglob("*") if job_id(name) in p.name]
    assert len(signed) == 1, signed
