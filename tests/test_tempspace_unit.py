"""Temporary space without the stack: usage per owner, sweeping dead owners'
leftovers, storage errors classified, storage faults refusing every write and
leaving nothing behind, a stage's budget closing its worker's pull gate, and
admission's shedding rule."""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
from pathlib import Path

import pytest
from nats.js import JetStreamContext

from quire.admission.uploads.tempguard import TempSpaceGuard
from quire.blobstore import storage_error
from quire.errors import Overloaded, SystemFailure, TransientError
from quire.faultyblobs import FaultInjectingBlobStore
from quire.reasons import ReasonCode
from quire.settings import TempSpaceSettings
from quire.tempspace import (
    UNKNOWN_OWNER,
    TempBudget,
    TempKeeper,
    TempSpaceMonitor,
    entry_bytes,
    local_owner,
    measure_usage,
    owner_of,
    owner_prefix,
    sweep_leftovers,
    temp_prefix,
)
from quire.testing.sealedstore import sealed_store
from quire.workqueue import WORK_STREAM, WorkQueueWorker, consumer_name, work_subject


def _dead_pid() -> int:
    process = subprocess.Popen(["sleep", "0"])
    process.wait()
    return process.pid


def _fill(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)
    return path


def test_usage_is_counted_per_owner_and_recursively(tmp_path: Path) -> None:
    attempt = tmp_path / (temp_prefix("assembler", "attempt") + "a1")
    _fill(attempt / "rendered-0.pdf", 100)
    _fill(attempt / "nested" / "more.bin", 50)
    _fill(tmp_path / (temp_prefix("signer", "part") + "b2"), 30)
    _fill(tmp_path / "not-ours.bin", 7)

    usage = measure_usage(tmp_path)

    assert usage.of("assembler") == 150
    assert usage.of("signer") == 30
    assert usage.of(UNKNOWN_OWNER) == 7
    assert usage.of("validator") == 0
    assert usage.total_bytes == 187
    assert usage.free_bytes > 0


def test_an_entry_that_vanished_while_measured_counts_nothing(tmp_path: Path) -> None:
    assert entry_bytes(tmp_path / "gone") == 0
    assert measure_usage(tmp_path / "never-made").total_bytes == 0


def test_the_sweep_removes_dead_owners_entries_and_keeps_live_ones(tmp_path: Path) -> None:
    dead = local_owner("assembler", _dead_pid())
    dead_file = _fill(tmp_path / (owner_prefix(dead, "part") + "x"), 10)
    dead_dir = tmp_path / (owner_prefix(dead, "attempt") + "y")
    _fill(dead_dir / "deep" / "rendered.pdf", 10)
    live = _fill(tmp_path / (temp_prefix("test", "keep") + "z"), 10)

    assert sweep_leftovers(tmp_path) == 2
    assert not dead_file.exists() and not dead_dir.exists()
    assert live.exists()
    assert sweep_leftovers(tmp_path) == 0, "a second sweeper finds nothing and fails nothing"


async def test_a_keeper_sweeps_at_start_and_then_periodically(tmp_path: Path) -> None:
    keeper = TempKeeper(tmp_path, TempSpaceSettings(sweep_seconds=0.1), service="validator")
    dead = local_owner("assembler", _dead_pid())
    first = _fill(tmp_path / (owner_prefix(dead, "part") + "first"), 10)
    await keeper.start()
    try:
        assert not first.exists()
        assert keeper.monitor.reading is not None, "a first reading is taken at start"
        second = _fill(tmp_path / (owner_prefix(dead, "part") + "second"), 10)
        for _ in range(40):
            if not second.exists():
                break
            await asyncio.sleep(0.05)
        assert not second.exists()
    finally:
        await keeper.stop()


@pytest.mark.parametrize(
    ("code", "kind", "reason"),
    [
        (errno.EROFS, SystemFailure, ReasonCode.STORAGE_FAILED),
        (errno.EACCES, SystemFailure, ReasonCode.STORAGE_FAILED),
        (errno.EPERM, SystemFailure, ReasonCode.STORAGE_FAILED),
        (errno.EIO, TransientError, ReasonCode.STORAGE_UNAVAILABLE),
        (errno.ENOSPC, TransientError, ReasonCode.STORAGE_UNAVAILABLE),
        (errno.EDQUOT, TransientError, ReasonCode.STORAGE_UNAVAILABLE),
        (errno.EAGAIN, TransientError, ReasonCode.STORAGE_UNAVAILABLE),
    ],
)
def test_storage_errors_are_classified(code: int, kind: type, reason: ReasonCode) -> None:
    error = storage_error(OSError(code, os.strerror(code)), "write failed")
    assert type(error) is kind
    assert error.reason == reason


