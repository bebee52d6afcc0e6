"""An upload that outlives its token (issue 21): the token is checked again
when the bytes are in, so an upload whose token was revoked while it was
sending is refused (UNAUTHENTICATED) and nothing of it is kept, on the
session's real stack. Before the fix the upload completed and was kept."""

from __future__ import annotations

import asyncio
import hashlib
import os
import uuid
from collections.abc import AsyncIterator

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from quire.admission.v1 import admission_service_pb2 as pb
from quire.client import AdmissionClient, PacketItem, TenantAdminClient
from quire.grpcstatus import reason_of
from quire.stack.supervisor import Stack, StackInfo

pytestmark = pytest.mark.stack

CHUNK = 64 * 1024
CHUNKS = 8


def _pdf(size: int) -> bytes:
    return b"%PDF-1.7\n%" + os.urandom(size - 10)


async def test_an_upload_whose_token_is_revoked_while_it_sends_is_not_kept(stack: Stack) -> None:
    info = StackInfo.read(stack.data_dir)
    address = info.endpoints["admission"]
    async with TenantAdminClient(address, info.operator_token()) as admin:
        tenant = await admin.create_tenant(f"revoked-{uuid.uuid4().hex[:8]}")
        second = await admin.create_token(tenant.tenant.name)
        data = _pdf(CHUNK * CHUNKS)
        digest = hashlib.sha256(data).hexdigest()
        halfway = asyncio.Event()
        revoked = asyncio.Event()

        async def requests() -> AsyncIterator[pb.UploadSourceRequest]:
            header = pb.SourceHeader(
                sha256=digest, size_bytes=len(data), content_type="application/pdf"
            )
            yield pb.UploadSourceRequest(header=header)
            for index in range(CHUNKS):
                if index == CHUNKS // 2:
                    halfway.set()
                    await asyncio.wait_for(revoked.wait(), timeout=30)
                yield pb.UploadSourceRequest(chunk=data[index * CHUNK : (index + 1) * CHUNK])

        async with AdmissionClient(address, second.secret) as doomed:
            upload = asyncio.create_task(doomed.upload_stream(requests()))
            await asyncio.wait_for(halfway.wait(), timeout=30)
            await admin.revoke_token(second.token.name)
            revoked.set()
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await upload
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED, refused.value.details()

    # Nothing was kept: no blob, and a manifest naming the digest is refused.
    assert not list((stack.data_dir / "blobs").rglob(f"*{digest}*")), "no blob was kept"
    async with AdmissionClient(address, tenant.secret) as client:
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await client.submit([PacketItem("doc", digest)])
        assert reason_of(unknown.value) == "INVALID_MANIFEST"
        status = rpc_status.from_call(unknown.value)
        assert status is not None
        violations = []
        for detail in status.details:
            if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                request = error_details_pb2.BadRequest()
                detail.Unpack(request)
                violations = [v.reason for v in request.field_violations]
        assert violations == ["UNKNOWN_SOURCE"]

        # The tenant's other token still uploads the same bytes.
        async def again() -> AsyncIterator[pb.UploadSourceRequest]:
            header = pb.SourceHeader(
                sha256=digest, size_bytes=len(data), content_type="application/pdf"
            )
            yield pb.UploadSourceRequest(header=header)
            for index in range(CHUNKS):
                yield pb.UploadSourceRequest(chunk=data[index * CHUNK : (index + 1) * CHUNK])

        assert (await client.upload_stream(again())).sha256 == digest
