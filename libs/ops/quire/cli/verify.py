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
    import json

    import pikepdf

    from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
    from quire.blobstore import sha256_file

    record = await admission.get_job(job)
    async with aio_channel(audit_address, tls) as channel:
        reply = await audit_service_pb2_grpc.AuditServiceStub(channel).ListJobEvents(
            audit_service_pb2.ListJobEventsRequest(job=record.name, page_size=100),
            metadata=metadata,
        )
    accepted = next(e.event for e in reply.entries if e.event.to_state == 1)  # ACCEPTED
    digest, _size = await asyncio.to_thread(sha256_file, path)
    with pikepdf.open(path) as pdf:
        embedded_manifest = str(pdf.docinfo.get("/QuireManifestDigest", ""))
        embedded_sources = json.loads(str(pdf.docinfo.get("/QuireSources", "[]")))
    return [
        ("output digest matches the ledger", digest == record.output_digest),
        ("embedded manifest matches the ledger", embedded_manifest == accepted.manifest_digest),
        (
            "embedded sources match the ledger, in order",
            [s["sha256"] for s in embedded_sources] == list(accepted.source_digests),
        ),
    ]
