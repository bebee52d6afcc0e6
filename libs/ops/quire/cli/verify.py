"""``quire verify``: is this signed packet intact, whole-file, and ours?"""

from __future__ import annotations

import asyncio
from pathlib import Path

from quire.client import AdmissionClient
from quire.pdfsignature import SignatureReport, verify_signed_pdf
from quire.signer.v1 import signer_service_pb2 as signer_pb
from quire.signer.v1 import signer_service_pb2_grpc as signer_grpc
from quire.tls import TlsSettings, aio_channel

__all__ = ["known_certificates", "verify_file", "ledger_checks", "Metadata"]

Metadata = tuple[tuple[str, str], ...]
"""Call metadata: the operator's ``authorization`` header."""


async def known_certificates(
    signer_address: str, tls: TlsSettings | None = None, *, metadata: Metadata
) -> list[str]:
    """Public certificates of every key version the stack has signed with
    (the signer answers operators and services only: ``metadata`` carries the
    operator token)."""
    certificates: list[str] = []
    token = ""
    async with aio_channel(signer_address, tls) as channel:
        stub = signer_grpc.SignerServiceStub(channel)
        while True:  # every page of ListKeys
            reply = await stub.ListKeys(
                signer_pb.ListKeysRequest(page_token=token), metadata=metadata, timeout=10
            )
            certificates.extend(key.certificate_pem for key in reply.keys)
            token = reply.next_page_token
            if not token:
                return certificates


async def verify_file(
    path: Path, signer_address: str, tls: TlsSettings | None = None, *, metadata: Metadata
) -> SignatureReport:
    certificates = await known_certificates(signer_address, tls, metadata=metadata)
    return await asyncio.to_thread(verify_signed_pdf, str(path), certificates)


def _embedded(path: Path) -> tuple[str, list[str]]:
    """The manifest digest and source digests the packet carries in its
    document info; empty when the file does not hold them readably (then
    they match nothing in the ledger)."""
    import json

    import pikepdf

    try:
        with pikepdf.open(path) as pdf:
            manifest = str(pdf.docinfo.get("/QuireManifestDigest", ""))
            sources = json.loads(str(pdf.docinfo.get("/QuireSources", "[]")))
        return manifest, [str(source["sha256"]) for source in sources]
    except (pikepdf.PdfError, ValueError, TypeError, KeyError):
        return "", []


async def ledger_checks(
    path: Path,
    job: str,
    *,
    admission: AdmissionClient,
    audit_address: str,
    tls: TlsSettings | None,
    metadata: Metadata,
) -> list[tuple[str, bool]]:
    """The packet against the ledger: output digest, embedded manifest and sources."""
    from quire.audit.v1 import audit_service_pb2_grpc
    from quire.blobstore import sha256_file
    from quire.cli.history import job_entries

    record = await admission.get_job(job)
    async with aio_channel(audit_address, tls) as channel:
        entries = await job_entries(
            audit_service_pb2_grpc.AuditServiceStub(channel), record.name, metadata
        )
    accepted = next((e.event for e in entries if e.event.to_state == 1), None)  # ACCEPTED
    digest, _size = await asyncio.to_thread(sha256_file, path)
    manifest, sources = await asyncio.to_thread(_embedded, path)
    return [
        ("output digest matches the ledger", digest == record.output_digest),
        (
            "embedded manifest matches the ledger",
            accepted is not None and manifest == accepted.manifest_digest,
        ),
        (
            "embedded sources match the ledger, in order",
            accepted is not None and sources == list(accepted.source_digests),
        ),
    ]
