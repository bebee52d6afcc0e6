"""Full disks lose nothing (issue 42), on real stacks with a real ``ENOSPC``:
a small tmpfs is mounted where the services keep their blobs or their
temporary space, and while a recorded workload runs (until the last strike
is over) it is filled to the last byte the moment a chosen stage begins an
attempt (makes its private directory), kept full until that stage has had
to retry, a probe client has been refused, and at least 8 s (jobs get five
deliveries, at most a second apart: a stage that kept taking work from a
full disk would end them FAILED), and freed. A strike the attempt still got through is freed
after 5 s and made again at the stage's next attempt (three at most).

- **The blob disk** (the local backend: blobs and the temporary space with
  the attempts' private directories, on one file system, as promotion by
  rename needs), struck while the assembler works.
- **The temporary disk** (blobs in NATS, the local ``.tmp`` alone on the
  small file system), struck while the validator works.

Each sandbox gets its documents as files (``*_SANDBOX_IN_MEMORY_BYTES=0``),
so the attempts' private directories are really on the full disk.

Afterwards every property of the history checker holds: every acknowledged
job completed once, with its whole history and one verified signature; the
refusals clients met while the disk was full were typed and retryable (a
probe client submits while it is full and is refused with
RESOURCE_EXHAUSTED and a retry hint, then gets its job through once
freed); the struck stage retried (its diagnostics name STORAGE_UNAVAILABLE)
and dead-lettered nothing; and no temporary file is left.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import httpx
import pytest

from quire.client import DiagnosticsClient, PacketItem, TenantAdminClient
from quire.jobs import state_name
from quire.pipeline import State
from quire.reasons import ReasonCode
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.history import (
    History,
    Kind,
    SystemAccess,
    check,
    gather_facts,
    verdicts_markdown,
)
from quire.testing.history.recorder import HistoryLog, RecordingClient
from quire.testing.history.workload import Progress, run_workload
from quire.testing.pdfs import write_text_pdf
from quire.testing.smallfs import MIB, Filler, SmallFileSystem
from quire.testing.soak import SOAK_ENV
from quire.top.scrape import parse_exposition

pytestmark = [pytest.mark.stack, pytest.mark.fault]

DISK_BYTES = 48 * MIB
CLIENTS = 3
JOBS_PER_CLIENT = 4
GRACE_SECONDS = 40.0
STRIKE_WAIT_SECONDS = 60.0
"""Bound on waiting for the struck stage to hold a job."""
MAX_HOLD_SECONDS = 20.0
"""Bound on holding the disk full until the struck stage has retried."""
MIN_HOLD_SECONDS = 8.0
"""Long enough for a stage that kept retrying to use up every delivery."""
MISS_SECONDS = 5.0
"""A strike the stage has not retried within this long missed: freed."""
STRIKES = 3
PROBE_SUBMITS = 20
LEAVE_BYTES = 6 * MIB
"""Left free until the strike (above admission's reserve), so that filling
the rest takes a moment."""
ENV = {
    **SOAK_ENV,
    # Five deliveries, at most a second apart: a stage that kept taking work
    # from a full disk would fail jobs within the hold.
    "QUIRE_MAX_DELIVER": "5",
    "QUIRE_BACKOFF_CAP_SECONDS": "1",
    # The small disk is all there is: admission sheds below 3 MiB free, the
    # stages pause below 2 MiB.
    "QUIRE_TEMP_FREE_RESERVE_BYTES": str(3 * MIB),
    "QUIRE_TEMP_PAUSE_FREE_BYTES": str(2 * MIB),
    "QUIRE_VALIDATOR_SANDBOX_IN_MEMORY_BYTES": "0",
    "QUIRE_ASSEMBLER_SANDBOX_IN_MEMORY_BYTES": "0",
    "QUIRE_SIGNER_SANDBOX_IN_MEMORY_BYTES": "0",
}


@dataclass(frozen=True)
class StageReading:
    in_flight: float
    retries: float


def _stage_reading(address: str) -> StageReading:
    """A stage process's deliveries in hand and retries so far (its /metrics)."""
    text = httpx.get(f"http://{address}/metrics", timeout=5.0).text
    samples, _declared = parse_exposition(text)
    in_flight = retries = 0.0
    for (name, _labels), value in samples.items():
        if name == "quire_stage_in_flight":
            in_flight += value
        elif name == "quire_stage_retries_total":
            retries += value
    return StageReading(in_flight, retries)


@dataclass
class Strike:
    """What the fault saw: the stage's reading before the strike and when the
    disk was freed, and when it was full (monotonic)."""

    before: StageReading = StageReading(0, 0)
    at_free: StageReading | None = None
    full_from: float = 0.0
    full_until: float = 0.0
    held_bytes: int = 0
    entry: str = ""
    """The struck stage's temporary entry whose making set the fault off."""
    strikes: int = 0
    windows: list[tuple[float, float]] = field(default_factory=list)
    """When the disk was full, strike by strike (monotonic)."""
    probe: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the disk is full: the probe client submits then."""
    refused: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the probe client was refused while the disk was full."""


async def _strike(
    stack: Stack, disk: SmallFileSystem, stage: str, progress: Progress, strike: Strike
) -> None:
    """Once some submits were acknowledged: fill the disk the moment
    ``stage`` begins an attempt, keep it full until ``stage`` has retried
    (and at least ``MIN_HOLD_SECONDS``), then free it. An attempt may still
    get through (another job's attempt ends meanwhile and frees what it
    held, which the struck one takes before the filler does): then the disk
    is freed after ``MISS_SECONDS`` and struck again at the next attempt,
    ``STRIKES`` times at most."""
    address = stack.metrics_endpoints[stage]
    await progress.reached(CLIENTS)
    strike.before = await asyncio.to_thread(_stage_reading, address)
    for _ in range(STRIKES):
        strike.strikes += 1
        if await _one_strike(disk, stage, address, strike):
            return


async def _one_strike(disk: SmallFileSystem, stage: str, address: str, strike: Strike) -> bool:
    """One strike, held and freed; whether ``stage`` retried meanwhile."""
    filler = Filler(disk.path)
    try:
        await asyncio.to_thread(filler.fill, LEAVE_BYTES)
        # The moment the stage makes an attempt's private directory, it has
        # begun a job's work and is about to write its documents there (a
        # small blob's own write may be over before the disk fills).
        strike.entry = await asyncio.to_thread(
            functools.partial(
                filler.fill_when_made,
                disk.path / ".tmp",
                f"{stage}.",
                STRIKE_WAIT_SECONDS,
                containing=".attempt-",
            )
        )
        strike.full_from = time.monotonic()
        strike.held_bytes = filler.held
        strike.probe.set()
        while True:
            await filler.hold(0.2)
            reading = await asyncio.to_thread(_stage_reading, address)
            held = time.monotonic() - strike.full_from
            retried = reading.retries > strike.before.retries
            if retried and strike.refused.is_set() and held >= MIN_HOLD_SECONDS:
                strike.at_free = reading
                return True
            if (not retried and held >= MISS_SECONDS) or held >= MAX_HOLD_SECONDS:
                strike.at_free = reading
                return retried
    finally:
        filler.free()
        strike.full_until = time.monotonic()
        strike.windows.append((strike.full_from, strike.full_until))


async def _probe(address: str, token: str, folder: Path, strike: Strike, timeout: float) -> None:
    """While the disk is full: submit a new job until one is refused, then
    keep submitting that one under the same request id while told to try
    again; see every job it got through."""
    folder.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    with HistoryLog(folder / "client-probe.jsonl", "client-probe") as log:
        async with RecordingClient(address, token, history=log) as client:
            source = write_text_pdf(folder / "probe.pdf", ["probe", uuid.uuid4().hex])
            digest = (await client.upload(source)).sha256
            await strike.probe.wait()
            jobs = []
            for _ in range(PROBE_SUBMITS):
                jobs.append(await _submit(client, digest, strike, deadline))
                if strike.refused.is_set():
                    break
                await asyncio.sleep(0.2)
            for job in jobs:
                await client.wait(job, timeout=max(1.0, deadline - time.monotonic()))
                answer = await client.get_job(job)
                if state_name(answer.state) == State.COMPLETED:
                    await client.download(job, folder / f"{job.removeprefix('jobs/')}.pdf")


async def _submit(client: RecordingClient, digest: str, strike: Strike, deadline: float) -> str:
    """One job submitted, under one request id however often it is refused."""
    request_id = str(uuid.uuid4())
    while True:
        try:
            return (await client.submit([PacketItem("probe", digest)], request_id=request_id)).name
        except grpc.aio.AioRpcError as error:
            retryable = error.code() in (
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                grpc.StatusCode.UNAVAILABLE,
            )
            if not retryable or time.monotonic() > deadline:
                raise
            strike.refused.set()
        await asyncio.sleep(0.2)


@asynccontextmanager
async def _running(root: Path, env: dict[str, str]) -> AsyncIterator[tuple[Stack, StackInfo]]:
    stack = Stack(root / "stack", env=env)
    info = await asyncio.to_thread(stack.start)
    try:
        yield stack, info
    finally:
        await asyncio.to_thread(stack.stop)


async def _diagnosed(info: StackInfo, stage: str, jobs: list[str]) -> set[str]:
    """The reason codes ``stage`` kept for the failed deliveries of ``jobs``."""
    reasons: set[str] = set()
    async with DiagnosticsClient({stage: info.endpoints[stage]}, info.operator_token()) as client:
        for job in jobs:
            replies = await client.list_diagnostics(job)
            reasons.update(d.reason_code for d in replies[stage].diagnostics)
    return reasons


async def _run(tmp_path: Path, env: dict[str, str], stage: str) -> None:
    started = time.monotonic()
    with SmallFileSystem(tmp_path / "stack" / "blobs", DISK_BYTES) as disk:
        async with _running(tmp_path, env) as (stack, info):
            async with TenantAdminClient(
                info.endpoints["admission"], info.operator_token()
            ) as admin:
                made = [await admin.create_tenant(f"full-{n}") for n in range(2)]
            tokens = {reply.tenant.name: reply.secret for reply in made}
            secrets = [made[index % len(made)].secret for index in range(CLIENTS)]
            progress = Progress()
            strike = Strike()
            history_dir = tmp_path / "history"
            striking = asyncio.create_task(_strike(stack, disk, stage, progress, strike))
            # The clients keep sending until the last strike is over, so the
            # struck stage always has an attempt to strike (on a busy machine
            # the first jobs can all be past it before the disk is filled).
            struck = asyncio.Event()
            striking.add_done_callback(lambda _done: struck.set())
            probing = asyncio.create_task(
                _probe(info.endpoints["admission"], made[0].secret, history_dir, strike, 120)
            )
            await run_workload(
                info.endpoints["admission"],
                secrets,
                history_dir,
                jobs_per_client=JOBS_PER_CLIENT,
                progress=progress,
                timeout=120,
                until=struck,
            )
            await asyncio.wait_for(striking, timeout=60)
            await asyncio.wait_for(probing, timeout=120)
            history = History.read(history_dir.glob("client-*.jsonl"))
            facts = await gather_facts(
                SystemAccess.of_stack(info, tokens),
                history,
                tmp_path / "facts",
                grace=GRACE_SECONDS,
            )
            acknowledged = sorted(history.acknowledged())
            reasons = await _diagnosed(info, stage, acknowledged)
        leftovers = [p.name for p in (disk.path / ".tmp").iterdir()]
    verdicts = check(history, facts)
    print(verdicts_markdown(verdicts))
    print(
        f"{time.monotonic() - started:.1f} s in all; {strike.held_bytes} bytes filled the disk"
        f" as {stage} made {strike.entry} (strike {strike.strikes});"
        f" {strike.before} before, {strike.at_free} when"
        f" freed after {strike.full_until - strike.full_from:.1f} s; diagnosed {reasons}"
    )
    assert verdicts.ok, verdicts.summary()
    jobs = len(history.acknowledged())
    assert jobs > CLIENTS * JOBS_PER_CLIENT, "the workload's jobs and the probe's"
    assert verdicts["ended"].checked == jobs
    assert {record.state for record in facts.jobs.values()} == {"COMPLETED"}
    assert verdicts["one_signature"].checked == jobs
    assert strike.entry.startswith(f"{stage}."), "struck as the stage began an attempt"
    assert strike.at_free is not None and strike.at_free.retries > strike.before.retries, (
        f"{stage} retried while the disk was full"
    )
    assert ReasonCode.STORAGE_UNAVAILABLE.value in reasons, reasons
    refused = [
        op
        for op in history.of(Kind.REFUSED)
        if any(start <= op.monotonic <= end + 2.0 for start, end in strike.windows)
    ]
    assert refused, "a client was refused while the disk was full"
    assert all(op.retryable for op in refused), refused
    assert leftovers == [], "no temporary file left"


async def test_a_full_blob_disk_mid_assembly_loses_nothing(tmp_path: Path) -> None:
    await _run(tmp_path, dict(ENV), "assembler")


async def test_a_full_temp_disk_mid_validation_loses_nothing(tmp_path: Path) -> None:
    await _run(tmp_path, {**ENV, "QUIRE_BLOB_BACKEND": "nats"}, "validator")
