"""The assembler's stage work: merge by manifest position, promote once digested.

Each attempt works in its own private directory and output file in the blob
store's temporary space, named after the assembler (``quire.tempspace``) and
removed on every path. Storage errors surface as the blob store classifies
them: STORAGE_FAILED ends the job, STORAGE_UNAVAILABLE is retried.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from contextlib import ExitStack, suppress
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
from quire.blobstore import LocalBlobStore, assembled_key, storage_error
from quire.errors import PermanentError
from quire.leases import Lease
from quire.reasons import ReasonCode
from quire.sandbox import SandboxPool
from quire.stage import StageResult
from quire.type import job_pb2, queue_pb2

__all__ = ["AssemblerWork", "assembled_key"]


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
        with ExitStack() as cleanup:
            workdir = self._blobs.new_temp_dir("attempt")
            cleanup.callback(shutil.rmtree, workdir, ignore_errors=True)
            temp = self._blobs.new_temp("packet")
            cleanup.callback(_discard, temp)
            packet = await self._merge(task, sources, workdir, temp)
            key = assembled_key(task.tenant, packet.sha256)
            await asyncio.to_thread(self._blobs.promote_file, temp, key)
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

    async def _merge(
        self, task: queue_pb2.JobTask, sources: list[PacketSource], workdir: Path, temp: Path
    ) -> MergedPacket:
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
        except OSError as error:
            # The worker process reads sources and writes the packet into our temp space.
            raise storage_error(error, "packet not written") from error
        return packet

    def record_rejection(
        self, task: queue_pb2.JobTask, error: Exception
    ) -> Callable[[Session], None] | None:
        return None


def _discard(path: Path) -> None:
    """Best-effort removal: a failing disk must not hide the error that ended the attempt."""
    with suppress(OSError):
        path.unlink(missing_ok=True)


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
