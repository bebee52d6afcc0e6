"""One artifact per job: a signer that runs twice, or crashed after writing,
reuses the artifact it finds instead of signing again."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import select

from quire.database import Database
from quire.leases import Lease
from quire.localblobs import LocalBlobStore
from quire.sandbox import SandboxPool
from quire.settings import SandboxSettings
from quire.signer import tables
from quire.signer.keystore import GeneratedKeys, KeyStore
from quire.signer.work import SignerWork, signed_key
from quire.testing.pdfs import write_text_pdf
from quire.testing.sealedstore import sealed_store
from quire.type import job_pb2, queue_pb2

JOB = "jobs/00aa11bb22cc33dd"


@pytest.fixture
async def signer(tmp_path: Path):  # type: ignore[no-untyped-def]
    database = Database(f"sqlite:///{tmp_path / 'signer.db'}", tables.metadata)
    database.create_schema()
    keys = KeyStore(database, GeneratedKeys(tmp_path / "keys"))
    keys.ensure_active_key()
    blobs = sealed_store(tmp_path / "blobs")
    pool = SandboxPool(SandboxSettings(workers=1))
    yield SignerWork(database=database, blobs=blobs, keys=keys, sandbox=pool), blobs, database
    pool.close()


def _task(blobs: LocalBlobStore, tmp_path: Path) -> queue_pb2.JobTask:
    packet = write_text_pdf(tmp_path / "packet.pdf", ["page one", "page two"])
    with blobs.writer("t1") as writer:
        writer.write(packet.read_bytes())
        digest = writer.sha256
        writer.promote(f"assembled/t1/{digest}")
    return queue_pb2.JobTask(
        job=JOB,
        tenant="t1",
        assembled=job_pb2.Artifact(blob_key=f"assembled/t1/{digest}", sha256=digest, page_count=2),
    )


async def test_a_second_run_reuses_the_signed_artifact(signer, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    work, blobs, _database = signer
    task = _task(blobs, tmp_path)
    first = await work.process(task, Lease(JOB, 1, None), 1)
    path = blobs.local_path(signed_key("t1", JOB))
    written = path.stat().st_mtime_ns
    second = await work.process(task, Lease(JOB, 2, None), 2)
    assert first.task.signed.sha256 == second.task.signed.sha256
    assert path.stat().st_mtime_ns == written, "the artifact was not rewritten"
    assert blobs.digest(signed_key("t1", JOB))[0] == first.task.signed.sha256
    assert len(list(path.parent.iterdir())) == 1


async def test_a_crash_after_the_write_is_reconciled_by_reuse(signer, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    work, blobs, database = signer
    task = _task(blobs, tmp_path)
    first = await work.process(task, Lease(JOB, 1, None), 1)
    # The crash: the artifact is written but nothing after it was committed.
    database.transaction(lambda s: s.execute(tables.signatures.delete()))
    again = await work.process(task, Lease(JOB, 2, None), 2)
    assert again.task.signed.sha256 == first.task.signed.sha256
    assert again.task.signing.key_version == "v1"
    rows = database.transaction(lambda s: s.execute(select(tables.signatures)).all())
    assert [row.job for row in rows] == [JOB]


async def test_concurrent_signers_produce_one_artifact(signer, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    work, blobs, _database = signer
    task = _task(blobs, tmp_path)
    one, two = await asyncio.gather(
        work.process(task, Lease(JOB, 1, None), 1), work.process(task, Lease(JOB, 2, None), 2)
    )
    assert one.task.signed.sha256 == two.task.signed.sha256
    assert len(list(blobs.local_path(signed_key("t1", JOB)).parent.iterdir())) == 1
