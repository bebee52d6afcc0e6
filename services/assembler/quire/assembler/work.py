"""The assembler's stage work: merge by manifest position, promote once digested."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from sqlalchemy.orm import Session

from quire.assembler import tables
from quire.assembler.merge import (
    MergedPacket,
    PacketSource,
    SourceDigestMismatch,
    assemble_packet,
)
from quire.blobstore import LocalBlobStore
from quire.errors import PermanentError
from quire.leases import Lease
from quire.reasons import ReasonCode
from quire.sandbox import SandboxPool
from quire.stage import StageResult
from quire.type import job_pb2, queue_pb2

__all__ = ["AssemblerWork", "assembled_key"]


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
        sources = [
            PacketSource(
                position=s.position,
                document_id=s.document_id,
                sha256=s.sha256,
                content_type=s.content_type,
                path=str(self._blobs.local_path(s.blob_key)),
            )
            for s in task.sources
        ]
        workdir = Path(tempfile.mkdtemp(prefix="attempt-", dir=self._blobs.tmp_dir))
        temp = self._blobs.new_temp()
        try:
            try:
                packet: MergedPacket = await self._sandbox.run(
                    partial(
                        assemble_packet,
                        profile=task.render_profile or "simple",
                        manifest_digest=task.manifest_digest,
                        workdir=str(workdir),
                    ),
                    sources,
                    str(temp),
                )
            except SourceDigestMismatch:
                raise PermanentError(ReasonCode.DIGEST_MISMATCH, "stored source changed") from None
            key = assembled_key(task.tenant, packet.sha256)
            await asyncio.to_thread(self._blobs.promote_file, temp, key)
        finally:
            temp.unlink(missing_ok=True)
            shutil.rmtree(workdir, ignore_errors=True)
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
