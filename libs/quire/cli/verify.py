"""``quire verify``: is this signed packet intact, whole-file, and ours?"""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc

from quire.pdfsignature import SignatureReport, verify_signed_pdf
from quire.signer.v1 import signer_service_pb2 as signer_pb
from quire.signer.v1 import signer_service_pb2_grpc as signer_grpc

__all__ = ["known_certificates", "verify_file"]


async def known_certificates(signer_address: str) -> list[str]:
    """Public certificates of every key version the stack has signed with."""
    async with grpc.aio.insecure_channel(signer_address) as channel:
        reply = await signer_grpc.SignerServiceStub(channel).ListKeys(
            signer_pb.ListKeysRequest(), timeout=10
        )
    return [key.certificate_pem for key in reply.keys]


async def verify_file(path: Path, signer_address: str) -> SignatureReport:
    certificates = await known_certificates(signer_address)
    return await asyncio.to_thread(verify_signed_pdf, str(path), certificates)
