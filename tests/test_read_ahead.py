"""Reading ahead: a delivery's small documents are read while its lease is
taken, once each, and the delivery's outcome is what it would be without."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest
from nats.js import JetStreamContext
from sqlalchemy import MetaData

from quire.attemptfiles import AttemptFiles
from quire.database import Database
from quire.errors import PermanentError
from quire.leases import Lease, LeaseStore, lease_table
from quire.localblobs import LocalBlobStore
from quire.memoryfiles import InMemory
from quire.pipeline import State, stage
from quire.readahead import ReadingAhead, reading_ahead
from quire.reasons import ReasonCode
from quire.settings import QueueSettings
from quire.stage import StageResult, StageRunner, Step
from quire.testing.sealedstore import sealed_store
from quire.transitions import EventFactory
from quire.type import queue_pb2
from quire.workqueue import WORK_STREAM, Publisher, consumer_name, work_subject

JOB = "jobs/0123456789abcdef"
LIMIT = 1 << 16


class _CountingStore(LocalBlobStore):
    """A sealed store that counts its reads into memory and can hold them back."""

    reads: list[str]
    held: asyncio.Event | None
    loop: asyncio.AbstractEventLoop | None

    def plain_bytes(self, key: str, sha256: str, limit: int) -> bytes | None:
        self.reads.append(key)
        if self.held is not None and self.loop is not None:
            asyncio.run_coroutine_threadsafe(self.held.wait(), self.loop).result(timeout=10)
        return super().plain_bytes(key, sha256, limit)


def _store(tmp_path: Path) -> _CountingStore:
    plain = sealed_store(tmp_path / "blobs")
    store = _CountingStore(tmp_path / "blobs", plain.keys)
    store.reads, store.held, store.loop = [], None, None
    return store


def _put(store: LocalBlobStore, data: bytes) -> tuple[str, str]:
    with store.writer("t1") as writer:
        writer.write(data)
        digest = writer.sha256
        writer.promote(f"uploads/t1/{digest}")
    return f"uploads/t1/{digest}", digest


async def test_a_document_read_ahead_is_taken_not_read_again(tmp_path: Path) -> None:
    store = _store(tmp_path)
    key, digest = _put(store, b"%PDF-1.7 small")
    with reading_ahead(ReadingAhead(store, LIMIT, [(key, digest), (key, digest)])):
        async with AttemptFiles(store, in_memory_bytes=LIMIT) as files:
            document = await files.document(key, digest)
    assert isinstance(document, InMemory) and document.data == b"%PDF-1.7 small"
    assert store.reads == [key], "read once, ahead, and taken from there"


async def test_a_document_that_fails_ahead_is_read_again_and_its_error_raised(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    key, digest = _put(store, b"%PDF-1.7 small")
    wrong = hashlib.sha256(b"other").hexdigest()
    with reading_ahead(ReadingAhead(store, LIMIT, [(key, wrong), ("uploads/t1/gone", wrong)])):
        async with AttemptFiles(store, in_memory_bytes=LIMIT) as files:
            with pytest.raises(PermanentError) as altered:
                await files.document(key, wrong)
            with pytest.raises(PermanentError) as missing:
                await files.document("uploads/t1/gone", wrong)
    assert altered.value.reason is ReasonCode.DIGEST_MISMATCH
    assert missing.value.reason is ReasonCode.SOURCE_MISSING
    assert store.reads == [key, "uploads/t1/gone", key, "uploads/t1/gone"]


async def test_a_document_too_large_for_memory_goes_to_the_private_directory(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    key, digest = _put(store, b"%PDF" + bytes(200))
    with reading_ahead(ReadingAhead(store, 64, [(key, digest)])):
        async with AttemptFiles(store, in_memory_bytes=64) as files:
            document = await files.document(key, digest)
            assert isinstance(document, str)
            assert Path(document).read_bytes() == b"%PDF" + bytes(200)


async def test_what_a_delivery_did_not_take_is_dropped_when_it_ends(tmp_path: Path) -> None:
    store = _store(tmp_path)
    key, digest = _put(store, b"%PDF-1.7 small")
    store.held, store.loop = asyncio.Event(), asyncio.get_running_loop()
    reading = ReadingAhead(store, LIMIT, [(key, digest)])
    with reading_ahead(reading):
        await asyncio.sleep(0.05)  # the read is under way, held on its thread
    store.held.set()
    async with AttemptFiles(store, in_memory_bytes=LIMIT) as files:
        assert await reading.take(key, digest) is None, "nothing is left to take"
        # Outside the delivery, a read is the caller's own.
        assert isinstance(await files.document(key, digest), InMemory)
    assert store.reads == [key, key]


class _ReadingWork:
    """Reads its one source through AttemptFiles, as the stages do."""

    def __init__(self, store: LocalBlobStore, key: str, digest: str) -> None:
        self.store, self.key, self.digest = store, key, digest
        self.read: bytes = b""

    def read_ahead(self, task: queue_pb2.JobTask) -> ReadingAhead:
        return ReadingAhead(self.store, LIMIT, [(self.key, self.digest)])

    async def process(self, task: queue_pb2.JobTask, lease: Lease, attempt: int) -> StageResult:
        async with AttemptFiles(self.store, in_memory_bytes=LIMIT) as files:
            document = await files.document(self.key, self.digest)
        assert isinstance(document, InMemory)
        self.read = document.data
        return StageResult.hand_on(task, steps=(Step(State.VALIDATING, State.REVIEWING),))


class _SlowLeases(LeaseStore):
    """Leases that take a while, the time the read ahead has."""

    async def acquire(self, job: str) -> Lease:
        await asyncio.sleep(0.2)
        return await super().acquire(job)


async def test_a_stage_reads_its_sources_while_it_takes_the_lease(
    tmp_path: Path, jetstream: JetStreamContext, fast_queue: QueueSettings
) -> None:
    store = _store(tmp_path)
    key, digest = _put(store, b"%PDF-1.7 the source")
    metadata = MetaData()
    table = lease_table(metadata)
    database = Database(f"sqlite:///{tmp_path / 'leases.db'}", metadata)
    database.create_schema()
    work = _ReadingWork(store, key, digest)
    runner = StageRunner(
        stage=stage("validate"),
        work=work,
        leases=_SlowLeases(database, table),
        publisher=Publisher(jetstream),
        events=EventFactory("validator", "test", "0"),
        queue=fast_queue,
    )
    task = queue_pb2.JobTask(job=JOB, tenant="t1", priority="interactive")
    await jetstream.publish(work_subject("validate", "interactive"), task.SerializeToString())
    validate = await jetstream.pull_subscribe_bind(
        durable=consumer_name("validate", "interactive"), stream=WORK_STREAM
    )
    (delivery,) = await validate.fetch(1, timeout=5)
    handling = asyncio.create_task(runner.handle(delivery))
    await asyncio.sleep(0.1)
    assert store.reads == [key], "read while the lease is still being taken"
    await handling
    assert work.read == b"%PDF-1.7 the source"
    assert store.reads == [key], "and not read again by the work"
    assemble = await jetstream.pull_subscribe_bind(
        durable=consumer_name("assemble", "interactive"), stream=WORK_STREAM
    )
    assert len(await assemble.fetch(5, timeout=1)) == 1
