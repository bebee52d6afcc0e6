"""The assembler's stage work: merge by manifest position, promote once digested."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from quire.assembler import tables
from quire.assembler.merge import MergedPacket, SourceDigestMismatch, merge_sources
from quire.blobstore import LocalBlobStore
from quire.errors import PermanentError
from quire.leases import Lease
from quire.reasons import ReasonCode
from quire.sandbox import SandboxPool
from quire.stage import StageResult
from quire.type import job_pb2, queue_pb2

__all__ = ["AssemblerWork", "assembled_key"]

PDF_TYPE = "application/pdf"


def assembled_key(tenant: str, sha256: str) -> str:
    return f"assembled/{tenant}/{sha256}"


class AssemblerWork:
    stage_state = "ASSEMBLING"
    next_state = "SIGNING"
    next_stage = "sign"

    def __init__(self, *, blobs: LocalBlobStore, sandbox: SandboxPool) -> None:
        self._blobs = blobs
        self._sandbox = sandbox

    async def process(self, task: queue_pb2.JobTask, lease: Lease, attempt: int) -> StageResult:
        ordered = sorted(task.sources, key=lambda source: source.position)
        if any(source.content_type != PDF_TYPE for source in ordered):
            # Structured sources pass the gate and the validator, but no render
            # profile is implemented yet: refuse clearly rather than drop them.
            raise PermanentError(
                ReasonCode.RENDER_UNAVAILABLE, "structured sources cannot be rendered yet"
            )
        inputs = [(str(self._blobs.local_path(s.blob_key)), s.sha256) for s in ordered]
        temp = self._blobs.new_temp()
        try:
            try:
                packet: MergedPacket = await self._sandbox.run(merge_sources, inputs, str(temp))
            except SourceDigestMismatch:
                raise PermanentError(ReasonCode.DIGEST_MISMATCH, "stored source changed") from None
            key = assembled_key(task.tenant, packet.sha256)
            await asyncio.to_thread(self._blobs.promote_file, temp, key)
        finally:
            temp.unlink(missing_ok=True)
        artifact = job_pb2.Artifact(
            blob_key=key,
            sha256=packet.sha256,
            size_bytes=packet.size_bytes,
            page_count=packet.page_count,
        )
        next_task = queue_pb2.JobTask()
        next_task.CopyFrom(task)
        next_task.assembled.CopyFrom(artifact)
        return StageResult(next_task=next_task, record=_record(task.job, artifact, lease.token))

    def record_rejection(
        self, task: queue_pb2.JobTask, error: Exception
    ) -> Callable[[Session], None] | None:
        return None


def _record(job: str, artifact: job_pb2.Artifact, token: int) -> Callable[[Session], None]:
    def write(session: Session) -> None:
        session.execute(
            tables.assemblies.insert().values(
                job=job,
                blob_key=artifact.blob_key,
                sha256=artifact.sha256,
                size_bytes=artifact.size_bytes,
                page_count=artifact.page_count,
                lease_token=token,
                assembled_at=datetime.now(UTC),
            )
        )

    return write
