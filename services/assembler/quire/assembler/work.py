"""The assembler's stage work: merge by manifest position, promote once digested.

A packet of small PDFs is merged in memory: its sources go to the worker as
bytes and the packet comes back the same way (``quire.attemptfiles``).
Otherwise the attempt works in its own private directory and output file in
the blob store's temporary space, named after the assembler
(``quire.tempspace``) and removed on every path. Storage errors surface as
the blob store classifies them: STORAGE_FAILED ends the job,
STORAGE_UNAVAILABLE is retried.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial

from sqlalchemy import Connection

from quire.assembler import tables
from quire.assembler.merge import (
    PDF,
    MergedPacket,
    PacketSource,
    SourceDigestMismatch,
    assemble_packet,
)
from quire.attemptfiles import AttemptFiles, Output, in_memory, keep, written
from quire.blobstore import BlobStore, assembled_key, normalized_key, storage_error
from quire.driversql import DriverStatement
from quire.errors import PermanentError
from quire.faults import fault_point
from quire.leases import Lease
from quire.memoryfiles import MemoryOutput
from quire.metrics import phase
from quire.reasons import ReasonCode
from quire.sandbox import SandboxPool
from quire.stage import StageResult
from quire.type import job_pb2, queue_pb2

__all__ = ["AssemblerWork", "assembled_key"]


def _merged_blob(tenant: str, source: job_pb2.SourceRef) -> tuple[str, str]:
    """The blob to merge (key, digest): a repaired source's clean rewrite, else the upload."""
    if source.repair.normalized_sha256:
        digest = source.repair.normalized_sha256
        return normalized_key(tenant, digest), digest
    return source.blob_key, source.sha256


class AssemblerWork:
    """The assemble stage's work: merges a job's sources in manifest order in the
    sandbox, then keeps the packet in the store under its digest."""

    def __init__(self, *, blobs: BlobStore, sandbox: SandboxPool) -> None:
        self._blobs = blobs
        self._sandbox = sandbox

    async def process(self, task: queue_pb2.JobTask, lease: Lease, attempt: int) -> StageResult:
        # Sources are decrypted into memory or the attempt's private
        # directory, and the packet is written beside them before it is
        # sealed into the store.
        async with AttemptFiles(
            self._blobs, in_memory_bytes=self._sandbox.in_memory_bytes
        ) as files:
            paths = await files.documents([_merged_blob(task.tenant, s) for s in task.sources])
            # Structured sources are rendered into files in the private directory.
            merged_in_memory = in_memory(paths) and all(s.content_type == PDF for s in task.sources)
            sources = [
                PacketSource(
                    position=s.position,
                    document_id=s.document_id,
                    sha256=s.sha256,
                    content_type=s.content_type,
                    path=path,
                    normalized_sha256=s.repair.normalized_sha256,
                )
                for s, path in zip(task.sources, paths, strict=True)
            ]
            output = await files.output("packet", in_memory=merged_in_memory)
            workdir = "" if merged_in_memory else str(await files.private_directory())
            with phase("render"):
                packet = await self._merge(task, sources, workdir, output)
            key = assembled_key(task.tenant, packet.sha256)
            fault_point("assembler.before_promote")  # written, not yet in the store
            with phase("store"):
                await asyncio.to_thread(keep, self._blobs, written(output), key)
        artifact = job_pb2.Artifact(
            blob_key=key,
            sha256=packet.sha256,
            size_bytes=packet.size_bytes,
            page_count=packet.page_count,
        )
        next_task = queue_pb2.JobTask()
        next_task.CopyFrom(task)
        next_task.assembled.CopyFrom(artifact)
        return StageResult.hand_on(next_task, record=_record(task.job, artifact, lease.token))

    async def _merge(
        self, task: queue_pb2.JobTask, sources: list[PacketSource], workdir: str, output: Output
    ) -> MergedPacket:
        try:
            packet: MergedPacket = await self._sandbox.run(
                partial(
                    assemble_packet,
                    profile=task.render_profile or "simple",
                    manifest_digest=task.manifest_digest,
                    workdir=workdir,
                ),
                sources,
                output if isinstance(output, MemoryOutput) else str(output),
            )
        except SourceDigestMismatch:
            raise PermanentError(ReasonCode.DIGEST_MISMATCH, "stored source changed") from None
        except OSError as error:
            # The worker process reads sources and writes the packet into our temp space.
            raise storage_error(error, "packet not written") from error
        return packet


_INSERT_ASSEMBLY = DriverStatement(tables.assemblies.insert())
"""Built once: building a statement per call costs more CPU than running it."""


def _record(job: str, artifact: job_pb2.Artifact, token: int) -> Callable[[Connection], None]:
    def write(connection: Connection) -> None:
        _INSERT_ASSEMBLY.run(
            connection,
            {
                "job": job,
                "blob_key": artifact.blob_key,
                "sha256": artifact.sha256,
                "size_bytes": artifact.size_bytes,
                "page_count": artifact.page_count,
                "lease_token": token,
                "assembled_at": datetime.now(UTC),
            },
        )

    return write
