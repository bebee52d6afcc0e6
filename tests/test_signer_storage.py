"""The signer classifies a storage error raised in its signing worker like every
blob write: a store refusing writes ends the job FAILED (STORAGE_FAILED) at
once; a passing error is retried."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest

from quire.errors import SystemFailure, TransientError
from quire.leases import Lease
from quire.reasons import ReasonCode
from quire.signer.keystore import SigningKey, SigningMaterial
from quire.signer.work import SignerWork
from quire.testing.sealedstore import sealed_store
from quire.type import job_pb2, queue_pb2


class _FailingSandbox:
    """Stands in for the worker pool: the worker's write failed with ``code``."""

    in_memory_bytes = 4 * 1024 * 1024

    def __init__(self, code: int) -> None:
        self._code = code

    async def run(self, *_args: Any) -> Any:
        raise OSError(self._code, "simulated")


class _Recorded:
    """A connection on which the job's signing intent is already recorded."""

    class dialect:  # noqa: N801 - mirrors Connection.dialect
        name = "recorded"

    def execute(self, _statement: Any, _parameters: Any = None) -> Any:
        return [object()]  # the intent's row


class _NoDatabase:
    """The signing intent is recorded elsewhere; nothing to keep here."""

    async def run(self, work: Any) -> Any:
        return work(_Recorded())


class _OneKey:
    def __init__(self, key: SigningKey) -> None:
        self._key = key

    async def active(self) -> SigningKey:
        return self._key

    def active_in(self, _connection: Any) -> SigningKey:
        return self._key

    def material(self, key: SigningKey) -> SigningMaterial:
        return SigningMaterial(key.key_path, key.cert_path)


@pytest.mark.parametrize(
    ("code", "kind", "reason"),
    [
        (errno.EROFS, SystemFailure, ReasonCode.STORAGE_FAILED),
        (errno.EIO, TransientError, ReasonCode.STORAGE_UNAVAILABLE),
    ],
)
async def test_a_storage_error_in_the_signing_worker_is_classified(
    tmp_path: Path, code: int, kind: type[Exception], reason: ReasonCode
) -> None:
    blobs = sealed_store(tmp_path / "blobs", owner="signer")
    key = SigningKey.__new__(SigningKey)
    object.__setattr__(key, "version", "v1")
    object.__setattr__(key, "key_path", str(tmp_path / "key.pem"))
    object.__setattr__(key, "cert_path", str(tmp_path / "cert.pem"))
    work = SignerWork(
        database=_NoDatabase(),  # type: ignore[arg-type]
        blobs=blobs,
        keys=_OneKey(key),  # type: ignore[arg-type]
        sandbox=_FailingSandbox(code),  # type: ignore[arg-type]
    )
    with blobs.writer("t1") as packet:
        packet.write(b"%PDF-1.7 stand-in packet")
        packet.promote("assembled/t1/x.pdf")
    task = queue_pb2.JobTask(
        job="jobs/0123456789abcdef",
        tenant="t1",
        assembled=job_pb2.Artifact(blob_key="assembled/t1/x.pdf", sha256=packet.sha256),
    )
    with pytest.raises(kind) as raised:
        await work.process(task, Lease(job=task.job, token=1, committed=None), attempt=1)
    assert raised.value.reason == reason  # type: ignore[attr-defined]
    assert list(blobs.tmp_dir.iterdir()) == [], "the temporary output was removed"
