"""SignerService: a job's signature record and the public side of every key."""

from __future__ import annotations

import grpc
from google.protobuf import timestamp_pb2
from sqlalchemy import select

from quire.database import Database
from quire.errors import NotFound
from quire.grpcstatus import abort_with
from quire.jobs import job_id, job_name
from quire.signer import tables
from quire.signer.keystore import KeyStore
from quire.signer.v1 import signer_service_pb2 as pb
from quire.signer.v1 import signer_service_pb2_grpc as pb_grpc
from quire.type import job_pb2

__all__ = ["SignerServicer"]

DOMAIN = "signer.quire"


def _timestamp(moment) -> timestamp_pb2.Timestamp:  # type: ignore[no-untyped-def]
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(moment)
    return stamp


class SignerServicer(pb_grpc.SignerServiceServicer):
    def __init__(self, database: Database, keys: KeyStore) -> None:
        self._db = database
        self._keys = keys

    async def GetSignature(  # noqa: N802 - gRPC method name
        self, request: pb.GetSignatureRequest, context: grpc.aio.ServicerContext
    ) -> pb.Signature:
        try:
            job = job_name(job_id(request.job))
            table = tables.signatures
            row = await self._db.run(
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
                signing=job_pb2.SigningRecord(
                    key_version=row.key_version, certificate_sha256=row.certificate_sha256
                ),
            )
        except Exception as error:  # noqa: BLE001 - translated at the edge
            await abort_with(context, error, DOMAIN)

    async def ListKeys(  # noqa: N802 - gRPC method name
        self, request: pb.ListKeysRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListKeysResponse:
        try:
            keys = await self._keys.all()
            return pb.ListKeysResponse(
                keys=[
                    pb.SigningKey(
                        version=key.version,
                        certificate_sha256=key.certificate_sha256,
                        certificate_pem=key.certificate_pem,
                        not_before=_timestamp(key.not_before),
                        not_after=_timestamp(key.not_after),
                        active=key.active,
                    )
                    for key in keys
                ]
            )
        except Exception as error:  # noqa: BLE001 - translated at the edge
            await abort_with(context, error, DOMAIN)
