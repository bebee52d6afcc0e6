"""The signer's stage work: exactly one signed artifact per job.

Before signing, the job's intent is recorded. The artifact's key is derived
from the job (``signed/<tenant>/<job>.pdf``) and promoted exclusively (the blob
store never replaces it), so a second artifact for one job cannot be created.
An artifact found at that key (a crash after the write, a lost reply) is
verified against the stack's keys and reused, never signed again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import cast

from prometheus_client import Counter
from sqlalchemy import Connection, bindparam, select, update

from quire.attemptfiles import AttemptFiles, keep, written
from quire.blobstore import BlobStore, signed_key, storage_error
from quire.database import Database
from quire.driversql import DriverStatement
from quire.errors import JobCancelled, PermanentError, TransientError
from quire.faults import fault_point
from quire.groupcommit import Writes
from quire.jobgate import CANCELLED, JobGate
from quire.leases import Lease
from quire.memoryfiles import InMemory, MemoryOutput
from quire.metrics import phase
from quire.pdfsignature import SignatureReport, verify_signed_pdf
from quire.reasons import ReasonCode
from quire.sandbox import SandboxPool
from quire.signer import tables
from quire.signer.keystore import KeyStore, SigningKey
from quire.signer.signing import PacketDigestMismatch, SignedPacket, sign_packet
from quire.stage import StageResult
from quire.type import job_pb2, queue_pb2

__all__ = ["SignerWork", "signed_key"]


class SignerWork:
    """The sign stage's work: one signed artifact per job, never signed twice; an
    artifact already at the job's key is verified and reused."""

    def __init__(
        self,
        *,
        database: Database,
        blobs: BlobStore,
        keys: KeyStore,
        sandbox: SandboxPool,
        gate: JobGate | None = None,
        tsa_url: str | None = None,
        signatures: Counter | None = None,
        writes: Writes | None = None,
    ) -> None:
        """``writes``: where the signing intent is recorded (the stage's group
        commit, shared with its leases; default: a transaction of its own)."""
        self._writes: Writes = writes or database
        self._signatures = signatures
        """``quire_signatures_total``: packets this process signed, by key version."""
        self._db = database
        self._gate = gate
        self._tsa_url = tsa_url
        self._blobs = blobs
        self._keys = keys
        self._sandbox = sandbox

    async def process(self, task: queue_pb2.JobTask, lease: Lease, attempt: int) -> StageResult:
        blob_key = signed_key(task.tenant, task.job)

        def intend(connection: Connection) -> SigningKey:
            """The key to sign with, read where the intent to sign is recorded."""
            key = self._keys.active_in(connection)
            _record_intent(connection, task.job, key.version, blob_key, lease.token)
            return key

        # The claim, the intent and the look for an earlier artifact need
        # none of the others: they go at once, and nothing is signed before
        # all three are in. An intent recorded for a job the claim finds
        # cancelled is what a crash after the intent leaves: a row with no
        # signature, which nothing reads as one.
        claimed, intended, found = await asyncio.gather(
            self._claim(task.job),
            self._writes.run(intend),
            self._earlier_artifact(task, lease, blob_key),
            return_exceptions=True,  # each is awaited to its end, none left unread
        )
        if claimed == CANCELLED:
            raise JobCancelled()
        for failed in (claimed, intended, found):
            if isinstance(failed, BaseException):
                raise failed
        key = cast(SigningKey, intended)
        if found:
            signed, used = await self._reuse(blob_key)
        else:
            signed, used = await self._sign(task, blob_key, key)
        artifact = job_pb2.Artifact(
            blob_key=blob_key,
            sha256=signed.sha256,
            size_bytes=signed.size_bytes,
            page_count=task.assembled.page_count,
        )
        signing = job_pb2.SigningRecord(
            key_version=used.version,
            certificate_sha256=used.certificate_sha256,
            signer_identity=used.signer_identity,
            level="B-T" if self._tsa_url else "B-B",
        )
        next_task = queue_pb2.JobTask()
        next_task.CopyFrom(task)
        next_task.signed.CopyFrom(artifact)
        next_task.signing.CopyFrom(signing)
        return StageResult.hand_on(
            next_task,
            fields={
                "output_digest": artifact.sha256,
                "key_version": signing.key_version,
                "certificate_sha256": signing.certificate_sha256,
                "signer_identity": signing.signer_identity,
                "signature_level": signing.level,
            },
            record=_record_signature(task.job, artifact, signing, lease.token),
        )

    async def _earlier_artifact(self, task: queue_pb2.JobTask, lease: Lease, key: str) -> bool:
        """Whether an earlier delivery left the job's artifact. The first lease
        of a job's first generation need not look: only a delivery that held
        a lease before it could have written one. Should one exist all the
        same (the signer's database restored from a backup, say), the
        exclusive write finds it and it is reused, never replaced."""
        if lease.token <= 1 and task.generation == 0:
            return False
        return await asyncio.to_thread(self._blobs.exists, key)

    async def _claim(self, job: str) -> str:
        """The job gate's word on signing ``job`` (``SIGNING`` or what won)."""
        return "" if self._gate is None else await self._gate.claim_signing(job)

    async def _sign(
        self, task: queue_pb2.JobTask, blob_key: str, key: SigningKey
    ) -> tuple[SignedPacket, SigningKey]:
        # The packet is decrypted (into memory when small, else into the
        # attempt's private directory) and the signed copy written beside it,
        # then sealed into the store.
        async with AttemptFiles(
            self._blobs, in_memory_bytes=self._sandbox.in_memory_bytes
        ) as files:
            assembled = await files.document(task.assembled.blob_key, task.assembled.sha256)
            output = await files.output("signed", in_memory=isinstance(assembled, InMemory))
            try:
                material = self._keys.material(key)
                with phase("sign"):
                    signed: SignedPacket = await self._sandbox.run(
                        sign_packet,
                        assembled,
                        task.assembled.sha256,
                        output if isinstance(output, MemoryOutput) else str(output),
                        material.key_path,
                        material.cert_path,
                        self._tsa_url,
                        material.pkcs11,
                    )
            except PacketDigestMismatch:
                raise PermanentError(
                    ReasonCode.DIGEST_MISMATCH, "assembled packet changed"
                ) from None
            except OSError as error:  # from the worker: classified like every blob write
                raise storage_error(error, "signed packet not written") from error
            with phase("store"):
                created = await asyncio.to_thread(
                    keep, self._blobs, written(output), blob_key, exclusive=True
                )
            fault_point("signer.after_artifact")
        if not created:
            return await self._reuse(blob_key)
        if self._signatures is not None:
            self._signatures.labels(key_version=key.version).inc()
        return signed, key

    async def _reuse(self, blob_key: str) -> tuple[SignedPacket, SigningKey]:
        """Verify the job's existing artifact and take it as the job's signature."""
        keys = await self._keys.all()
        digest, size = await asyncio.to_thread(self._blobs.digest, blob_key)
        async with AttemptFiles(
            self._blobs, in_memory_bytes=self._sandbox.in_memory_bytes
        ) as files:
            signed = await files.document(blob_key, digest)
            report: SignatureReport = await self._sandbox.run(
                verify_signed_pdf, signed, [k.certificate_pem for k in keys]
            )
        used = next((k for k in keys if k.certificate_sha256 == report.certificate_sha256), None)
        if not report.ok or used is None:
            # Never overwrite: an artifact that exists but does not verify needs a human.
            raise TransientError(ReasonCode.SIGNING_FAILED, "existing artifact does not verify")
        return SignedPacket(sha256=digest, size_bytes=size), used


