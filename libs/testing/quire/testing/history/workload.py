"""A small recorded workload: several clients, each with its own history
file, each sending its jobs one after another as a careful user would:
submit (again under the same request id while the refusal says try again),
wait for the end, read the job, fetch the artifact of a completed one.

A refusal that says try again (``RETRYABLE_CODES``) is retried after a
short pause until the workload's deadline; any other ends that client (the
others go on). Every call and answer is in the history either way, and the
checker judges each refusal (``refusals_typed``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeVar

import grpc

from quire.client import PacketItem
from quire.jobs import state_name
from quire.pipeline import State
from quire.testing.history.ops import History
from quire.testing.history.recorder import RETRYABLE_CODES, HistoryLog, RecordingClient
from quire.testing.pdfs import write_text_pdf
from quire.tls import TlsSettings

__all__ = ["Progress", "retrying", "run_workload"]

RETRY_PAUSE_SECONDS = 0.2
logger = logging.getLogger(__name__)
SOURCES_PER_CLIENT = 2

Answer = TypeVar("Answer")


class Progress:
    """How many submits were acknowledged so far, and how many of those jobs
    were seen to end, for whoever paces faults by them."""

    def __init__(self) -> None:
        self.acknowledged = 0
        self.ended = 0
        self._changed = asyncio.Condition()

    async def count(self) -> None:
        async with self._changed:
            self.acknowledged += 1
            self._changed.notify_all()

    async def count_end(self) -> None:
        async with self._changed:
            self.ended += 1
            self._changed.notify_all()

    async def reached(self, acknowledged: int, *, in_flight: int = 0) -> None:
        """Until ``acknowledged`` submits have been acknowledged and at least
        ``in_flight`` of those jobs have not yet been seen to end."""
        async with self._changed:
            await self._changed.wait_for(
                lambda: (
                    self.acknowledged >= acknowledged
                    and self.acknowledged - self.ended >= in_flight
                )
            )


async def retrying(call: Callable[[], Awaitable[Answer]], deadline: float) -> Answer:
    """``call()``, asked again after a short pause while refused with a code
    that says try again, until ``deadline`` (``time.monotonic()``)."""
    while True:
        try:
            return await call()
        except grpc.aio.AioRpcError as error:
            if error.code() not in RETRYABLE_CODES or time.monotonic() > deadline:
                raise
        await asyncio.sleep(RETRY_PAUSE_SECONDS)


async def _client(
    client: RecordingClient,
    inputs: Path,
    jobs: int,
    progress: Progress,
    deadline: float,
    until: asyncio.Event | None,
) -> None:
    digests = []
    for index in range(SOURCES_PER_CLIENT):
        path = write_text_pdf(
            inputs / f"{index}.pdf", [f"history source {index}", uuid.uuid4().hex]
        )
        digests.append((await retrying(functools.partial(client.upload, path), deadline)).sha256)
    index = 0
    while index < jobs or (
        until is not None and not until.is_set() and time.monotonic() < deadline
    ):
        items = [PacketItem(f"d{i}", digests[(index + i) % len(digests)]) for i in range(2)]
        await _one_job(client, items, inputs, progress, deadline)
        index += 1


async def _one_job(
    client: RecordingClient,
    items: list[PacketItem],
    inputs: Path,
    progress: Progress,
    deadline: float,
) -> None:
    """Submit, wait, read and fetch one job."""
    request_id = str(uuid.uuid4())
    job = await retrying(lambda: client.submit(items, request_id=request_id), deadline)
    await progress.count()
    name = job.name
    await retrying(
        lambda: client.wait(name, timeout=max(1.0, deadline - time.monotonic())), deadline
    )
    await progress.count_end()
    job = await retrying(lambda: client.get_job(name), deadline)
    if state_name(job.state) == State.COMPLETED:
        output = inputs / f"{name.removeprefix('jobs/')}.pdf"
        await retrying(lambda: client.download(name, output), deadline)


async def run_workload(
    address: str | Sequence[str],
    tokens: Sequence[str],
    folder: Path,
    *,
    jobs_per_client: int,
    progress: Progress | None = None,
    timeout: float = 300.0,
    tls: TlsSettings | None = None,
    until: asyncio.Event | None = None,
) -> History:
    """One client per token, each sending ``jobs_per_client`` jobs (and,
    when ``until`` is given, more until it is set) and writing
    ``<folder>/client-<n>.jsonl``; the history they wrote. ``address``: one
    gRPC target for every client, or a list the clients take in turn."""
    addresses = [address] if isinstance(address, str) else list(address)
    progress = progress or Progress()
    deadline = time.monotonic() + timeout

    async def one(index: int, token: str) -> None:
        process = f"client-{index}"
        inputs = folder / process
        inputs.mkdir(parents=True, exist_ok=True)
        with HistoryLog(folder / f"{process}.jsonl", process) as log:
            target = addresses[index % len(addresses)]
            async with RecordingClient(target, token, history=log, tls=tls) as client:
                try:
                    await _client(client, inputs, jobs_per_client, progress, deadline, until)
                except grpc.aio.AioRpcError as error:
                    # In the history already: the checker judges the refusal.
                    logger.warning("%s stopped at %s", process, error.code().name)

    await asyncio.gather(*(one(index, token) for index, token in enumerate(tokens)))
    return History.read(folder.glob("client-*.jsonl"))
