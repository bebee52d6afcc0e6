"""One schedule: a recorded workload on the namespace cluster while the
nemesis strikes as its seed planned, then every fault healed, the jobs
given time to settle, the facts gathered through the services' APIs and
the history checked. Its verdicts stand on their own: the schedule's
tenants are its own, and only the jobs its history names are judged (the
ledger's own verification covers every chain).

While it runs, the work stream is sampled every second for the report's
queue age (its tasks, queued or leased, and the oldest one's age);
completions come from the history.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import nats
import nats.errors

from quire.client import TenantAdminClient
from quire.jobs import TERMINAL_STATES
from quire.testing.history import (
    History,
    Kind,
    SystemAccess,
    Verdicts,
    check,
    gather_facts,
)
from quire.testing.history.gather import patiently
from quire.testing.history.workload import Progress, run_workload
from quire.testing.nemesis.fault import Fault, FaultRecord, Timeline
from quire.testing.nemesis.inflight import in_flight, open_calls, taken_unfinished, worked_on
from quire.testing.nemesis.kills import ReplicaKill
from quire.testing.nemesis.leasecut import LeaseCut, fenced_after
from quire.testing.nemesis.scheduler import Nemesis, Planned, plan
from quire.testing.nscluster import NamespaceCluster
from quire.workqueue.topology import WORK_STREAM

__all__ = ["QueueSample", "ScheduleResult", "run_schedule", "access_of"]

SAMPLE_SECONDS = 1.0
CALL_SECONDS = 2.0


@dataclass(frozen=True)
class QueueSample:
    monotonic: float
    ready: int
    """Tasks in the work stream: queued, or leased and not yet acknowledged."""
    oldest_age: float
    """Seconds the oldest of them has been there (0 when none)."""


@dataclass
class ScheduleResult:
    seed: int
    planned: list[Planned]
    timeline: Timeline
    history: History
    verdicts: Verdicts
    started: float
    seconds: float
    queues: list[QueueSample] = field(default_factory=list)
    checking_seconds: float = 0.0
    """Of ``seconds``, those spent after the workload: jobs given time to
    end, then the system's facts gathered and checked."""

    @property
    def ok(self) -> bool:
        return self.verdicts.ok

    def completions(self) -> list[float]:
        """When a client first saw each job COMPLETED (``time.monotonic()``)."""
        first: dict[str, float] = {}
        for op in self.history.of(Kind.OBSERVED):
            if op.state == "COMPLETED":
                first[op.job] = min(first.get(op.job, op.monotonic), op.monotonic)
        return sorted(first.values())


def client_targets(cluster: NamespaceCluster, service: str) -> list[str]:
    """Every replica of ``service`` as one gRPC target, once starting from
    each: a client's channel picks the first that answers, so clients given
    these in turn spread over the replicas (and a fault on any of them
    meets clients), and each still fails over to the others."""
    addresses = [replica.address for replica in cluster.replicas(service)]
    return [
        "ipv4:" + ",".join(addresses[first:] + addresses[:first]) for first in range(len(addresses))
    ]


def access_of(cluster: NamespaceCluster, tokens: dict[str, str]) -> SystemAccess:
    return SystemAccess(
        admission=cluster.target("admission"),
        audit=cluster.target("audit"),
        signer=cluster.target("signer"),
        operator_token=cluster.operator_token,
        tenant_tokens=tokens,
    )


async def _tenants(cluster: NamespaceCluster, count: int) -> dict[str, str]:
    async with TenantAdminClient(cluster.target("admission"), cluster.operator_token) as admin:
        # Asked again while refused as transient: the schedule before may have
        # just healed the replica that answers.
        made = [
            await patiently(
                functools.partial(admin.create_tenant, f"nemesis-{i}-{uuid.uuid4().hex[:8]}")
            )
            for i in range(count)
        ]
    return {reply.tenant.name: reply.secret for reply in made}


async def _expected(_error: Exception) -> None:
    return None


async def _sample_queues(
    cluster: NamespaceCluster, samples: list[QueueSample], stop: asyncio.Event
) -> None:
    """Every second: the work stream's tasks (queued or leased: a work queue
    keeps a task until it is acknowledged) and the oldest one's age, read
    from JetStream through any member that answers."""
    nc = await nats.connect(
        cluster.nats_url.split(","),
        name="quire-nemesis-sampler",
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,
        error_cb=_expected,  # a member the nemesis killed or cut: it reconnects
    )
    js = nc.jetstream(timeout=CALL_SECONDS)
    try:
        while not stop.is_set():
            with contextlib.suppress(nats.errors.Error, TimeoutError):
                state = (await js.stream_info(WORK_STREAM)).state
                age = 0.0
                if state.messages:
                    oldest = await js.get_msg(WORK_STREAM, seq=state.first_seq, next=True)
                    if oldest.time is not None:
                        age = max(0.0, (datetime.now(UTC) - oldest.time).total_seconds())
                samples.append(QueueSample(time.monotonic(), state.messages, age))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), SAMPLE_SECONDS)
    finally:
        await nc.close()


