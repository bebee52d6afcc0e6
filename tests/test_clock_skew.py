"""Skewed clocks lose nothing (issue 42), on real stacks: one service's
wall clock is moved minutes ahead and behind while a recorded workload
runs (libfaketime, ``quire.testing.skewedclock``: the process keeps
running, its monotonic clock stays real), then set right; afterwards every
property of the history checker holds.

- **Audit** five minutes behind, then five minutes ahead, each while it
  signs checkpoints: no checkpoint is dated before the one it extends, one
  signed while ahead carries audit's wrong time (the skew really took
  hold), every chain and checkpoint verifies; admission's calls to audit
  are refused ``CLOCK_SKEW`` on the way (its proofs are minutes off audit's
  clock), and clients meet a typed, retryable refusal meanwhile.
- **The signer** five minutes behind while it signs: leases are tokens in
  its own database, fenced by compare-and-set, never judged by its clock,
  so every job is signed once; the signatures it makes verify.
- **The validator** five minutes ahead: likewise, and admission keeps
  taking jobs on its last answer of the validator's rulesets while its
  calls to the validator are refused.
- **The validator** five minutes ahead judges a job's deadline (admission's
  clock) on JetStream's clock, as its tasks bound it, and ends no job
  before its deadline.
- **Admission** five minutes ahead: it acknowledges submits (its own
  database's clock alone decides its windows), its calls to audit and the
  validator are refused ``CLOCK_SKEW`` (logged by both), clients' reads
  are still answered (from what admission relays), and every acknowledged
  job completes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest

from quire.client import PacketItem, TenantAdminClient
from quire.jobs import state_name
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.history import (
    History,
    Kind,
    SystemAccess,
    SystemFacts,
    check,
    gather_facts,
    verdicts_markdown,
)
from quire.testing.history.recorder import HistoryLog, RecordingClient
from quire.testing.history.workload import Progress, run_workload
from quire.testing.pdfs import write_text_pdf
from quire.testing.skewedclock import SkewedClock
from quire.testing.soak import SOAK_ENV
from quire.testing.sourcerecords import TAX_RECORD
from quire.testing.sourceserver import SourceServer

pytestmark = [pytest.mark.stack, pytest.mark.fault]

SKEW_SECONDS = 300
CLIENTS = 2
JOBS_PER_CLIENT = 4
GRACE_SECONDS = 40.0
EVENT_SECONDS = 30.0
"""Bound on waiting for what a skewed service does while skewed."""
ENV = {**SOAK_ENV, "QUIRE_AUDIT_CHECKPOINT_SECONDS": "1"}


@dataclass
class Skewing:
    """What happened while the clock was off: each offset, with when it was
    set and set right again (monotonic)."""

    phases: list[tuple[int, float, float]] = field(default_factory=list)
    seen: dict[int, object] = field(default_factory=dict)
    """What the service did under each offset (the test's own record)."""


Event = Callable[[Stack, StackInfo, int], Awaitable[object]]
"""Waits until the skewed service has done its part under an offset; what it did."""
Ready = Callable[[Stack, Progress], Awaitable[None]]
"""Waits until the moment to skew the clock."""


async def _a_job_just_acknowledged(_stack: Stack, progress: Progress) -> None:
    """The next submit's acknowledgement: a job is in flight from here on."""
    print(f"skewing after acknowledgement {progress.acknowledged + 1}")
    await progress.reached(progress.acknowledged + 1)


async def _skew(
    stack: Stack,
    info: StackInfo,
    clock: SkewedClock,
    progress: Progress,
    offsets: tuple[int, ...],
    event: Event,
    ready: Ready,
    skewing: Skewing,
) -> None:
    for offset in offsets:
        await asyncio.wait_for(ready(stack, progress), EVENT_SECONDS)
        clock.set(offset)
        began = time.monotonic()
        try:
            skewing.seen[offset] = await asyncio.wait_for(event(stack, info, offset), EVENT_SECONDS)
        finally:
            clock.set(0)
            skewing.phases.append((offset, began, time.monotonic()))


async def _run(
    tmp_path: Path,
    service: str,
    offsets: tuple[int, ...],
    event: Event,
    ready: Ready = _a_job_just_acknowledged,
    jobs_per_client: int = JOBS_PER_CLIENT,
) -> tuple[Stack, History, Skewing, SystemFacts]:
    clock = SkewedClock(tmp_path / f"{service}.clock")
    stack = Stack(tmp_path / "stack", env=ENV, service_env={service: clock.env()})
    info = await asyncio.to_thread(stack.start)
    try:
        async with TenantAdminClient(info.endpoints["admission"], info.operator_token()) as admin:
            made = [await admin.create_tenant(f"skew-{n}") for n in range(2)]
        tokens = {reply.tenant.name: reply.secret for reply in made}
        progress = Progress()
        skewing = Skewing()
        skewer = asyncio.create_task(
            _skew(stack, info, clock, progress, offsets, event, ready, skewing)
        )
        history = await run_workload(
            info.endpoints["admission"],
            [reply.secret for reply in made],
            tmp_path / "history",
            jobs_per_client=jobs_per_client,
            progress=progress,
            timeout=150,
        )
        await asyncio.wait_for(skewer, timeout=2 * EVENT_SECONDS * len(offsets))
        history = History.read((tmp_path / "history").glob("client-*.jsonl"))
        facts = await gather_facts(
            SystemAccess.of_stack(info, tokens), history, tmp_path / "facts", grace=GRACE_SECONDS
        )
    finally:
        clock.set(0)
        await asyncio.to_thread(stack.stop)
    verdicts = check(history, facts)
    print(verdicts_markdown(verdicts))
    print(f"{service} skewed: {skewing.phases}; under each offset: {skewing.seen}")
    assert verdicts.ok, verdicts.summary()
    assert verdicts["ended"].checked >= CLIENTS * jobs_per_client
    assert {record.state for record in facts.jobs.values()} == {"COMPLETED"}
    assert verdicts["one_signature"].checked == verdicts["ended"].checked
    return stack, history, skewing, facts


def _checkpoints(stack: Stack) -> list[dict[str, object]]:
    folder = stack.data_dir / "audit" / "checkpoints"
    return [json.loads(path.read_text())["checkpoint"] for path in sorted(folder.glob("*.json"))]


async def _a_checkpoint_extended(stack: Stack, _info: StackInfo, offset: int) -> object:
    """Until audit signs, under the offset, a checkpoint that extends an
    earlier one; its time and its predecessor's.

    A round stamped just before the offset may write its file after this
    starts; its time tells it apart. Behind, audit's own clock reads earlier
    than any checkpoint it signed in the last ``-offset`` seconds, so a
    checkpoint signed under the offset is dated at most at its predecessor
    (at it, by the stamping rule; before it, without the rule): one dated
    after it was stamped before the offset. Ahead, one dated less than half
    the offset past now was stamped before it."""
    set_at = datetime.now(UTC)
    before = {(c["tenant"], c["length"]) for c in _checkpoints(stack)}
    while True:
        signed = {(c["tenant"], c["length"]): c for c in _checkpoints(stack)}
        for key, c in signed.items():
            previous = signed.get((c["tenant"], c.get("previous_length", 0)))
            if key in before or previous is None:
                continue
            when = datetime.fromisoformat(str(c["time"]))
            its_predecessor = datetime.fromisoformat(str(previous["time"]))
            stamped_before_the_offset = (
                when > its_predecessor
                if offset < 0
                else (when - set_at).total_seconds() < offset / 2
            )
            if not stamped_before_the_offset:
                return when, its_predecessor
        await asyncio.sleep(0.1)


async def _checkpointed_and_acknowledged(stack: Stack, progress: Progress) -> None:
    """Once each tenant has a checkpoint, the next acknowledgement: its
    job's entries will extend one."""
    while len({c["tenant"] for c in _checkpoints(stack)}) < CLIENTS:
        await asyncio.sleep(0.1)
    await _a_job_just_acknowledged(stack, progress)


async def test_a_skewed_audit_signs_no_checkpoint_back_in_time(tmp_path: Path) -> None:
    started = time.monotonic()
    stack, _history, skewing, _facts = await _run(
        tmp_path,
        "audit",
        (-SKEW_SECONDS, SKEW_SECONDS),
        _a_checkpoint_extended,
        _checkpointed_and_acknowledged,
        jobs_per_client=8,
    )
    by_tenant: dict[str, list[tuple[int, datetime]]] = {}
    for c in _checkpoints(stack):
        when = datetime.fromisoformat(str(c["time"]))
        by_tenant.setdefault(str(c["tenant"]), []).append((int(str(c["length"])), when))
    for tenant, signed in by_tenant.items():
        times = [when for _length, when in sorted(signed)]
        assert times == sorted(times), f"{tenant}'s checkpoints went back in time: {signed}"
    behind, its_predecessor = skewing.seen[-SKEW_SECONDS]  # type: ignore[misc]
    assert behind == its_predecessor, "signed while behind: dated at the one it extends"
    ahead, _ = skewing.seen[SKEW_SECONDS]  # type: ignore[misc]
    lead = (ahead - datetime.now(UTC)).total_seconds()
    assert lead > SKEW_SECONDS / 2, "signed while ahead: dated by audit's wrong clock"
    log = (stack.data_dir / "logs" / "audit.log").read_text()
    assert "refused: its clock is" in log, "admission's calls refused as CLOCK_SKEW"
    print(f"{time.monotonic() - started:.1f} s in all")


def _done(stack: Stack, service: str) -> int:
    """Deliveries ``service`` finished and handed on, by its log."""
    log = stack.data_dir / "logs" / f"{service}.log"
    return sum(1 for line in log.read_text().splitlines() if "done at attempt" in line)


def _a_stage_done(service: str) -> Event:
    async def done(stack: Stack, _info: StackInfo, _offset: int) -> object:
        """Until the skewed stage has finished a job under the offset."""
        before = _done(stack, service)
        while (count := _done(stack, service)) <= before:
            await asyncio.sleep(0.1)
        return count - before

    return done


@pytest.mark.parametrize(
    ("service", "offset"), [("signer", -SKEW_SECONDS), ("validator", SKEW_SECONDS)]
)
async def test_a_skewed_stage_works_each_job_once(
    tmp_path: Path, service: str, offset: int
) -> None:
    started = time.monotonic()
    _stack, _history, skewing, _facts = await _run(
        tmp_path, service, (offset,), _a_stage_done(service)
    )
    assert skewing.seen[offset], f"{service} finished work while skewed"
    print(f"{time.monotonic() - started:.1f} s in all")


async def _acknowledged(stack: Stack, info: StackInfo, _offset: int) -> object:
    """Under the offset, a recorded client of the test's own (its history
    joins the workload's, and the checker follows its job to its end):
    admission acknowledges its submit; the job."""
    history = stack.data_dir.parent / "history"
    with HistoryLog(history / "client-skewed.jsonl", "client-skewed") as log:
        async with RecordingClient(
            info.endpoints["admission"], info.token(), history=log
        ) as client:
            path = write_text_pdf(Path(info.data_dir) / "skewed.pdf", ["skew", uuid.uuid4().hex])
            digest = (await client.upload(path)).sha256
            job = await client.submit([PacketItem("skewed", digest)])
            # And a read, which admission answers from audit: one call to
            # audit under the offset for certain, whatever the workload does.
            with contextlib.suppress(grpc.aio.AioRpcError):
                await client.get_job(job.name)
    return job.name


async def test_a_skewed_admission_accepts_and_nothing_is_lost(tmp_path: Path) -> None:
    started = time.monotonic()
    stack, history, skewing, facts = await _run(
        tmp_path, "admission", (SKEW_SECONDS,), _acknowledged
    )
    job = skewing.seen[SKEW_SECONDS]
    assert facts.jobs[job].state == "COMPLETED", "acknowledged while ahead, and completed"
    refused = list(history.of(Kind.REFUSED))
    assert all(op.retryable for op in refused), refused
    log = (stack.data_dir / "logs" / "audit.log").read_text()
    assert "calls from admission refused: its clock is +300 s" in log
    print(f"{time.monotonic() - started:.1f} s in all; refusals {len(refused)}")


async def test_a_validator_ahead_ends_no_job_before_its_deadline(tmp_path: Path) -> None:
    """A job naming a source by reference has a deadline (admission's clock,
    a 120 s budget); the validator, five minutes ahead, judges it on
    JetStream's clock (``quire.queueclock``) and fetches, where its own
    clock would have ended the job DEADLINE_EXCEEDED at once."""
    started = time.monotonic()
    clock = SkewedClock(tmp_path / "validator.clock")
    stack = Stack(
        tmp_path / "stack",
        env={**ENV, "QUIRE_JOB_BUDGET_RESERVE_SECONDS": "2"},
        service_env={"validator": clock.env()},
    )
    info = await asyncio.to_thread(stack.start)
    history_dir = tmp_path / "history"
    history_dir.mkdir()
    try:
        with SourceServer() as server:
            server.put_json("tax", "records/NL-1", TAX_RECORD)
            async with TenantAdminClient(
                info.endpoints["admission"], info.operator_token()
            ) as admin:
                made = await admin.create_tenant("deadline")
                await admin.put_source_system(
                    made.tenant.name,
                    "tax",
                    base_url=server.base_url("tax"),
                    timeout=2.0,
                    schema="tax-record@1",
                )
            with HistoryLog(history_dir / "client-0.jsonl", "client-0") as log:
                async with RecordingClient(
                    info.endpoints["admission"], made.secret, history=log
                ) as client:
                    cover = write_text_pdf(tmp_path / "cover.pdf", ["cover", uuid.uuid4().hex])
                    digest = (await client.upload(cover)).sha256
                    first = await client.submit([PacketItem("cover", digest)])
                    await client.wait(first.name, timeout=EVENT_SECONDS)  # the clocks agree
                    clock.set(SKEW_SECONDS)
                    job = await client.submit(
                        [
                            PacketItem("cover", digest),
                            PacketItem.reference("tax", "tax", "records/NL-1"),
                        ],
                        budget=120,
                    )
                    await client.wait(job.name, timeout=EVENT_SECONDS)
                    ended = await client.get_job(job.name)
                    clock.set(0)
                    if state_name(ended.state) == "COMPLETED":
                        await client.download(job.name, tmp_path / "out.pdf")
        history = History.read(history_dir.glob("client-*.jsonl"))
        facts = await gather_facts(
            SystemAccess.of_stack(info, {made.tenant.name: made.secret}),
            history,
            tmp_path / "facts",
            grace=GRACE_SECONDS,
        )
    finally:
        clock.set(0)
        await asyncio.to_thread(stack.stop)
    verdicts = check(history, facts)
    print(verdicts_markdown(verdicts))
    assert state_name(ended.state) == "COMPLETED", (state_name(ended.state), ended.reason_code)
    assert verdicts.ok, verdicts.summary()
    log_text = (stack.data_dir / "logs" / "validator.log").read_text()
    assert "this host's clock may run ahead" in log_text
    print(f"{time.monotonic() - started:.1f} s in all")
