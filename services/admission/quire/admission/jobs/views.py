"""How admission answers questions about a tenant's jobs without reading
audit's tables: existence and ownership from its own intake rows, state from
audit over gRPC. Another tenant's job is NOT_FOUND, like one that never was.

A job the validator deferred while a source system is unavailable stays
VALIDATING (a deferral is no transition, and not in the ledger): GetJob and
WatchJob add what it waits for (``Job.source_waits``), asked of the
validator. Only for a job still ACCEPTED or VALIDATING that has a deadline
(every job naming sources by reference has one), so every other status
read makes no call; and with a short timeout, any error leaving the waits
empty: a slow validator never fails or delays a status read for long."""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import grpc
from sqlalchemy import Connection, select

from quire.admission import tables
from quire.admission.jobs.auditjobs import ask_audit
from quire.admission.jobs.intake import AcceptedJob, accepted_from_row
from quire.admission.jobs.outstanding import OutstandingJobs
from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
from quire.database import Database
from quire.errors import NotFound, TransientError
from quire.jobs import TERMINAL_STATES, job_id, job_name, state_name, timestamp
from quire.paging import MAX_PAGE_SIZE, Page, PageTokens, Position, keyset_after
from quire.pipeline import State
from quire.reasons import ReasonCode
from quire.telemetry import name_job
from quire.type import job_pb2
from quire.validator.v1 import validator_service_pb2, validator_service_pb2_grpc

__all__ = ["JobViews", "JobPage", "accepted_view", "with_intake"]

AUDIT_TIMEOUT_SECONDS = 5.0
SCAN_LIMIT = 2000
"""Rows one ListJobs call may look at while filtering by state; past it the
page ends short, with a token that continues after the last row looked at."""
LIST_JOBS = "quire.admission.v1.AdmissionService/ListJobs"
WAITS_TIMEOUT_SECONDS = 0.5
"""How long a status read waits for the validator's source waits."""
_MAY_WAIT = frozenset({State.ACCEPTED.number, State.VALIDATING.number})
"""States in which a job can wait for a source system."""


@dataclass(frozen=True)
class JobPage:
    """One page of ``ListJobs``; ``next_token`` is "" on the last page."""

    jobs: list[job_pb2.Job]
    next_token: str


def accepted_view(accepted: AcceptedJob) -> job_pb2.Job:
    """What admission alone can say: the job exists and was accepted (and
    when its budget runs out, if it has one). No stage has recorded a step
    yet as far as admission knows, so ``deliveries`` and ``attempt`` are 0."""
    job = job_pb2.Job(
        name=accepted.name,
        state=State.ACCEPTED.number,  # type: ignore[arg-type]
        item_count=accepted.item_count,
        manifest_digest=accepted.manifest_digest,
        create_time=timestamp(accepted.created_at),
        update_time=timestamp(accepted.created_at),
        bundle_id=accepted.bundle_id,
        batch=accepted.batch,
        track=accepted.track,
        deliveries=0,
        attempt=0,
    )
    if accepted.deadline is not None:
        job.deadline.CopyFrom(timestamp(accepted.deadline))
    return job


def with_intake(job: job_pb2.Job, accepted: AcceptedJob) -> job_pb2.Job:
    """Audit's view of the job with what only admission keeps: the client's
    bundle_id and the batch the job is a packet of; and the deadline and
    rollout track set at acceptance when audit's view does not carry them.
    Everything else, ``deliveries`` and ``attempt`` included, is audit's, from
    the ledger's hashed entries, and passes through unchanged."""
    job.bundle_id = accepted.bundle_id
    job.batch = accepted.batch
    job.track = job.track or accepted.track  # the ledger's, else the task's
    if accepted.deadline is not None and not job.HasField("deadline"):
        job.deadline.CopyFrom(timestamp(accepted.deadline))
    return job


RECENT_JOBS = 4096
RECENT_SECONDS = 60.0
"""How many jobs accepted here, and for how long, ``owned`` knows without a read."""


