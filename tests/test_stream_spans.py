"""A server-streaming RPC's span survives the client leaving early.

WatchJob's client stops reading at a terminal state (or gives up sooner), and
gRPC then closes the handler's generator from another task. A span made
current across the generator's yields cannot be detached there:
OpenTelemetry logged "Failed to detach context" at ERROR for most watches."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from quire.client import AdmissionClient, PacketItem
from quire.jobs import state_name
from quire.stack.supervisor import Stack
from quire.testing.pdfs import write_text_pdf

pytestmark = pytest.mark.stack

DETACH_FAILURE = "Failed to detach context"


async def test_watches_left_early_leave_no_context_errors(
    stack: Stack,
    tenants,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    log = stack.data_dir / "logs" / "admission.log"
    before = log.read_text().count(DETACH_FAILURE)
    client: AdmissionClient = await tenants("watcher")
    for n in range(4):
        path = write_text_pdf(tmp_path / f"w{n}.pdf", [f"watched {n} {uuid.uuid4().hex}"])
        digest = (await client.upload(path)).sha256
        job = await client.submit([PacketItem("doc", digest)])
        seen = [state_name(c.job.state) async for c in client.watch_changes(job.name, timeout=60)]
        assert seen[-1] == "COMPLETED", seen
        async for _change in client.watch_changes(job.name):
            break  # gone after the first change, mid-stream
    await asyncio.sleep(1.0)  # the server notices the cancelled streams
    assert log.read_text().count(DETACH_FAILURE) == before
