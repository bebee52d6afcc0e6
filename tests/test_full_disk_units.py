"""A full disk, part by part (issue 42), on a real tmpfs of a few
megabytes filled to ``ENOSPC``: what a stage meets there is a transient
``STORAGE_UNAVAILABLE`` however it meets it, a sandbox worker that cannot
write its output survives to say so, and a stage stops taking work while
the disk holding its temporary space is full.

Each fix here has its test: had ``quire.memoryfiles.save_pdf`` let qpdf
write to the disk itself, qpdf would abort the worker (``std::terminate``)
when a packet saved with a deterministic ``/ID`` meets ``ENOSPC``, which the
sandbox reports as a hostile file; the validator REJECTED a damaged but repairable source
(``PARSER_LIMIT_EXCEEDED``) because its temporary disk was full; a plaintext copy that cannot be written raised a
bare ``OSError`` (``INTERNAL`` in the diagnostics), and so did a new
tenant's first write, whose data key is stored on the same disk (admission
answered an upload INTERNAL), and a read from the NATS backend, which
stages the blob in the temporary space (admission answered a download
INTERNAL); and a stage's pull gate
ignored the disk's free space, so a full disk used up every job's
deliveries."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pikepdf
import pytest

from quire.blobstore import source_key
from quire.errors import TransientError
from quire.fullstorage import as_storage_error, is_full
from quire.memoryfiles import save_pdf
from quire.natsblobs import NatsBlobStore, ensure_blob_buckets
from quire.natsport import NatsPort
from quire.reasons import ReasonCode
from quire.runtime import connect_nats
from quire.sandbox import SandboxPool
from quire.settings import SandboxSettings
from quire.stack.natsserver import NatsServer
from quire.tempspace import TempBudget, TempSpaceMonitor
from quire.testing.damaged import EVERYDAY
from quire.testing.sealedstore import made_up_ring, sealed_store
from quire.testing.smallfs import MIB, Filler, SmallFileSystem
from quire.type import job_pb2, queue_pb2
from quire.validator.evaluation import Evaluator
from quire.validator.pdfchecks import PdfLimits
from quire.validator.rulesets import Ruleset

TENANT = "acme"


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallFileSystem]:
    with SmallFileSystem(tmp_path / "disk", 4 * MIB) as mounted:
        yield mounted


@pytest.fixture
async def pool() -> AsyncIterator[SandboxPool]:
    pool = SandboxPool(SandboxSettings(workers=1), name="full-disk-test")
    await pool.warm()
    try:
        yield pool
    finally:
        pool.close()


def _packet(source: str, out: str) -> int:
    """Runs in the worker: the source's pages saved as the assembler saves
    a packet (deterministic /ID, compressed streams)."""
    packet = pikepdf.new()
    with pikepdf.open(source) as opened:
        packet.pages.extend(opened.pages)
        save_pdf(packet, out, deterministic_id=True, compress_streams=True)
    return len(packet.pages)


def _many_pages(path: Path, pages: int) -> str:
    pdf = pikepdf.new()
    for _ in range(pages):
        pdf.add_blank_page()
    pdf.save(path)
    return str(path)


async def test_a_worker_saving_onto_a_full_disk_raises_enospc_and_lives(
    disk: SmallFileSystem, pool: SandboxPool
) -> None:
    source = _many_pages(disk.path / "source.pdf", 3000)
    replaced: list[int] = []
    pool.count_replacements(lambda: replaced.append(1))
    filler = Filler(disk.path)
    filler.fill(leave=100 * 1024)  # the first writes pass, a later one fails
    with pytest.raises(OSError) as failed:
        await pool.run(_packet, source, str(disk.path / "packet.pdf"))
    assert failed.value.errno == errno.ENOSPC, failed.value
    assert replaced == [], "the worker lived"
    filler.free()
    (disk.path / "packet.pdf").unlink()
    assert await pool.run(_packet, source, str(disk.path / "packet.pdf")) == 3000


def test_a_plaintext_copy_onto_a_full_disk_is_storage_unavailable(
    disk: SmallFileSystem,
) -> None:
    store = sealed_store(disk.path / "blobs")
    data = b"%PDF-1.7 " + bytes(range(256)) * 4096  # 1 MiB
    digest = hashlib.sha256(data).hexdigest()
    key = source_key(TENANT, digest)
    assert store.promote_bytes(data, key)
    attempt = store.new_temp_dir()
    filler = Filler(disk.path)
    filler.fill()
    with pytest.raises(TransientError) as failed:
        store.materialize(key, digest, attempt)
    assert failed.value.reason == ReasonCode.STORAGE_UNAVAILABLE
    assert list(attempt.iterdir()) == [], "no half-written copy is left"
    filler.free()
    copy = store.materialize(key, digest, attempt)
    assert copy.read_bytes() == data


def test_a_new_tenants_first_write_onto_a_full_disk_is_storage_unavailable(
    disk: SmallFileSystem,
) -> None:
    """Its data key is made then, and stored on the same disk: before the
    fix a bare OSError, which admission answered INTERNAL to an upload."""
    store = sealed_store(disk.path / "blobs")
    assert store.promote_bytes(b"first", source_key(TENANT, "a" * 64))
    filler = Filler(disk.path)
    filler.fill()
    with pytest.raises(TransientError) as failed:
        store.writer("newcomer")
    assert failed.value.reason == ReasonCode.STORAGE_UNAVAILABLE
    filler.free()
    with store.writer("newcomer") as writer:
        writer.write(b"second")
        assert writer.promote(source_key("newcomer", "b" * 64))


def test_a_blob_read_from_nats_onto_a_full_temporary_disk_is_storage_unavailable(
    disk: SmallFileSystem, nats_server: NatsServer
) -> None:
    """The NATS backend stages a blob's sealed bytes in the temporary space
    to read them: on a full disk that raised a bare OSError, which admission
    answered a download INTERNAL."""
    port = NatsPort(lambda: connect_nats(nats_server.url, "quire-test-full"), name="full")
    port.run(ensure_blob_buckets, port.js, 1)
    store = NatsBlobStore.open(port, made_up_ring(), disk.path / "tmp")
    try:
        data = bytes(range(256)) * 4096  # 1 MiB
        key = source_key(TENANT, hashlib.sha256(data).hexdigest())
        assert store.promote_bytes(data, key)
        filler = Filler(disk.path)
        filler.fill()
        with pytest.raises(TransientError) as failed:
            b"".join(store.read_plain(key))
        assert failed.value.reason == ReasonCode.STORAGE_UNAVAILABLE
        filler.free()
        assert b"".join(store.read_plain(key)) == data
    finally:
        store.close()


def test_a_blob_read_from_nats_onto_a_nearly_full_disk_is_storage_unavailable(
    disk: SmallFileSystem, nats_server: NatsServer
) -> None:
    """Room for all but the last few KiB of the blob: the disk takes part of
    a write, the rest waits in the file's buffer, and the flush that fails
    comes again when the file is closed. That second failure escaped as a
    bare OSError (a download answered INTERNAL while a temporary disk was
    nearly full)."""
    port = NatsPort(lambda: connect_nats(nats_server.url, "quire-test-nearly"), name="nearly")
    port.run(ensure_blob_buckets, port.js, 1)
    store = NatsBlobStore.open(port, made_up_ring(), disk.path / "tmp")
    try:
        data = bytes(range(256)) * 120  # 30 KiB: a signed packet's size
        key = source_key(TENANT, hashlib.sha256(data).hexdigest())
        assert store.promote_bytes(data, key)
        filler = disk.path / "filler"
        page = 4096
        with open(filler, "wb") as held:
            for room in range(len(data) - 4 * page, len(data) + 2 * page, page // 2):
                held.truncate(0)
                spare = os.statvfs(disk.path).f_bavail * page
                os.posix_fallocate(held.fileno(), 0, max(spare - room, page))
                try:
                    assert b"".join(store.read_plain(key)) == data
                except TransientError as failed:
                    assert failed.reason == ReasonCode.STORAGE_UNAVAILABLE, room
        filler.unlink()
        assert b"".join(store.read_plain(key)) == data
    finally:
        store.close()


def test_a_full_disk_met_anywhere_is_storage_unavailable() -> None:
    for code in (errno.ENOSPC, errno.EDQUOT):
        converted = as_storage_error(OSError(code, "full"))
        assert isinstance(converted, TransientError)
        assert converted.reason == ReasonCode.STORAGE_UNAVAILABLE
        assert is_full(converted.__cause__)  # type: ignore[arg-type]
    other = OSError(errno.EIO, "io")
    assert as_storage_error(other) is other, "only a full disk is classified here"


async def _assembler_gate(
    disk: SmallFileSystem, *, interval_seconds: float
) -> tuple[TempSpaceMonitor, TempBudget]:
    """The assembler's pull gate on ``disk`` (paused below 1 MiB free), after
    a first reading, and found open."""
    tmp = disk.path / ".tmp"
    tmp.mkdir()
    monitor = TempSpaceMonitor(tmp, interval_seconds=interval_seconds)
    budget = TempBudget(
        monitor,
        service="assembler",
        budget_bytes=2**40,
        poll_seconds=0.05,
        pause_free_bytes=MIB,
    )
    await monitor.refresh()
    assert budget.is_open()
    return monitor, budget


async def test_a_stage_takes_no_work_while_its_disk_is_full(disk: SmallFileSystem) -> None:
    monitor, budget = await _assembler_gate(disk, interval_seconds=0.05)
    filler = Filler(disk.path)
    filler.fill()
    await monitor.refresh()
    assert not budget.is_open(), "closed while the disk is full, whoever filled it"
    filler.free()
    await monitor.refresh()
    assert budget.is_open()


async def test_a_disk_filled_since_the_last_reading_closes_the_gate_at_once(
    disk: SmallFileSystem,
) -> None:
    """No new reading between the fill and the check: the gate asks the file
    system for its free space itself, so a stage does not pull retries onto
    a full disk for up to a reading's interval (spending their deliveries)."""
    monitor, budget = await _assembler_gate(disk, interval_seconds=3600)
    filler = Filler(disk.path)
    filler.fill()
    try:
        assert monitor.reading is not None and monitor.reading.free_bytes >= MIB
        assert not budget.is_open(), "closed by the disk's own free space, before a reading"
        waiting = asyncio.create_task(budget.wait_open())
        await asyncio.sleep(0.2)
        assert not waiting.done()
    finally:
        filler.free()
    await asyncio.wait_for(waiting, timeout=5)
    assert budget.is_open()


