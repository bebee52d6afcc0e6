"""The batch dispatcher survives SIGKILL: admission (the dispatcher's
process) is killed several times while a batch is being dispatched, and
every packet still becomes exactly one child job — no packet with two jobs,
no job twice, none skipped — every child ends, and ``quire check`` passes.

In ``make test``: 64 packets (eight pages), 3 kills, each while the batch is
partly dispatched. ``make batch-kills`` runs the full size
(``BATCH_KILL_PACKETS=1000``, ``BATCH_KILLS=5``) and prints the figures.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections import Counter
from pathlib import Path

import grpc
import pytest
from test_batches import packets, upload_pdf
from test_faults_common import ledger_rows

from quire.client import AdmissionClient
from quire.invariants import check
from quire.jobs import TERMINAL_STATES, state_name
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.soak import SOAK_ENV

pytestmark = [pytest.mark.stack, pytest.mark.fault]

PACKETS = int(os.environ.get("BATCH_KILL_PACKETS", "64"))
KILLS = int(os.environ.get("BATCH_KILLS", "3"))
ENV = {
    **SOAK_ENV,
    "QUIRE_BATCH_PAGE_SIZE": "8",
    "QUIRE_BATCH_RATE": "50",
    "QUIRE_BATCH_LEASE_SECONDS": "2",
    "QUIRE_MAX_OUTSTANDING_JOBS": "1000",
}
"""Small pages (many page transactions to be killed between), a rate slow
enough that the test sees each mark before the dispatch runs past it (a
packet every 20 ms against a look every 50 ms), and a short lease, so a
restarted admission takes the dispatch over within seconds."""


async def _retrying(call, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    """``call()`` until admission answers (it is being killed and restarted)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await call()
        except grpc.aio.AioRpcError as error:
            retryable = error.code() in (
                grpc.StatusCode.UNAVAILABLE,
                grpc.StatusCode.DEADLINE_EXCEEDED,
                grpc.StatusCode.UNKNOWN,
            )
            if not retryable or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)


async def test_sigkilled_dispatcher_makes_exactly_one_job_per_packet(tmp_path: Path) -> None:
    stack = Stack(tmp_path / "stack", env=ENV)
    await asyncio.to_thread(stack.start)
    started = time.monotonic()
    try:
        info = StackInfo.read(stack.data_dir)
        async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
            sha256 = await upload_pdf(client, tmp_path)
            batch = await client.submit_batch(packets(sha256, PACKETS))
            kills = 0
            for kill in range(1, KILLS + 1):
                # Kill when the batch is partly dispatched, spread over its length.
                mark = PACKETS * kill // (KILLS + 1)
                deadline = time.monotonic() + 300
                while (
                    dispatched := (
                        await _retrying(lambda: client.get_batch(batch.name))
                    ).dispatched_count
                ) < mark:
                    assert time.monotonic() < deadline, f"dispatch reached {mark}"
                    await asyncio.sleep(0.05)
                assert dispatched < PACKETS, "killed while the batch was partly dispatched"
                stack.kill("admission")
                kills += 1
                await asyncio.to_thread(stack.wait_healthy, 120)
            deadline = time.monotonic() + 600
            while not (done := await _retrying(lambda: client.get_batch(batch.name))).HasField(
                "finish_time"
            ):
                assert time.monotonic() < deadline, "every child ended"
                await asyncio.sleep(0.5)
            every = [job async for job in client.batch_jobs(batch.name, page_size=1000)]
            listed = await _retrying(lambda: client.list_jobs(page_size=1000))
            tenant_jobs = [job.name for job in listed.jobs]
            while listed.next_page_token:
                more = functools.partial(
                    client.list_jobs, page_size=1000, page_token=listed.next_page_token
                )
                listed = await _retrying(more)
                tenant_jobs += [job.name for job in listed.jobs]
        seconds = time.monotonic() - started
        print(f"\n{PACKETS} packets, {kills} SIGKILLs of admission, {seconds:.1f} s")
        assert kills == KILLS and stack.restarts("admission") >= KILLS
        assert (done.dispatched_count, done.terminal_count) == (PACKETS, PACKETS)
        assert [job.index for job in every] == list(range(PACKETS)), "no packet skipped"
        jobs = [job.job for job in every]
        assert all(jobs) and len(set(jobs)) == PACKETS, "one distinct job per packet"
        assert all(state_name(job.state) in TERMINAL_STATES for job in every)
        assert sorted(tenant_jobs) == sorted(jobs), "no job beyond the packets' own"
        accepted = Counter(
            job for _, _, job, state in ledger_rows(stack.data_dir) if state == "ACCEPTED"
        )
        assert set(accepted) == set(jobs) and set(accepted.values()) == {1}, "ACCEPTED once each"
        result = await asyncio.to_thread(check, stack.data_dir)
        assert result.ok, result.findings
    finally:
        await asyncio.to_thread(stack.stop)
