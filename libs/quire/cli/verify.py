"""``quire verify``: is this signed packet intact, whole-file, and ours?"""

from __future__ import annotations

import asyncio
from pathlib import Path

from quire.pdfsignature import SignatureReport, verify_signed_pdf
from quire.signer.v1 import signer_service_pb2 as signer_pb
from quire.signer.v1 import signer_service_pb2_grpc as signer_grpc
from quire.tls import TlsSettings, aio_channel

__all__ = ["known_certificates", "verify_file"]


async def known_certificates(signer_address: str, tls: TlsSettings | None = None) -> list[str]:
    """Public certificates of every key version the stack has signed with."""
    async with aio_channel(signer_address, tls) as channel:
        reply = await signer_grpc.SignerServiceStub(channel).ListKeys(
            signer_pb.ListKeysRequest(), timeout=10
        )
    return [key.certificate_pem for key in reply.keys]


async def verify_file(
    path: Path, signer_address: str, tls: TlsSettings | None = None
) -> SignatureReport:
    certificates = await known_certificates(signer_address, tls)
    return await asyncio.to_thread(verify_signed_pdf, str(path), certificates)
