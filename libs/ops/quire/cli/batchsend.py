"""Sending a batch: every distinct source uploaded once, then one SubmitBatch.

Files are hashed first, so the same bytes under two names (a cover letter in
every packet) go up once. Uploads run a few at a time: enough to keep the
connection busy, not so many that admission's upload pacing starts refusing
slow streams. The packets then travel inline in one request; a batch whose
request would come near gRPC's 4 MiB message ceiling is uploaded as a JSON
manifest instead and submitted by its sha256.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

from quire.admission.v1 import batch_pb2
from quire.cli.batchfiles import BatchEntry, BatchItem
from quire.cli.errors import CliError
from quire.cli.packets import declared_type
from quire.cli.progress import upload_progress
from quire.client import AdmissionClient
from quire.type import job_pb2

__all__ = ["INLINE_LIMIT_BYTES", "UPLOAD_CONCURRENCY", "send_batch", "batch_manifest_json"]

UPLOAD_CONCURRENCY = 4
INLINE_LIMIT_BYTES = 3 * 1024 * 1024
"""Above this the packets go as an uploaded manifest (gRPC refuses messages over 4 MiB)."""
MANIFEST_TYPE = "application/json"


def _digest(path: Path) -> tuple[str, int]:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest(), path.stat().st_size


def _digest_all(paths: list[Path]) -> dict[Path, tuple[str, int]]:
    for path in paths:
        if not path.is_file():
            raise CliError(f"no such file: {path}")
    return {path: _digest(path) for path in paths}


async def upload_sources(
    client: AdmissionClient, entries: list[BatchEntry], *, show_progress: bool
) -> dict[Path, str]:
    """Each file the batch names, by its sha256; each distinct content uploaded once."""
    paths = sorted({item.path for entry in entries for item in entry.items if item.path})
    digests = await asyncio.to_thread(_digest_all, paths)
    distinct: dict[str, tuple[Path, int]] = {}
    for path, (sha256, size) in digests.items():
        distinct.setdefault(sha256, (path, size))
    total = sum(size for _, size in distinct.values())
    gate = asyncio.Semaphore(UPLOAD_CONCURRENCY)
    with upload_progress(total, len(distinct), enabled=show_progress) as progress:

        async def upload(sha256: str, path: Path, size: int) -> None:
            async with gate:
                await client.upload(path, declared_type(path), digest=(sha256, size))
            progress.advance(size)

        try:
            async with asyncio.TaskGroup() as group:
                for sha256, (path, size) in distinct.items():
                    group.create_task(upload(sha256, path, size))
        except ExceptionGroup as failed:
            raise failed.exceptions[0] from None  # the first refusal, as one upload gives it
    return {path: sha256 for path, (sha256, _) in digests.items()}


def _sha256_of(item: BatchItem, uploaded: dict[Path, str]) -> str:
    return uploaded[item.path] if item.path is not None else item.sha256


def batch_packets(
    entries: list[BatchEntry], uploaded: dict[Path, str]
) -> list[batch_pb2.BatchPacket]:
    return [
        batch_pb2.BatchPacket(
            bundle_id=entry.bundle_id,
            manifest=job_pb2.Manifest(
                items=[
                    job_pb2.ManifestItem(
                        position=item.position,
                        document_id=item.document_id,
                        sha256=_sha256_of(item, uploaded),
                    )
                    for item in entry.items
                ],
                ruleset=entry.ruleset,
                render_profile=entry.render_profile,
            ),
        )
        for entry in entries
    ]


def batch_manifest_json(packets: list[batch_pb2.BatchPacket]) -> bytes:
    """The packets in SubmitBatch's uploaded-manifest format; the same packets
    give the same bytes (and so the same sha256, for a retried request id)."""
    document = {
        "packets": [
            {
                "bundle_id": packet.bundle_id,
                "items": [
                    {"position": i.position, "document_id": i.document_id, "sha256": i.sha256}
                    for i in packet.manifest.items
                ],
                "ruleset": packet.manifest.ruleset,
                "render_profile": packet.manifest.render_profile,
            }
            for packet in packets
        ]
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


async def send_batch(
    client: AdmissionClient,
    entries: list[BatchEntry],
    *,
    request_id: str | None = None,
    show_progress: bool = False,
    inline_limit: int = INLINE_LIMIT_BYTES,
) -> batch_pb2.Batch:
    uploaded = await upload_sources(client, entries, show_progress=show_progress)
    packets = batch_packets(entries, uploaded)
    inline = batch_pb2.SubmitBatchRequest(packets=packets)
    if inline.ByteSize() <= inline_limit:
        return await client.submit_batch(packets, request_id=request_id)
    manifest = await client.upload_bytes(batch_manifest_json(packets), MANIFEST_TYPE)
    return await client.submit_batch(manifest_sha256=manifest.sha256, request_id=request_id)