class JobViews:
    """Reads a tenant's jobs: ownership from admission's rows, state from audit,
    and the source waits from the validator."""

    def __init__(
        self,
        database: Database,
        audit: audit_service_pb2_grpc.AuditServiceStub,
        outstanding: OutstandingJobs,
        *,
        pages: PageTokens,
        validator: validator_service_pb2_grpc.ValidatorServiceStub | None = None,
    ) -> None:
        self._db = database
        self._pages = pages
        self._audit = audit
        self._outstanding = outstanding
        self._validator = validator
        self._recent: OrderedDict[tuple[str, str], tuple[float, AcceptedJob]] = OrderedDict()

    def accepted(self, tenant: str, job: AcceptedJob) -> None:
        """A job this process just accepted for ``tenant``: the watch or status
        read that usually follows finds it without a read (what ``owned``
        answers of a job never changes after acceptance)."""
        self._recent[(tenant, job.name)] = (time.monotonic(), replace(job, handoff=None))
        while len(self._recent) > RECENT_JOBS:
            self._recent.popitem(last=False)

    async def owned(self, tenant: str, name: str) -> AcceptedJob:
        job = job_name(job_id(name))
        name_job(job)
        recent = self._recent.get((tenant, job))
        if recent is not None and time.monotonic() - recent[0] < RECENT_SECONDS:
            return recent[1]
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
        return with_intake(job, accepted)

    async def status(self, accepted: AcceptedJob) -> job_pb2.Job:
        """GetJob's answer: ``current`` and, while the job may wait for a
        source system, what it waits for."""
        return await self.with_source_waits(await self.current(accepted))

    async def with_source_waits(self, job: job_pb2.Job) -> job_pb2.Job:
        """``job`` with the source systems it waits for, asked of the
        validator when it is ACCEPTED or VALIDATING and has a deadline;
        unchanged otherwise, or when the validator does not answer in time."""
        if (
            self._validator is None
            or job.state not in _MAY_WAIT
            or not job.HasField("deadline")
            or job.source_waits
        ):
            return job
        try:
            reply = await self._validator.ListSourceWaits(
                validator_service_pb2.ListSourceWaitsRequest(job=job.name),
                timeout=WAITS_TIMEOUT_SECONDS,
                wait_for_ready=True,
            )
        except Exception:  # noqa: BLE001 - a status read never fails for want of its waits
            return job
        job.source_waits.extend(reply.waits)
        return job

    async def artifact_retired(self, name: str) -> bool:
        """Whether audit's ledger records the job's signed artifact as retired
        under the retention policy (its bytes deleted on purpose)."""
        token = ""
        while True:
            try:
                reply = await self._audit.ListJobEvents(
                    audit_service_pb2.ListJobEventsRequest(
                        job=name, page_size=MAX_PAGE_SIZE, page_token=token
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
        """The tenant's jobs, newest first, filtered by state when one is given.

        The token is bound to the tenant and the state: another tenant's, or
        one from a listing under another state, is refused."""
        page = self._pages.page(LIST_JOBS, size, token, {"tenant": tenant, "state": state})
        found: list[job_pb2.Job] = []
        last_served: Position | None = None
        after = page.after
        scanned = 0
        while scanned < SCAN_LIMIT:
            rows = await self._db.read(partial(_rows, tenant=tenant, after=after, page=page))
            views = await self._views([accepted_from_row(row) for row in rows]) if rows else []
            for row, view in zip(rows, views, strict=True):
                if not state or view.state == state:
                    if len(found) == page.size:  # one more matches: another page follows
                        assert last_served is not None
                        return JobPage(found, page.next_token(last_served))
                    found.append(view)
                    last_served = (row.created_at, row.job)
                after = (row.created_at, row.job)
                scanned += 1
            if len(rows) < page.fetch:
                return JobPage(found, "")
        assert after is not None
        return JobPage(found, page.next_token(after))

    async def _views(self, accepted: list[AcceptedJob]) -> list[job_pb2.Job]:
        known = await ask_audit(self._audit, [a.name for a in accepted])
        return [
            with_intake(known[a.name], a) if a.name in known else accepted_view(a) for a in accepted
        ]


def _rows(connection: Connection, *, tenant: str, after: Position | None, page: Page) -> list[Any]:
    """The tenant's next rows, newest first: ``(created_at, job)`` is unique."""
    table = tables.jobs
    order = (table.c.created_at, table.c.job)
    query = select(table).where(table.c.tenant == tenant)
    before = keyset_after(order, after, descending=True)
    if before is not None:
        query = query.where(before)
    query = query.order_by(*(column.desc() for column in order)).limit(page.fetch)
    return list(connection.execute(query))
