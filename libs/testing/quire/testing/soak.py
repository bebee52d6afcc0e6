"""A soak run: many jobs through the real stack while a random process is
SIGKILLed every few seconds; afterwards every job must have exactly one
outcome and the invariant checker must pass, and, when the client's calls
were recorded, every property of the history checker must hold.

Used by ``tests/test_soak.py`` (a bounded run inside the suite) and by
``bench/soak.py`` (``make soak``: 1,000 jobs, figures printed).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
from quire.cli.args import bearer_metadata
from quire.client import AdmissionClient, PacketItem
from quire.jobs import TERMINAL_STATES, state_name
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.history import HistoryLog, RecordingClient
from quire.testing.pdfs import write_text_pdf
from quire.tls import aio_channel

__all__ = ["SOAK_ENV", "SoakReport", "soak"]

SOAK_ENV = {
    "QUIRE_ACK_WAIT_SECONDS": "3",
    "QUIRE_BACKOFF_BASE_SECONDS": "0.2",
    "QUIRE_BACKOFF_CAP_SECONDS": "2",
    "QUIRE_MAX_DELIVER": "20",
    "QUIRE_DRAIN_SECONDS": "3",
}
"""Short acknowledgement waits and backoffs, so killed work comes back within
a soak's seconds rather than production's minutes."""

VICTIMS = ("admission", "validator", "assembler", "signer", "audit", "nats")
RETRYABLE = (
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
)


@dataclass
class SoakReport:
    jobs: int
    seconds: float = 0.0
    outcomes: Counter[str] = field(default_factory=Counter)
    kills: Counter[str] = field(default_factory=Counter)
    kills_in_flight: Counter[str] = field(default_factory=Counter)
    """Kills that came while the client had jobs accepted and not yet ended."""
    client_retries: int = 0
    redeliveries: int = 0
    """Stage deliveries beyond the first, from the attempt counts in the ledger."""
    terminal_entries: Counter[int] = field(default_factory=Counter)
    """How many jobs have 0, 1, 2... terminal entries in the ledger (must be all 1)."""
    findings: list[object] = field(default_factory=list)

    def lines(self) -> list[str]:
        return [
            f"jobs: {self.jobs} in {self.seconds:.1f} s ({self.jobs / self.seconds:.2f} jobs/s)",
            f"outcomes: {dict(sorted(self.outcomes.items()))}",
            f"kills: {sum(self.kills.values())} {dict(sorted(self.kills.items()))}, "
            f"{sum(self.kills_in_flight.values())} with jobs in flight",
            f"retries: {self.redeliveries} stage redeliveries (ledger attempt counts), "
            f"{self.client_retries} client calls retried while a service restarted",
            f"terminal ledger entries per job: {dict(self.terminal_entries)}",
            f"quire check findings: {len(self.findings)}",
        ]


class _Flow:
    """The client's jobs as the killer sees them: how many were let go (with
    ``min_kills``, the killer lets them go, a few before each of the first
    ``min_kills`` kills), accepted and ended."""

    def __init__(self, jobs: int, min_kills: int) -> None:
        self.jobs = jobs
        self.min_kills = min_kills
        self._per_kill = -(-jobs // min_kills) if min_kills else 0
        self.allowed = 0 if min_kills else None
        self.accepted = 0
        self.ended = 0
        self._changed = asyncio.Condition()

    @property
    def in_flight(self) -> int:
        return self.accepted - self.ended

    async def turn(self, index: int) -> None:
        """Until job ``index`` (from 0) may be submitted."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.allowed is None or index < self.allowed)

    async def note(self, *, accepted: int = 0, ended: int = 0) -> None:
        async with self._changed:
            self.accepted += accepted
            self.ended += ended
            self._changed.notify_all()

    async def before_kill(self, landed: int) -> None:
        """Before the kill after ``landed`` kills: while it is one of the
        first ``min_kills``, let its share of the jobs be submitted and wait
        until every job let go so far was accepted."""
        if landed >= self.min_kills:
            return
        async with self._changed:
            assert self.allowed is not None
            self.allowed = min(self.allowed + self._per_kill, self.jobs)
            self._changed.notify_all()
            allowed = self.allowed
            await self._changed.wait_for(lambda: self.accepted >= allowed)


class _Killer:
    """SIGKILLs a random process every ``interval`` seconds (jittered, counted
    from kill to kill), each once the stack has recovered from the kill
    before: restarted and serving. On a machine slower than the interval,
    kills never pile onto a stack still coming back (a storm that only
    measures restarts). With a paced ``flow``, each of the first kills comes
    the moment the jobs it let go were accepted: they are in flight however
    fast the pipeline is."""

    def __init__(self, stack: Stack, interval: float, seed: int, flow: _Flow) -> None:
        self._stack = stack
        self._interval = interval
        self._random = random.Random(seed)
        self._flow = flow
        self.kills: Counter[str] = Counter()
        self.kills_in_flight: Counter[str] = Counter()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            # Kills keep the interval's rhythm from one to the next; a recovery
            # slower than the interval delays the next, never stacks kills.
            due = max(due, loop.time()) + self._interval * self._random.uniform(0.5, 1.5)
            await asyncio.sleep(max(0.0, due - loop.time()))
            await self._flow.before_kill(sum(self.kills.values()))
            victim = self._random.choice(VICTIMS)
            in_flight = self._flow.in_flight > 0
            if victim == "nats":
                nats = self._stack.nats
                assert nats is not None
                await asyncio.to_thread(nats.kill)
                await asyncio.sleep(0.5)
                await asyncio.to_thread(nats.start)
            else:
                restarts = self._stack.restarts(victim)
                self._stack.kill(victim)
                await self._restarted(victim, restarts)
            await asyncio.to_thread(self._stack.wait_healthy)
            self.kills[victim] += 1
            if in_flight:
                self.kills_in_flight[victim] += 1

    async def _restarted(self, victim: str, restarts: int) -> None:
        """Until the supervisor has started ``victim`` again (at most a minute)."""
        for _ in range(600):
            if self._stack.restarts(victim) > restarts:
                return
            await asyncio.sleep(0.1)