def test_temporary_entries_are_named_after_their_owner(tmp_path: Path) -> None:
    store = sealed_store(tmp_path, owner="assembler")
    made = [store.new_temp(), store.new_temp_dir(), store.writer("t").path]
    for path in made:
        owner = owner_of(path)
        assert owner is not None and (owner.service, owner.pid) == ("assembler", os.getpid())
    assert sealed_store(tmp_path).owner, "a store built without an owner still names its entries"


@pytest.mark.parametrize(
    ("fault", "kind", "reason"),
    [
        ("storage.transient", TransientError, ReasonCode.STORAGE_UNAVAILABLE),
        ("storage.permanent", SystemFailure, ReasonCode.STORAGE_FAILED),
    ],
)
def test_a_storage_fault_refuses_every_write_and_leaves_nothing(
    tmp_path: Path, fault: str, kind: type, reason: ReasonCode
) -> None:
    faults = tmp_path / "faults"
    faults.mkdir()
    store = FaultInjectingBlobStore(sealed_store(tmp_path / "blobs", owner="admission"), faults)
    finished = store.new_temp()
    _fill(finished, 5)
    writer = store.writer("t")
    writer.write(b"half")
    (faults / fault).touch()

    for write in (
        lambda: store.writer("t"),
        store.new_temp,
        store.new_temp_dir,
        lambda: store.promote_file(finished, "sources/t/finished"),
    ):
        with pytest.raises(kind) as refused:
            write()
        assert refused.value.reason == reason
    with writer, pytest.raises(kind):
        writer.write(b"more")
    assert list(store.tmp_dir.iterdir()) == [], "no temporary file is left"
    assert not store.exists("sources/t/finished"), "no half-stored blob"

    (faults / fault).unlink()
    with store.writer("t") as healed:
        healed.write(b"ok")
        assert healed.promote("sources/t/healed")
    assert store.exists("sources/t/healed")


async def test_a_budget_closes_while_its_stage_is_over_and_opens_when_usage_drops(
    tmp_path: Path,
) -> None:
    monitor = TempSpaceMonitor(tmp_path, interval_seconds=0.05)
    budget = TempBudget(monitor, service="assembler", budget_bytes=100, poll_seconds=0.05)
    assert not budget.over(), "no reading yet: open"
    big = _fill(tmp_path / (temp_prefix("assembler", "part") + "big"), 200)
    _fill(tmp_path / (temp_prefix("signer", "part") + "other"), 500)
    await monitor.refresh()
    assert budget.over()

    measuring = asyncio.create_task(monitor.run())
    waiting = asyncio.create_task(budget.wait_open())
    try:
        await asyncio.sleep(0.3)
        assert not waiting.done(), "closed while over budget"
        big.unlink()
        await asyncio.wait_for(waiting, timeout=2)
        assert not budget.over(), "another stage's bytes do not count against this one"
    finally:
        measuring.cancel()
        waiting.cancel()


