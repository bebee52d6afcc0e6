"""Issue 21: a cancel that loses the race with signing reports the job's
current state as audit records it — not the stale state audit showed
before it caught up — and says plainly that the cancel lost.

The loss is made deterministic on a private stack: the job is held before
signing until audit shows it SIGNING (the signer asks audit before acting);
then audit's events consumer (and its commit queue) is paused, the job is let
go, and the signer claims it in the job gate and signs while audit still
shows SIGNING. The cancel is
sent then; audit's events flow again a moment later. The reply must be what
audit then records (SIGNING, or COMMITTING once audit has recorded the
signer's event too; the commit queue stays paused, so COMMITTING holds still
while the later answers are compared), and every front end must say the cancel
lost: the Python client, ``quire cancel`` and the HTTP gateway."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from nats.js import JetStreamContext
from test_faults_common import BASE_ENV, eventually, ledger_rows, resume_promptly

from quire.client import AdmissionClient, Cancellation, PacketItem
from quire.jobgate import GATE_BUCKET
from quire.jobs import job_id, state_name
from quire.runtime import connect_nats
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.consumers import pause
from quire.testing.pdfs import write_text_pdf
from quire.testing.quirecli import run_quire
from quire.workqueue import EVENTS_STREAM, WORK_STREAM, consumer_name
from quire.workqueue.topology import EVENTS_CONSUMER

pytestmark = [pytest.mark.stack, pytest.mark.fault]


@asynccontextmanager
async def _stack_with_gateway(directory: Path) -> AsyncIterator[tuple[Stack, StackInfo]]:
    # The job must rest at COMMITTING in audit's ledger while completions are
    # paused: the signer sends its events on the events stream, not with its
    # commit task (which the pause holds back).
    stack = Stack(
        directory,
        env=dict(BASE_ENV),
        gateway=True,
        service_env={"signer": {"QUIRE_EVENTS_WITH_COMMIT": "0"}},
    )
    info = await asyncio.to_thread(stack.start)
    try:
        yield stack, info
    finally:
        await asyncio.to_thread(stack.stop)


def _signer_committed(data_dir: Path, job: str) -> bool:
    path = data_dir / "signer" / "signer.db"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        row = db.execute(
            "SELECT 1 FROM stage_leases WHERE job = ? AND outcome IS NOT NULL", (job,)
        ).fetchone()
    return row is not None


def _audit_state(data_dir: Path, job: str) -> str:
    """The state of the job's last ledger entry (audit's own record)."""
    states = [to_state for _, _, name, to_state in ledger_rows(data_dir) if name == job]
    return states[-1] if states else ""


async def test_a_cancel_that_loses_to_signing_reports_audits_state_and_says_it_lost(
    tmp_path: Path,
) -> None:
    async with _stack_with_gateway(tmp_path / "stack") as (stack, info):
        nc = await connect_nats(stack.nats_url, "quire-test-cancel-lost", **stack.nats_login())
        js: JetStreamContext = nc.jetstream(timeout=10)
        sign = consumer_name("sign", "interactive")
        commit = consumer_name("commit", "interactive")
        try:
            async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
                await pause(js, WORK_STREAM, sign, minutes=5)
                path = write_text_pdf(tmp_path / "late.pdf", [f"late {uuid.uuid4().hex}"])
                digest = (await client.upload(path)).sha256
                job = (await client.submit([PacketItem("doc", digest)])).name

                async def signing() -> bool:
                    return state_name((await client.get_job(job)).state) == "SIGNING"

                # Audit records the hand-over to signing (the signer asks it first).
                await eventually(signing, 90, "audit shows the job SIGNING")

                # Audit stops taking events (and completions); the job moves on.
                await pause(js, EVENTS_STREAM, EVENTS_CONSUMER, minutes=5)
                await pause(js, WORK_STREAM, commit, minutes=5)
                await resume_promptly(js, WORK_STREAM, sign)
                claim = f"$KV.{GATE_BUCKET}.{job_id(job)}.signer.s0"

                async def signed() -> bool:
                    try:
                        entry = await js.get_msg(f"KV_{GATE_BUCKET}", subject=claim)
                    except Exception:  # noqa: BLE001 - no claim yet
                        return False
                    claimed = (entry.data or b"").startswith(b"SIGNING|")
                    return claimed and _signer_committed(stack.data_dir, job)

                await eventually(signed, 90, "the signer claimed and signed the job")
                stale = await client.get_job(job)
                assert state_name(stale.state) == "SIGNING", "audit must still lag here"

                # The cancel loses in the gate while audit still says SIGNING;
                # audit's events flow again a moment later.
                cancel = asyncio.create_task(client.cancel(job))
                await asyncio.sleep(1.0)
                await resume_promptly(js, EVENTS_STREAM, EVENTS_CONSUMER)
                reply = await asyncio.wait_for(cancel, timeout=30)

                # The reply is audit's view once it has caught up with the gate:
                # SIGNING, or COMMITTING if audit had recorded the signer's
                # event too by then.
                assert state_name(reply.state) in ("SIGNING", "COMMITTING")

                async def committing() -> bool:
                    return state_name((await client.get_job(job)).state) == "COMMITTING"

                await eventually(committing, 30, "audit records the job COMMITTING")
                assert _audit_state(stack.data_dir, job) == "COMMITTING"
                assert reply.reason_code == ""
                answer = Cancellation(reply)
                assert (answer.lost, answer.outcome) == (True, "CANCEL_TOO_LATE")

                # Asked again (a fresh request), through every front end.
                again = await client.try_cancel(job)
                assert (again.lost, again.state, again.outcome) == (
                    True,
                    "COMMITTING",
                    "CANCEL_TOO_LATE",
                )
                shown = await asyncio.to_thread(run_quire, stack.data_dir, "cancel", job, "--json")
                assert shown.returncode == 1, shown.stderr
                printed = json.loads(shown.stdout)
                assert printed["cancelled"] is False
                assert printed["outcome"] == "CANCEL_TOO_LATE"
                assert printed["job"]["state"] == "COMMITTING"
                plain = await asyncio.to_thread(run_quire, stack.data_dir, "cancel", job)
                assert plain.returncode == 1
                assert "cancel lost (CANCEL_TOO_LATE)" in plain.stdout
                assert "COMMITTING" in plain.stdout
                async with httpx.AsyncClient(
                    base_url=info.gateway_url,
                    headers={"Authorization": f"Bearer {info.token()}"},
                    timeout=30,
                ) as http:
                    answered = await http.post(f"/v1/pdf/job/cancel/{job_id(job)}")
                assert answered.status_code == 200, answered.text
                document = answered.json()
                assert (
                    document["state"],
                    document["cancelled"],
                    document["cancel_outcome"],
                ) == ("COMMITTING", False, "CANCEL_TOO_LATE")

                # The job was never cancelled: it completes.
                await resume_promptly(js, WORK_STREAM, commit)
                final = await client.wait(job, timeout=60)
                assert state_name(final.state) == "COMPLETED"
                assert "CANCELLED" not in {
                    to_state for _, _, name, to_state in ledger_rows(stack.data_dir) if name == job
                }
        finally:
            await nc.close()
