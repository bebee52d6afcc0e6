"""Small documents go to sandbox workers as bytes, not files (issue 37):
a real worker process reads and writes them as in-memory files, keeps no
descriptor after a task whatever its outcome, an attempt makes no directory
for them, a larger document still goes through the private directory, a
wrong digest is refused in memory as on disk, and the packet and the repair
come out byte for byte the same either way."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pikepdf
import pytest

from quire.assembler.merge import PacketSource, assemble_packet
from quire.attemptfiles import AttemptFiles, keep, written
from quire.blobstore import source_key
from quire.errors import PermanentError
from quire.localblobs import LocalBlobStore
from quire.memoryfiles import InMemory, MemoryOutput
from quire.reasons import ReasonCode
from quire.sandbox import SandboxPool
from quire.settings import SandboxSettings
from quire.testing.damaged import EVERYDAY
from quire.testing.sealedstore import sealed_store
from quire.validator.repair import repair_pdf

TENANT = "acme"


@dataclass(frozen=True)
class _Pair:
    name: str
    source: str | InMemory


def _shout(pairs: list[_Pair], out: str) -> list[str]:
    """Runs in the worker: every source upper-cased into ``out``; the paths seen."""
    with open(out, "wb") as sink:
        for pair in pairs:
            with open(str(pair.source), "rb") as source:
                sink.write(source.read().upper())
    return [str(pair.source) for pair in pairs] + [out]


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def _fail_reading(source: str) -> None:
    with open(source, "rb") as handle:
        handle.read()
    raise ValueError("the task failed after reading")


@pytest.fixture
async def pool() -> AsyncIterator[SandboxPool]:
    pool = SandboxPool(SandboxSettings(workers=1), name="memory-files-test")
    await pool.warm()
    try:
        yield pool
    finally:
        pool.close()


async def test_a_worker_reads_and_writes_documents_held_in_memory(pool: SandboxPool) -> None:
    output = MemoryOutput()
    pairs = [_Pair("a", InMemory(b"first ")), _Pair("b", InMemory(b"second"))]
    seen = await pool.run(_shout, pairs, output)
    assert output.data == b"FIRST SECOND"
    assert all(path.startswith("/proc/self/fd/") for path in seen)
    assert pairs[0].source == InMemory(b"first ")  # the caller's arguments are its own


async def test_the_worker_keeps_no_descriptor_after_a_task_whatever_its_outcome(
    pool: SandboxPool,
) -> None:
    before = await pool.run(_open_descriptors)
    with pytest.raises(ValueError, match="failed after reading"):
        await pool.run(_fail_reading, InMemory(b"x" * 100_000))
    await pool.run(_shout, [_Pair("a", InMemory(b"y"))], MemoryOutput())
    assert await pool.run(_open_descriptors) == before


async def test_a_small_document_stays_in_memory_and_no_directory_is_made(tmp_path: Path) -> None:
    blobs = sealed_store(tmp_path / "blobs", owner="validator")
    data = b"%PDF-1.7 small"
    key = _kept(blobs, tmp_path, data)
    before = sorted(blobs.tmp_dir.iterdir())
    async with AttemptFiles(blobs, in_memory_bytes=1024) as files:
        document = await files.document(key, hashlib.sha256(data).hexdigest())
        output = await files.output("packet", in_memory=True)
        assert document == InMemory(data)
        assert isinstance(output, MemoryOutput)
        assert sorted(blobs.tmp_dir.iterdir()) == before


async def test_a_larger_document_goes_through_the_private_directory(tmp_path: Path) -> None:
    blobs = sealed_store(tmp_path / "blobs", owner="validator")
    data = os.urandom(4096)
    key = _kept(blobs, tmp_path, data)
    async with AttemptFiles(blobs, in_memory_bytes=1024) as files:
        document = await files.document(key, hashlib.sha256(data).hexdigest())
        assert isinstance(document, str)
        directory = Path(document).parent
        assert directory.parent == blobs.tmp_dir
        assert directory.stat().st_mode & 0o777 == 0o700
        assert Path(document).read_bytes() == data
        output = await files.output("packet", in_memory=False)
        assert isinstance(output, Path) and output.parent == directory
    assert not directory.exists()


async def test_several_documents_come_in_order_small_ones_read_in_one_trip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blobs = sealed_store(tmp_path / "blobs", owner="validator")
    small = [b"%PDF-1.7 first", b"%PDF-1.7 second"]
    large = os.urandom(4096)
    kept = [(_kept(blobs, tmp_path, d), hashlib.sha256(d).hexdigest()) for d in (*small, large)]
    trips: list[str] = []
    to_thread = asyncio.to_thread

    async def counted(function: Any, *args: Any, **kwargs: Any) -> Any:
        trips.append(getattr(function, "__name__", "?"))
        return await to_thread(function, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    async with AttemptFiles(blobs, in_memory_bytes=1024) as files:
        first, second, third = await files.documents([kept[0], kept[2], kept[1]])
        assert (first, third) == (InMemory(small[0]), InMemory(small[1]))
        assert isinstance(second, str) and Path(second).read_bytes() == large
    # The small ones in one trip; the large one was read until it was too
    # large, then copied into the private directory.
    assert trips.count("_read_small") == 1
    assert "plain_bytes" not in trips


async def test_a_wrong_digest_among_several_documents_is_refused(tmp_path: Path) -> None:
    blobs = sealed_store(tmp_path / "blobs", owner="validator")
    good = b"%PDF-1.7 good"
    key = _kept(blobs, tmp_path, good)
    other = _kept(blobs, tmp_path, b"%PDF-1.7 the stored bytes")
    async with AttemptFiles(blobs, in_memory_bytes=1024) as files:
        with pytest.raises(PermanentError) as refused:
            await files.documents(
                [(key, hashlib.sha256(good).hexdigest()), (other, hashlib.sha256(b"x").hexdigest())]
            )
    assert refused.value.reason == ReasonCode.DIGEST_MISMATCH


@pytest.mark.parametrize("in_memory_bytes", [0, 1 << 20])
async def test_a_wrong_digest_is_refused_in_memory_as_on_disk(
    tmp_path: Path, in_memory_bytes: int
) -> None:
    blobs = sealed_store(tmp_path / "blobs", owner="validator")
    key = _kept(blobs, tmp_path, b"%PDF-1.7 the stored bytes")
    async with AttemptFiles(blobs, in_memory_bytes=in_memory_bytes) as files:
        with pytest.raises(PermanentError) as refused:
            await files.document(key, hashlib.sha256(b"other bytes").hexdigest())
    assert refused.value.reason == ReasonCode.DIGEST_MISMATCH


async def test_an_output_held_in_memory_is_sealed_into_the_store(tmp_path: Path) -> None:
    blobs = sealed_store(tmp_path / "blobs", owner="assembler")
    output = MemoryOutput()
    output.data = b"%PDF-1.7 a packet"
    assert keep(blobs, written(output), f"assembled/{TENANT}/p.pdf")
    assert b"".join(blobs.read_plain(f"assembled/{TENANT}/p.pdf")) == output.data


def _pdf(tmp_path: Path, name: str, pages: int) -> Path:
    path = tmp_path / f"{name}.pdf"
    with pikepdf.new() as pdf:
        for _ in range(pages):
            pdf.add_blank_page()
        pdf.save(path)
    return path


async def test_a_packet_merged_in_memory_is_the_packet_merged_from_files(
    pool: SandboxPool, tmp_path: Path
) -> None:
    files = [_pdf(tmp_path, f"s{i}", i + 1) for i in range(3)]

    def sources(as_bytes: bool) -> list[PacketSource]:
        return [
            PacketSource(
                position=i,
                document_id=f"d{i}",
                sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
                content_type="application/pdf",
                path=InMemory(path.read_bytes()) if as_bytes else str(path),
            )
            for i, path in enumerate(files)
        ]

    in_memory = MemoryOutput()
    merged = await pool.run(_merge, sources(True), in_memory, "")
    on_disk = tmp_path / "packet.pdf"
    from_files = await pool.run(_merge, sources(False), str(on_disk), str(tmp_path))
    assert in_memory.data == on_disk.read_bytes()
    assert merged == from_files and merged.page_count == 6


def _merge(sources: list[PacketSource], out: str, workdir: str) -> object:
    return assemble_packet(
        sources, out, profile="simple", manifest_digest="m" * 64, workdir=workdir
    )


async def test_a_repair_in_memory_writes_the_rewrite_it_writes_to_a_file(
    pool: SandboxPool, tmp_path: Path
) -> None:
    build, _code = EVERYDAY["xref-missing"]
    damaged = build(tmp_path / "damaged.pdf")
    in_memory = MemoryOutput()
    result = await pool.run(repair_pdf, InMemory(damaged.read_bytes()), in_memory)
    on_disk = tmp_path / "clean.pdf"
    assert await pool.run(repair_pdf, str(damaged), str(on_disk)) == result
    assert in_memory.data == on_disk.read_bytes()


def _kept(blobs: LocalBlobStore, tmp_path: Path, data: bytes) -> str:
    upload = tmp_path / "upload"
    upload.write_bytes(data)
    key = source_key(TENANT, hashlib.sha256(data).hexdigest())
    blobs.promote_file(upload, key)
    return key