class _Gate:
    """A pull gate the test opens by hand."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()

    async def wait_open(self) -> None:
        await self.opened.wait()

    def is_open(self) -> bool:
        return self.opened.is_set()


async def test_a_worker_takes_nothing_while_its_pull_gate_is_closed(
    jetstream: JetStreamContext,
) -> None:
    handled: list[bytes] = []

    async def handler(msg) -> None:  # type: ignore[no-untyped-def]
        handled.append(msg.data)
        await msg.ack()

    gate = _Gate()
    await jetstream.publish(work_subject("assemble", "interactive"), b"job")
    worker = WorkQueueWorker(
        jetstream,
        stream=WORK_STREAM,
        consumers={consumer_name("assemble", "interactive"): 2},
        handler=handler,
        ack_wait_seconds=5,
        fetch_timeout_seconds=0.5,
        pull_gate=gate,
    )
    worker.start()
    try:
        await asyncio.sleep(0.8)
        assert handled == []
        info = await jetstream.consumer_info(WORK_STREAM, consumer_name("assemble", "interactive"))
        assert info.num_pending == 1 and info.num_ack_pending == 0, "not even leased"
        gate.opened.set()
        for _ in range(40):
            if handled:
                break
            await asyncio.sleep(0.05)
        assert handled == [b"job"]
    finally:
        await worker.drain()


def _guard(tmp_path: Path, **limits: int) -> tuple[TempSpaceGuard, TempSpaceMonitor]:
    monitor = TempSpaceMonitor(tmp_path, interval_seconds=1)
    settings = TempSpaceSettings(**limits)  # type: ignore[arg-type]
    return TempSpaceGuard(monitor, settings, retry_after_seconds=3), monitor


async def test_admission_refuses_at_nine_tenths_of_the_pipeline_limit(tmp_path: Path) -> None:
    guard, monitor = _guard(tmp_path, space_limit_bytes=1000, free_reserve_bytes=0)
    guard.check()  # before the first reading: open
    _fill(tmp_path / (temp_prefix("assembler", "part") + "a"), 500)
    await monitor.refresh()
    guard.check()
    _fill(tmp_path / (temp_prefix("validator", "part") + "b"), 400)
    await monitor.refresh()
    with pytest.raises(Overloaded) as refused:
        guard.check()
    assert refused.value.reason == ReasonCode.TEMP_SPACE_LOW
    assert refused.value.retry_after == 3
    assert refused.value.quota[0].subject == "pipeline:temp_space_bytes"


async def test_admission_refuses_when_the_disk_is_under_its_free_reserve(tmp_path: Path) -> None:
    guard, monitor = _guard(tmp_path, free_reserve_bytes=2**62)
    await monitor.refresh()
    with pytest.raises(Overloaded) as refused:
        guard.check()
    assert refused.value.reason == ReasonCode.TEMP_SPACE_LOW
    assert refused.value.quota[0].subject == "disk:free_bytes"


class _ClosingGate:
    """Open for the pull, closed by the time the message arrives."""

    def __init__(self) -> None:
        self.calls = 0
        self.never = asyncio.Event()

    async def wait_open(self) -> None:
        self.calls += 1
        if self.calls > 1:
            await self.never.wait()

    def is_open(self) -> bool:
        return self.calls < 1  # closed once the pull has passed it


async def test_a_message_held_at_a_closed_gate_is_released_when_the_worker_drains(
    jetstream: JetStreamContext,
) -> None:
    handled: list[bytes] = []

    async def handler(msg) -> None:  # type: ignore[no-untyped-def]
        handled.append(msg.data)
        await msg.ack()

    worker = WorkQueueWorker(
        jetstream,
        stream=WORK_STREAM,
        consumers={consumer_name("assemble", "interactive"): 1},
        handler=handler,
        ack_wait_seconds=30,
        fetch_timeout_seconds=2,
        pull_gate=_ClosingGate(),
    )
    worker.start()
    await asyncio.sleep(0.3)  # the pull is waiting
    await jetstream.publish(work_subject("assemble", "interactive"), b"job")
    consumer = consumer_name("assemble", "interactive")
    for _ in range(40):
        if (await jetstream.consumer_info(WORK_STREAM, consumer)).num_ack_pending == 1:
            break
        await asyncio.sleep(0.05)
    assert (await jetstream.consumer_info(WORK_STREAM, consumer)).num_ack_pending == 1, "held"
    await asyncio.wait_for(worker.drain(), timeout=5)  # not held until the gate opens
    assert handled == [], "never started"
    successor = WorkQueueWorker(
        jetstream,
        stream=WORK_STREAM,
        consumers={consumer: 1},
        handler=handler,
        ack_wait_seconds=30,
        fetch_timeout_seconds=2,
    )
    successor.start()
    try:
        for _ in range(60):
            if handled:
                break
            await asyncio.sleep(0.05)
        assert handled == [b"job"], "handed back at once, not after its 30 s ack wait"
    finally:
        await successor.drain()


def test_without_a_faults_folder_the_store_has_no_fault_wrapper(tmp_path: Path) -> None:
    """Production opens the bare store: the fault checks are not in its write path."""
    from quire.settings import ServiceSettings
    from quire.storage import open_blob_store

    env = {"QUIRE_DATA_DIR": str(tmp_path), "QUIRE_KEK_FILE": str(_ring(tmp_path))}
    bare = open_blob_store(ServiceSettings.from_env("admission", env))
    assert not isinstance(bare, FaultInjectingBlobStore)
    wrapped = open_blob_store(
        ServiceSettings.from_env("admission", {**env, "QUIRE_FAULTS_DIR": str(tmp_path / "f")})
    )
    assert isinstance(wrapped, FaultInjectingBlobStore)


def _ring(tmp_path: Path) -> Path:
    from quire.kek import new_ring_line

    ring = tmp_path.parent / f"{tmp_path.name}-kek.ring"
    ring.write_text(new_ring_line("test-1"))
    return ring
