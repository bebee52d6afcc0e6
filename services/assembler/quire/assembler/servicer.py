"""AssemblerService: the unsigned packet made for a job."""

from __future__ import annotations

import grpc
from sqlalchemy import select

from quire.assembler import tables
from quire.assembler.v1 import assembler_service_pb2 as pb
from quire.assembler.v1 import assembler_service_pb2_grpc as pb_grpc
from quire.database import Database
from quire.errors import NotFound
from quire.grpcstatus import at_the_edge
from quire.jobs import job_id, job_name
from quire.type import job_pb2

__all__ = ["AssemblerServicer"]


class AssemblerServicer(pb_grpc.AssemblerServiceServicer):
    """The assembler's AssemblerService: the unsigned packet made for a job."""

    def __init__(self, database: Database) -> None:
        self._db = database

    @at_the_edge("assembler.quire")
    async def GetAssembly(  # noqa: N802 - gRPC method name
        self, request: pb.GetAssemblyRequest, context: grpc.aio.ServicerContext
    ) -> pb.Assembly:
        job = job_name(job_id(request.job))
        table = tables.assemblies
        row = await self._db.read(
            lambda s: s.execute(select(table).where(table.c.job == job)).first()
        )
        if row is None:
            raise NotFound("no assembly for this job")
        return pb.Assembly(
            job=job,
            lease_token=row.lease_token,
            artifact=job_pb2.Artifact(
                blob_key=row.blob_key,
                sha256=row.sha256,
                size_bytes=row.size_bytes,
                page_count=row.page_count,
            ),
        )
