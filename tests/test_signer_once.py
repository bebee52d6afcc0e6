"""One artifact per job: a signer that runs twice, or crashed after writing,
reuses the artifact it finds instead of signing again."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import select

from quire.database import Database
from quire.errors import JobCancelled
from quire.jobgate import CANCELLED, SIGNING
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


async def test_only_a_lease_after_the_first_looks_for_an_earlier_artifact(  # type: ignore[no-untyped-def]
    signer, tmp_path: Path
) -> None:
    """The first lease of a job's first generation cannot find an artifact
    (only a delivery holding an earlier lease writes one), so it does not look;
    a later lease, or any lease of a retry's generation, does."""
    work, blobs, _database = signer
    looked: list[str] = []
    exists = blobs.exists

    def counting(key: str) -> bool:
        looked.append(key)
        return exists(key)

    blobs.exists = counting
    task = _task(blobs, tmp_path)
    await work.process(task, Lease(JOB, 1, None), 1)
    assert looked == []
    await work.process(task, Lease(JOB, 2, None), 2)
    assert looked == [signed_key("t1", JOB)]
    retry = queue_pb2.JobTask()
    retry.CopyFrom(task)
    retry.generation = 1
    await work.process(retry, Lease(JOB, 1, None), 1)
    assert looked == [signed_key("t1", JOB)] * 2


async def test_an_artifact_the_first_lease_did_not_look_for_is_reused_not_replaced(  # type: ignore[no-untyped-def]
    signer, tmp_path: Path
) -> None:
    """A signer database restored from a backup starts a job's leases at 1
    again while its artifact is in the store: the exclusive write finds it,
    and the job gets that artifact, not a second one."""
    work, blobs, database = signer
    task = _task(blobs, tmp_path)
    first = await work.process(task, Lease(JOB, 1, None), 1)
    path = blobs.local_path(signed_key("t1", JOB))
    written = path.stat().st_mtime_ns
    database.transaction(lambda s: s.execute(tables.signatures.delete()))
    again = await work.process(task, Lease(JOB, 1, None), 1)
    assert again.task.signed.sha256 == first.task.signed.sha256
    assert path.stat().st_mtime_ns == written, "the artifact was not rewritten"
    assert len(list(path.parent.iterdir())) == 1


async def test_concurrent_signers_produce_one_artifact(signer, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    work, blobs, _database = signer
    task = _task(blobs, tmp_path)
    one, two = await asyncio.gather(
        work.process(task, Lease(JOB, 1, None), 1), work.process(task, Lease(JOB, 2, None), 2)
    )
    assert one.task.signed.sha256 == two.task.signed.sha256
    assert len(list(blobs.local_path(signed_key("t1", JOB)).parent.iterdir())) == 1


class _SlowGate:
    """The job gate's answer to a signing claim, given after the intent and
    the look for an artifact have ended (a unit test's stand-in)."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.asked: list[str] = []

    async def claim_signing(self, job: str) -> str:
        self.asked.append(job)
        await asyncio.sleep(0.05)
        return self.answer


def _gated(signer, gate: _SlowGate) -> SignerWork:  # type: ignore[no-untyped-def]
    work, blobs, database = signer
    return SignerWork(
        database=database,
        blobs=blobs,
        keys=work._keys,  # noqa: SLF001
        sandbox=work._sandbox,  # noqa: SLF001
        gate=gate,  # type: ignore[arg-type]
    )


async def test_a_cancel_the_gate_holds_stops_signing_though_the_intent_went_at_once(  # type: ignore[no-untyped-def]
    signer, tmp_path: Path
) -> None:
    _work, blobs, database = signer
    gate = _SlowGate(CANCELLED)
    work = _gated(signer, gate)
    with pytest.raises(JobCancelled):
        await work.process(_task(blobs, tmp_path), Lease(JOB, 1, None), 1)
    assert gate.asked == [JOB]
    assert not blobs.exists(signed_key("t1", JOB)), "nothing is signed for a cancelled job"
    rows = database.transaction(lambda s: s.execute(select(tables.signatures)).all())
    assert [(row.job, row.sha256) for row in rows] == [(JOB, None)], "an intent, no signature"


async def test_a_cancel_wins_over_a_failed_intent(signer, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _work, blobs, database = signer
    database.transaction(lambda s: s.execute(tables.signing_keys.delete()))  # no key to intend with
    work = _gated(signer, _SlowGate(CANCELLED))
    with pytest.raises(JobCancelled):
        await work.process(_task(blobs, tmp_path), Lease(JOB, 1, None), 1)


async def test_a_failed_intent_fails_the_attempt_even_when_the_claim_is_won(  # type: ignore[no-untyped-def]
    signer, tmp_path: Path
) -> None:
    _work, blobs, database = signer
    database.transaction(lambda s: s.execute(tables.signing_keys.delete()))
    work = _gated(signer, _SlowGate(SIGNING))
    with pytest.raises(Exception) as raised:
        await work.process(_task(blobs, tmp_path), Lease(JOB, 1, None), 1)
    assert not isinstance(raised.value, JobCancelled)
    assert not blobs.exists(signed_key("t1", JOB))
