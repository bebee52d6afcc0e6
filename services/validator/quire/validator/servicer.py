"""ValidatorService: what the validator decided for a job."""

from __future__ import annotations

import grpc
from sqlalchemy import select
from sqlalchemy.orm import Session

from quire.database import Database
from quire.errors import NotFound
from quire.grpcstatus import at_the_edge
from quire.jobs import job_id, job_name
from quire.validator import tables
from quire.validator.v1 import validator_service_pb2 as pb
from quire.validator.v1 import validator_service_pb2_grpc as pb_grpc

__all__ = ["ValidatorServicer"]


class ValidatorServicer(pb_grpc.ValidatorServiceServicer):
    def __init__(self, database: Database) -> None:
        self._db = database

    @at_the_edge("validator.quire")
    async def GetValidation(  # noqa: N802 - gRPC method name
        self, request: pb.GetValidationRequest, context: grpc.aio.ServicerContext
    ) -> pb.Validation:
        job = job_name(job_id(request.job))
        row = await self._db.read(lambda s: self._read(s, job))
        if row is None:
            raise NotFound("no validation for this job")
        return pb.Validation(
            job=job,
            verdict=row.verdict,
            reason_code=row.reason_code,
            lease_token=row.lease_token,
            documents=[
                pb.DocumentFinding(
                    position=int(f["position"]),
                    sha256=str(f["sha256"]),
                    detected_type=str(f["detected_type"]),
                    page_count=int(f["page_count"]),
                    reason_code=str(f["reason"]),
                )
                for f in row.findings
            ],
        )

    @staticmethod
    def _read(session: Session, job: str):  # type: ignore[no-untyped-def]
        return session.execute(
            select(tables.validations).where(tables.validations.c.job == job)
        ).first()