# Built once: the signer runs each for every job, and building a statement
# costs more CPU than running it.
_INTENT_EXISTS = DriverStatement(
    select(tables.signatures.c.job).where(tables.signatures.c.job == bindparam("job"))
)
_INSERT_INTENT = DriverStatement(
    tables.signatures.insert().values(
        {
            name: bindparam(name)
            for name in ("job", "key_version", "blob_key", "lease_token", "intent_at")
        }
    )
)
_RECORD_SIGNATURE = DriverStatement(
    update(tables.signatures)
    .where(tables.signatures.c.job == bindparam("b_job"))
    .values(
        {
            name: bindparam(f"b_{name}")
            for name in (
                "key_version",
                "sha256",
                "size_bytes",
                "page_count",
                "certificate_sha256",
                "signer_identity",
                "level",
                "lease_token",
                "signed_at",
            )
        }
    )
)


def _record_intent(
    connection: Connection, job: str, version: str, blob_key: str, token: int
) -> None:
    if _INTENT_EXISTS.first(connection, {"job": job}) is None:
        _INSERT_INTENT.run(
            connection,
            {
                "job": job,
                "key_version": version,
                "blob_key": blob_key,
                "lease_token": token,
                "intent_at": datetime.now(UTC),
            },
        )


def _record_signature(
    job: str, artifact: job_pb2.Artifact, signing: job_pb2.SigningRecord, token: int
) -> Callable[[Connection], None]:
    """The signature row as the ledger records it: committed with the stage's
    outcome, whose hand-off event carries the same ``signing`` fields."""

    def write(connection: Connection) -> None:
        _RECORD_SIGNATURE.run(
            connection,
            {
                "b_job": job,
                "b_key_version": signing.key_version,
                "b_sha256": artifact.sha256,
                "b_size_bytes": artifact.size_bytes,
                "b_page_count": artifact.page_count,
                "b_certificate_sha256": signing.certificate_sha256,
                "b_signer_identity": signing.signer_identity,
                "b_level": signing.level,
                "b_lease_token": token,
                "b_signed_at": datetime.now(UTC),
            },
        )

    return write
