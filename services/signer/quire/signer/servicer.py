"""SignerService: a job's signature record and the public side of every key."""

from __future__ import annotations

import asyncio

import grpc
from sqlalchemy import select

from quire.database import Database
from quire.errors import NotFound
from quire.grpcstatus import at_the_edge
from quire.idempotency import OPERATORS, RequestOnce
from quire.jobs import job_id, job_name, timestamp
from quire.paging import PageTokens
from quire.signer import tables
from quire.signer.keystore import KeyStore, SigningKey
from quire.signer.v1 import signer_service_pb2 as pb
from quire.signer.v1 import signer_service_pb2_grpc as pb_grpc
from quire.type import job_pb2

__all__ = ["SignerServicer"]

DOMAIN = "signer.quire"
ROTATE_KEY = "quire.signer.v1.SignerService/RotateKey"
LIST_KEYS = "quire.signer.v1.SignerService/ListKeys"


def _key(key: SigningKey) -> pb.SigningKey:
    return pb.SigningKey(
        version=key.version,
        certificate_sha256=key.certificate_sha256,
        certificate_pem=key.certificate_pem,
        not_before_time=timestamp(key.not_before),
        not_after_time=timestamp(key.not_after),
        active=key.active,
    )


class SignerServicer(pb_grpc.SignerServiceServicer):
    """The signer's SignerService: a job's signature record, key rotation, and the
    public side of every key version."""

    def __init__(self, database: Database, keys: KeyStore, *, pages: PageTokens) -> None:
        self._db = database
        self._keys = keys
        self._pages = pages

    @at_the_edge(DOMAIN)
    async def GetSignature(  # noqa: N802 - gRPC method name
        self, request: pb.GetSignatureRequest, context: grpc.aio.ServicerContext
    ) -> pb.Signature:
        job = job_name(job_id(request.job))
        table = tables.signatures
        row = await self._db.read(
            lambda s: s.execute(select(table).where(table.c.job == job)).first()
        )
        if row is None or row.sha256 is None:
            raise NotFound("no signature for this job")
        return pb.Signature(
            job=job,
            artifact=job_pb2.Artifact(
                blob_key=row.blob_key,
                sha256=row.sha256,
                size_bytes=row.size_bytes,
                page_count=row.page_count,
            ),
            # What the job's ledger entry records (the same SigningRecord was
            # committed with the stage's outcome); empty only for a level the
            # signer did not keep before its migration 0004.
            signing=job_pb2.SigningRecord(
                key_version=row.key_version,
                certificate_sha256=row.certificate_sha256,
                signer_identity=row.signer_identity or "",
                level=row.level or "",
            ),
        )

    @at_the_edge(DOMAIN)
    async def RotateKey(  # noqa: N802 - gRPC method name
        self, request: pb.RotateKeyRequest, context: grpc.aio.ServicerContext
    ) -> pb.SigningKey:
        once = RequestOnce(tables.request_ids, OPERATORS, ROTATE_KEY, request, pb.SigningKey)
        return await asyncio.to_thread(
            self._db.transaction, lambda s: once.run(s, lambda: _key(self._keys.rotate_in(s)))
        )

    @at_the_edge(DOMAIN)
    async def ListKeys(  # noqa: N802 - gRPC method name
        self, request: pb.ListKeysRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListKeysResponse:
        page = self._pages.page(LIST_KEYS, request.page_size, request.page_token)
        rows = await self._keys.listed(after=page.after, limit=page.fetch)
        served, token = page.cut(rows, lambda row: row[0])
        return pb.ListKeysResponse(keys=[_key(key) for _, key in served], next_page_token=token)
