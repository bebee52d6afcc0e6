"""Helpers shared by the fault-scenario tests and the invariant checker's tests
(no tests here): a private stack, a batch of small jobs, bounded waits, and
read-only looks at the ledger."""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from quire.client import AdmissionClient, PacketItem
from quire.faults import arm
from quire.identity import IdentitySettings, ServiceIdentity
from quire.jobs import TERMINAL_STATES, state_name
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.consumers import resume_promptly
from quire.testing.pdfs import write_text_pdf
from quire.type import job_pb2
from quire.wire import WireSigner

__all__ = [
    "Running",
    "running_stack",
    "submit_text_jobs",
    "submit_tracked_jobs",
    "most_at_once",
    "wait_all",
    "eventually",
    "ledger_rows",
    "kept_armed",
    "signer_of",
    "resume_promptly",
]

BASE_ENV = {"QUIRE_DRAIN_SECONDS": "5"}


@dataclass(frozen=True)
class Running:
    stack: Stack
    info: StackInfo
    client: AdmissionClient

    @property
    def data_dir(self) -> Path:
        return self.stack.data_dir


@asynccontextmanager
async def running_stack(
    directory: Path, env: dict[str, str] | None = None
) -> AsyncIterator[Running]:
    """A private stack; stopped (gracefully) when the block ends."""
    stack = Stack(directory, env={**BASE_ENV, **(env or {})})
    info = await asyncio.to_thread(stack.start)
    try:
        async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
            yield Running(stack, info, client)
    finally:
        await asyncio.to_thread(stack.stop)


async def submit_text_jobs(client: AdmissionClient, folder: Path, count: int) -> list[str]:
    """``count`` one-page jobs, each from its own freshly made PDF."""
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for index in range(count):
        path = write_text_pdf(folder / f"{index}.pdf", [f"page {index} {uuid.uuid4().hex}"])
        digest = (await client.upload(path)).sha256
        names.append((await client.submit([PacketItem(f"d{index}", digest)])).name)
    return names


async def submit_tracked_jobs(
    client: AdmissionClient, folder: Path, count: int, *, ruleset: str = ""
) -> dict[str, str]:
    """``count`` one-page jobs, each from its own freshly made PDF: job -> the
    rollout track admission pinned it to."""
    folder.mkdir(parents=True, exist_ok=True)
    tracks = {}
    for index in range(count):
        path = write_text_pdf(folder / f"{index}.pdf", [f"page {index} {uuid.uuid4().hex}"])
        digest = (await client.upload(path)).sha256
        job = await client.submit([PacketItem(f"d{index}", digest)], ruleset=ruleset)
        tracks[job.name] = job.track
    return tracks


def most_at_once(intervals: Sequence[tuple[Any, Any]]) -> int:
    """Most intervals open at one instant (an end before a start at a tie)."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    held = peak = 0
    for _, step in edges:
        held += step
        peak = max(peak, held)
    return peak


async def wait_all(
    client: AdmissionClient, names: list[str], timeout: float, *, through_unavailable: bool = False
) -> dict[str, job_pb2.Job]:
    """Every job's final view; fails if one is not terminal within ``timeout``.

    With ``through_unavailable``, UNAVAILABLE answers (a peer still coming
    back) are waited out too, within the same ``timeout``.
    """
    deadline = time.monotonic() + timeout

    async def one(name: str) -> job_pb2.Job:
        while True:
            try:
                return await client.wait(name, timeout=max(0.1, deadline - time.monotonic()))
            except grpc.aio.AioRpcError as error:
                unavailable = error.code() == grpc.StatusCode.UNAVAILABLE
                if not (through_unavailable and unavailable) or time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

    jobs = await asyncio.gather(*(one(name) for name in names))
    return {job.name: job for job in jobs}


async def eventually(
    condition: Callable[[], Awaitable[bool]], timeout: float, what: str, every: float = 0.1
) -> None:
    """Wait until ``condition`` holds, at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f}s")
        await asyncio.sleep(every)


def ledger_rows(data_dir: Path) -> list[tuple[int, str, str, str]]:
    """(sequence, event_id, job, to_state) of every ledger entry, read-only."""
    path = data_dir / "audit" / "audit.db"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return list(
            db.execute("SELECT sequence, event_id, job, to_state FROM ledger ORDER BY sequence")
        )


def signer_of(data_dir: Path, service: str) -> WireSigner:
    """``service``'s own message signer, from the stack's identity directory:
    what a test republishing genuine messages (duplicates) signs them with."""
    return WireSigner(ServiceIdentity.load(IdentitySettings.from_env(service, data_dir, {})))


def states_of(jobs: dict[str, job_pb2.Job]) -> dict[str, str]:
    return {name: state_name(job.state) for name, job in jobs.items()}


def all_terminal(jobs: dict[str, job_pb2.Job]) -> bool:
    return all(state in TERMINAL_STATES for state in states_of(jobs).values())


@asynccontextmanager
async def kept_armed(fault_dir: Path, point: str) -> AsyncIterator[None]:
    """Keep fault ``point`` armed, so every delivery that reaches it dies."""

    async def rearm() -> None:
        while True:
            if not (fault_dir / f"{point}.armed").exists():
                arm(fault_dir, point)
            await asyncio.sleep(0.05)

    task = asyncio.create_task(rearm())
    try:
        yield
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        (fault_dir / f"{point}.armed").unlink(missing_ok=True)