async def test_a_repair_written_onto_a_full_disk_is_no_verdict_on_the_file(
    disk: SmallFileSystem,
) -> None:
    """The validator rewrites a damaged PDF into the attempt's private
    directory. On a full disk qpdf aborted the worker, the shared lane and
    then the quarantine lane reported the file as exhausting them, and the
    job was REJECTED (PARSER_LIMIT_EXCEEDED) for a full disk: now the
    ENOSPC comes back from the worker, a transient fault of the stage."""
    blobs = sealed_store(disk.path / "blobs")
    settings = SandboxSettings(workers=1, in_memory_bytes=0)
    pool = SandboxPool(settings, name="full-disk-repair")
    quarantine = SandboxPool(settings, name="full-disk-quarantine")
    await pool.warm()
    await quarantine.warm()
    try:
        evaluator = Evaluator(blobs=blobs, sandbox=pool, limits=PdfLimits(), quarantine=quarantine)
        build, _code = EVERYDAY["xref-missing"]
        source = build(disk.path / "damaged.pdf")
        data = source.read_bytes()
        source.unlink()
        digest = hashlib.sha256(data).hexdigest()
        assert blobs.promote_bytes(data, source_key(TENANT, digest))
        task = queue_pb2.JobTask(
            job="jobs/j1",
            tenant=TENANT,
            sources=[
                job_pb2.SourceRef(
                    position=0,
                    document_id="d",
                    sha256=digest,
                    content_type="application/pdf",
                    size_bytes=len(data),
                    blob_key=source_key(TENANT, digest),
                )
            ],
        )
        ruleset = Ruleset.from_body({"name": "t", "version": "1", "rules": []})
        filler = Filler(disk.path)
        # Room for the source's plaintext copy, none for its rewrite.
        filler.fill(leave=-(-len(data) // 4096) * 4096)
        with pytest.raises(OSError) as failed:
            await evaluator.evaluate(task, ruleset)
        assert is_full(failed.value), failed.value
        filler.free()
        evaluation = await evaluator.evaluate(task, ruleset)
        assert evaluation.verdict == "PASSED", evaluation
    finally:
        pool.close()
        quarantine.close()
