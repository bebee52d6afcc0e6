"""How admission answers questions about a tenant's jobs without reading
audit's tables: existence and ownership from its own intake rows, state from
audit over gRPC. Another tenant's job is NOT_FOUND, like one that never was."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

import grpc
from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from quire.admission import tables
from quire.admission.intake import AcceptedJob, accepted_from_row
from quire.admission.outstanding import OutstandingJobs
from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
from quire.database import Database
from quire.errors import FieldViolation, InvalidInput, NotFound, TransientError
from quire.jobs import TERMINAL_STATES, job_id, job_name, state_name, timestamp
from quire.pipeline import State
from quire.reasons import ReasonCode
from quire.type import job_pb2

__all__ = ["JobViews", "JobPage"]

AUDIT_TIMEOUT_SECONDS = 5.0
DEFAULT_PAGE = 50
MAX_PAGE = 500
SCAN_LIMIT = 2000
"""Rows one ListJobs call may look at while filtering by state."""


@dataclass(frozen=True)
class JobPage:
    jobs: list[job_pb2.Job]
    next_token: str


def accepted_view(accepted: AcceptedJob) -> job_pb2.Job:
    """What admission alone can say: the job exists and was accepted."""
    return job_pb2.Job(
        name=accepted.name,
        state=State.ACCEPTED.number,  # type: ignore[arg-type]
        item_count=accepted.item_count,
        manifest_digest=accepted.manifest_digest,
        create_time=timestamp(accepted.created_at),
        update_time=timestamp(accepted.created_at),
    )


def _encode_token(created_at: datetime, job: str) -> str:
    raw = json.dumps([created_at.isoformat(), job]).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _decode_token(token: str) -> tuple[datetime, str] | None:
    if not token:
        return None
    try:
        created, job = json.loads(base64.urlsafe_b64decode(token.encode()))
        return datetime.fromisoformat(created), job_name(job_id(job))
    except (ValueError, TypeError, json.JSONDecodeError, NotFound):
        raise InvalidInput(
            ReasonCode.INVALID_PAGE,
            "page_token is not one this service issued",
            (FieldViolation("page_token", "unknown token"),),
        ) from None


class JobViews:
    def __init__(
        self,
        database: Database,
        audit: audit_service_pb2_grpc.AuditServiceStub,
        outstanding: OutstandingJobs,
    ) -> None:
        self._db = database
        self._audit = audit
        self._outstanding = outstanding

    async def owned(self, tenant: str, name: str) -> AcceptedJob:
        job = job_name(job_id(name))
        table = tables.jobs
        row = await self._db.read(
            lambda s: s.execute(
                select(table).where(table.c.job == job, table.c.tenant == tenant)
            ).first()
        )
        if row is None:
            raise NotFound("job not found")
        return accepted_from_row(row)

    async def current(self, accepted: AcceptedJob) -> job_pb2.Job:
        try:
            job = await self._audit.GetJob(
                audit_service_pb2.GetJobRequest(name=accepted.name),
                timeout=AUDIT_TIMEOUT_SECONDS,
                wait_for_ready=True,
            )
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.NOT_FOUND:
                return accepted_view(accepted)  # audit has not recorded it yet
            raise TransientError(ReasonCode.DEPENDENCY_UNAVAILABLE, "audit unavailable") from None
        if state_name(job.state) in TERMINAL_STATES:
            await self._outstanding.mark_finished([job.name])
        return job

    async def artifact_retired(self, name: str) -> bool:
        """Whether audit's ledger records the job's signed artifact as retired
        under the retention policy (its bytes deleted on purpose)."""
        token = ""
        while True:
            try:
                reply = await self._audit.ListJobEvents(
                    audit_service_pb2.ListJobEventsRequest(
                        job=name, page_size=MAX_PAGE, page_token=token
                    ),
                    timeout=AUDIT_TIMEOUT_SECONDS,
                    wait_for_ready=True,
                )
            except grpc.aio.AioRpcError:
                raise TransientError(
                    ReasonCode.DEPENDENCY_UNAVAILABLE, "audit unavailable"
                ) from None
            if any(entry.event.retirement.kind == "artifact" for entry in reply.entries):
                return True
            token = reply.next_page_token
            if not token:
                return False

    async def page(self, tenant: str, *, size: int, token: str, state: int) -> JobPage:
        """The tenant's jobs, newest first, filtered by state when one is given."""
        if size < 0:
            raise InvalidInput(
                ReasonCode.INVALID_PAGE,
                "page_size must not be negative",
                (FieldViolation("page_size", "negative"),),
            )
        size = min(size or DEFAULT_PAGE, MAX_PAGE)
        after = _decode_token(token)
        found: list[job_pb2.Job] = []
        scanned = 0
        while len(found) < size and scanned < SCAN_LIMIT:
            rows = await self._db.read(partial(_rows, tenant=tenant, after=after, size=size))
            if not rows:
                return JobPage(found, "")
            views = await self._views([accepted_from_row(row) for row in rows])
            for row, view in zip(rows, views, strict=True):
                scanned += 1
                after = (row.created_at, row.job)
                if not state or view.state == state:
                    found.append(view)
                    if len(found) == size:
                        break
        return JobPage(found, _encode_token(*after) if after else "")

    async def _views(self, accepted: list[AcceptedJob]) -> list[job_pb2.Job]:
        try:
            reply = await self._audit.BatchGetJobs(
                audit_service_pb2.BatchGetJobsRequest(names=[a.name for a in accepted]),
                timeout=AUDIT_TIMEOUT_SECONDS,
                wait_for_ready=True,
            )
        except grpc.aio.AioRpcError:
            raise TransientError(ReasonCode.DEPENDENCY_UNAVAILABLE, "audit unavailable") from None
        known = {job.name: job for job in reply.jobs}
        return [known.get(a.name) or accepted_view(a) for a in accepted]


def _rows(
    session: Session, *, tenant: str, after: tuple[datetime, str] | None, size: int
) -> list[Any]:
    table = tables.jobs
    query = select(table).where(table.c.tenant == tenant)
    if after is not None:
        created, job = after
        query = query.where(
            or_(
                table.c.created_at < created, and_(table.c.created_at == created, table.c.job < job)
            )
        )
    return list(
        session.execute(query.order_by(table.c.created_at.desc(), table.c.job.desc()).limit(size))
    )