class _LiveHistory:
    """The history as its files hold it at this moment (a strike counts on it)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def in_flight(self) -> tuple[str, ...]:
        history = History.read(self.folder.glob("client-*.jsonl"))
        ended = {op.job for op in history.of(Kind.OBSERVED) if op.state in TERMINAL_STATES}
        return tuple(sorted(set(history.acknowledged()) - ended))


async def run_schedule(
    cluster: NamespaceCluster,
    seed: int,
    faults: Sequence[Fault],
    folder: Path,
    *,
    clients: int = 4,
    jobs_per_client: int = 4,
    strikes: int = 3,
    hold: tuple[float, float] = (3.0, 8.0),
    grace: float = 60.0,
    workload_timeout: float = 240.0,
) -> ScheduleResult:
    """Run schedule ``seed`` on ``cluster``; files under ``folder``."""
    started = time.monotonic()
    folder.mkdir(parents=True, exist_ok=True)
    await asyncio.to_thread(cluster.wait_whole)
    tokens = await _tenants(cluster, 2)
    secrets = [list(tokens.values())[index % len(tokens)] for index in range(clients)]
    planned = plan(
        seed,
        [fault.kind for fault in faults],
        strikes=strikes,
        jobs=clients * jobs_per_client,
        hold=hold,
    )
    timeline = Timeline(seed)
    progress = Progress()
    live = _LiveHistory(folder / "history")
    nemesis = Nemesis(
        cluster,
        faults,
        planned,
        timeline,
        acknowledged=lambda: progress.acknowledged,
        in_flight=live.in_flight,
    )
    stop, done = asyncio.Event(), asyncio.Event()
    samples: list[QueueSample] = []
    sampling = asyncio.create_task(_sample_queues(cluster, samples, stop))

    async def strike() -> Timeline:
        try:
            return await nemesis.run(stop)
        finally:
            done.set()  # the clients send their last jobs

    striking = asyncio.create_task(strike())
    try:
        history = await run_workload(
            client_targets(cluster, "admission"),
            secrets,
            folder / "history",
            jobs_per_client=jobs_per_client,
            progress=progress,
            timeout=workload_timeout,
            until=done,
        )
    finally:
        stop.set()
        await striking  # heals whatever is still open
        await sampling
    checking = time.monotonic()
    facts = await gather_facts(access_of(cluster, tokens), history, folder / "facts", grace=grace)
    verdicts = check(history, facts)
    checking_seconds = time.monotonic() - checking
    for record, following in zip(timeline.records, [*timeline.records[1:], None], strict=True):
        until = following.wall_start if following is not None else time.time()
        _explain(cluster, history, record, until)
    return ScheduleResult(
        seed=seed,
        planned=planned,
        timeline=timeline,
        history=history,
        verdicts=verdicts,
        started=started,
        seconds=time.monotonic() - started,
        queues=samples,
        checking_seconds=checking_seconds,
    )


def _explain(
    cluster: NamespaceCluster, history: History, record: FaultRecord, until: float
) -> None:
    """Fill in what the record could not know when it struck (``until``:
    when the next strike came, ``time.time()``)."""
    record.in_flight = in_flight(history, record.start)
    processes = cluster.processes()
    if not record.target:
        return
    if processes[record.target].role == "nats":
        names = [n for n in record.detail.get("clients_on_it", "").split(",") if n in processes]
    elif processes[record.target].role == "postgres":
        names = []
    else:
        names = [record.target]
    directories = [processes[name].directory for name in names]
    on_it = set(worked_on(directories, record.wall_start))
    if record.kind == ReplicaKill.kind:  # it never wrote the spans it had open
        on_it |= set(taken_unfinished(directories, record.wall_start))
    # Of the jobs in flight: a span open across the moment for another job
    # (a stale redelivery's wait in the queue, an attempt a cut replica left
    # unfinished in an earlier schedule) is not work it was doing for them.
    record.on_target = tuple(sorted(on_it & set(record.in_flight)))
    if names:
        record.detail["open_calls"] = str(open_calls(directories, record.wall_start))
    if record.kind == LeaseCut.kind:
        fenced = fenced_after(processes[record.target].directory, record.wall_start, until)
        record.detail["fenced"] = ",".join(fenced) or "none"