async def _retrying(call, report: SoakReport, deadline: float):  # type: ignore[no-untyped-def]
    while True:
        try:
            return await call()
        except grpc.aio.AioRpcError as error:
            if error.code() not in RETRYABLE or time.monotonic() > deadline:
                raise
            report.client_retries += 1
            await asyncio.sleep(0.3)


async def soak(
    stack: Stack,
    inputs: Path,
    *,
    jobs: int,
    kill_interval: float,
    in_flight: int = 24,
    timeout: float = 1800.0,
    seed: int = 7,
    min_kills: int = 0,
    history: Path | None = None,
) -> SoakReport:
    """Run ``jobs`` jobs through a started ``stack`` while killing processes.

    With ``min_kills``, the submissions are paced by the kills: before each
    of the first ``min_kills`` kills, the killer lets ``jobs / min_kills`` jobs
    go and kills the moment they are accepted (the last kill lets the rest
    go), so that many kills fall among jobs in flight however fast the
    pipeline is, and however slowly a loaded machine restarts what was killed.
    With ``history``, every call the client makes is recorded in that file
    (``quire.testing.history``), for the history checker.
    """
    report = SoakReport(jobs=jobs)
    token = (stack.data_dir / "admission" / "dev-token").read_text().strip()
    deadline = time.monotonic() + timeout
    async with _client(stack, token, history) as client:
        digests = []
        for index in range(8):
            path = write_text_pdf(inputs / f"s{index}.pdf", [f"soak source {index}", "page 2"])
            digests.append((await client.upload(path)).sha256)
        flow = _Flow(jobs, min_kills)
        killer = _Killer(stack, kill_interval, seed, flow)
        killing = asyncio.create_task(killer.run())
        gate = asyncio.Semaphore(in_flight)
        names: list[str] = []
        started = time.monotonic()

        async def one(index: int) -> None:
            # Never past the deadline: the jobs not let go by then go anyway.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    flow.turn(index), timeout=max(1.0, deadline - time.monotonic())
                )
            async with gate:
                items = [PacketItem(f"d{i}", digests[(index + i) % 8]) for i in range(2)]
                request_id = uuid.uuid4().hex
                job = await _retrying(
                    lambda: client.submit(items, request_id=request_id), report, deadline
                )
                names.append(job.name)
                await flow.note(accepted=1)
                try:
                    await _retrying(
                        lambda: client.wait(
                            job.name, timeout=max(1.0, deadline - time.monotonic())
                        ),
                        report,
                        deadline,
                    )
                finally:
                    await flow.note(ended=1)

        try:
            await asyncio.gather(*(one(index) for index in range(jobs)))
            # The last paced kill lands among the last jobs: it counts once its
            # victim is back, which may be after they ended.
            while sum(killer.kills.values()) < min_kills and time.monotonic() < deadline:
                assert not killing.done(), "the killer stopped"
                await asyncio.sleep(0.1)
        finally:
            killing.cancel()
            try:
                await killing
            except asyncio.CancelledError:
                pass
        report.seconds = time.monotonic() - started
        report.kills = killer.kills
        report.kills_in_flight = killer.kills_in_flight
        await asyncio.to_thread(stack.wait_healthy)
        for name in names:
            job = await _retrying(lambda: client.get_job(name), report, deadline)  # noqa: B023
            report.outcomes[state_name(job.state)] += 1
    await _read_ledger(StackInfo.read(stack.data_dir), names, report)
    return report


@contextlib.asynccontextmanager
async def _client(stack: Stack, token: str, history: Path | None) -> AsyncIterator[AdmissionClient]:
    """The soak's admission client; one that records its calls in ``history`` if given."""
    address = stack.endpoints["admission"]
    if history is None:
        async with AdmissionClient(address, token) as client:
            yield client
        return
    with HistoryLog(history, "soak") as log:
        async with RecordingClient(address, token, history=log) as recording:
            yield recording


async def _read_ledger(info: StackInfo, names: list[str], report: SoakReport) -> None:
    operator = bearer_metadata(info.operator_token())
    async with aio_channel(info.endpoints["audit"], None) as channel:
        stub = audit_service_pb2_grpc.AuditServiceStub(channel)
        for name in names:
            reply = await stub.ListJobEvents(
                audit_service_pb2.ListJobEventsRequest(job=name, page_size=100),
                metadata=operator,
            )
            terminal = 0
            deliveries: dict[str, int] = {}
            for entry in reply.entries:
                event = entry.event
                if state_name(event.to_state) in TERMINAL_STATES:
                    terminal += 1
                if event.lease_token:  # a stage's delivery, not an operator's step
                    stage = event.actor.service
                    deliveries[stage] = max(deliveries.get(stage, 0), event.attempt)
            report.redeliveries += sum(count - 1 for count in deliveries.values())
            report.terminal_entries[terminal] += 1
