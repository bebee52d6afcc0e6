"""AuditService: the job view and the ledger, read-only but for operators'
dead-letter decisions, retirement records (``quire.audit.retirement``) and
admission's changes of a ruleset's current version
(``quire.audit.rulesetchanges``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import grpc
from sqlalchemy import Connection, select

from quire.audit import tables
from quire.audit.checkpoints import CheckpointBook, CheckpointFiles
from quire.audit.deadletterdesk import DeadLetterDesk
from quire.audit.evidence import NO_ENTRIES, build_evidence, dumps, job_owner
from quire.audit.follow import Follows
from quire.audit.retirement import record_retirement
from quire.audit.rulesetchanges import record_ruleset_change
from quire.audit.trackcompare import Window, compare_tracks
from quire.audit.v1 import audit_service_pb2 as pb
from quire.audit.v1 import audit_service_pb2_grpc as pb_grpc
from quire.audit.verification import verify_ledger
from quire.audit.watch import JobWatches
from quire.database import Database
from quire.errors import FieldViolation, InvalidInput, NotFound, PermissionDenied
from quire.evidenceverify import public_key_fingerprint
from quire.grpcstatus import at_the_edge
from quire.idempotency import OPERATORS, RequestOnce
from quire.jobs import job_id, job_name, state_value, timestamp
from quire.jobview import JobFacts, fold
from quire.operatorcheck import OperatorCheck
from quire.paging import PageTokens
from quire.pipeline import STAGE_NAMES, stage
from quire.reasons import ReasonCode
from quire.settings import BUILD_VERSION
from quire.type import job_pb2, queue_pb2

__all__ = ["AuditServicer"]

DOMAIN = "audit.quire"
MAX_BATCH = 1000
LIST_JOB_EVENTS = "quire.audit.v1.AuditService/ListJobEvents"
LIST_DEAD_LETTERS = "quire.audit.v1.AuditService/ListDeadLetters"
RETRY_DEAD_LETTER = "quire.audit.v1.AuditService/RetryDeadLetter"
DISCARD_DEAD_LETTER = "quire.audit.v1.AuditService/DiscardDeadLetter"


def dead_letter_record(row: Any) -> pb.DeadLetterRecord:
    record = pb.DeadLetterRecord(
        job=row.job,
        tenant=row.tenant,
        stage=row.stage,
        reason_code=row.reason_code,
        deliveries=row.deliveries,
        generation=row.generation,
        status=row.status,
        create_time=timestamp(row.dead_at),
        resolved_by=row.resolved_by or "",
    )
    if row.resolved_at is not None:
        record.resolve_time.CopyFrom(timestamp(row.resolved_at))
    return record


def _job(facts: JobFacts) -> job_pb2.Job:
    """What the API says of a job: folded from its ledger entries' hashed bytes."""
    job = job_pb2.Job(
        name=facts.job,
        state=state_value(facts.state),  # type: ignore[arg-type]
        reason_code=facts.reason_code,
        item_count=facts.item_count,
        manifest_digest=facts.manifest_digest,
        output_digest=facts.output_digest,
        ruleset_version=facts.ruleset_version,
        key_version=facts.key_version,
        reason_detail=facts.reason_detail,
        create_time=timestamp(facts.created),
        update_time=timestamp(facts.updated),
        timings=facts.timings,
        pins=facts.pins,
        track=facts.track,
        deliveries=facts.deliveries,
        attempt=facts.attempt,
        tenant=facts.tenant,
    )
    if facts.deadline is not None:
        job.deadline.CopyFrom(timestamp(facts.deadline))
    return job


def _views(connection: Connection, names: list[str]) -> dict[str, JobFacts]:
    """Each named job's view, folded from its events in ledger order."""
    table = tables.ledger
    events: dict[str, list[queue_pb2.TransitionEvent]] = {}
    rows = connection.execute(
        select(table.c.job, table.c.event).where(table.c.job.in_(names)).order_by(table.c.sequence)
    )
    for row in rows:
        events.setdefault(row.job, []).append(queue_pb2.TransitionEvent.FromString(row.event))
    folded = {job: fold(entries) for job, entries in events.items()}
    return {job: facts for job, facts in folded.items() if facts is not None}


def _window(request: pb.CompareTracksRequest) -> Window:
    """CompareTracks' window; INVALID_ARGUMENT (INVALID_ROLLOUT) for a stage
    the pipeline does not have, or a window that ends before it starts."""
    if request.stage and request.stage not in STAGE_NAMES:
        raise InvalidInput(
            ReasonCode.INVALID_ROLLOUT,
            "no such stage",
            (FieldViolation("stage", f"one of {', '.join(STAGE_NAMES)}"),),
        )
    start = request.start_time.ToDatetime(tzinfo=UTC)
    end = request.end_time.ToDatetime(tzinfo=UTC) if request.HasField("end_time") else None
    end = end or datetime.now(UTC)
    if end < start or request.sample_size < 0:
        raise InvalidInput(
            ReasonCode.INVALID_ROLLOUT,
            "the window is invalid",
            (
                FieldViolation("end_time", "not before start_time")
                if end < start
                else FieldViolation("sample_size", "not negative"),
            ),
        )
    return Window(
        start=start,
        end=end,
        stage_service=stage(request.stage).service if request.stage else "",
        sample_size=request.sample_size,
    )


class AuditServicer(pb_grpc.AuditServiceServicer):
    """Audit's AuditService: jobs and the ledger for reading, and for operators
    the dead-letter decisions and retirement records."""

    def __init__(
        self,
        database: Database,
        checkpoints: CheckpointBook | None = None,
        *,
        dead_letters: DeadLetterDesk | None = None,
        operators: OperatorCheck | None = None,
        watches: JobWatches | None = None,
        pages: PageTokens | None = None,
    ) -> None:
        """``pages`` keys the page tokens; without it (a servicer made in a
        test) they hold only within this object."""
        self._db = database
        self._pages = pages or PageTokens.ephemeral()
        self._watches = watches or JobWatches(database)
        self._follows = Follows(self._watches, _job, DOMAIN)
        self._checkpoints = checkpoints
        self._dead_letters = dead_letters
        self._operators = operators

    async def _desk(self, context: grpc.aio.ServicerContext) -> tuple[DeadLetterDesk, str]:
        """The dead-letter desk and the calling operator's token id."""
        if self._dead_letters is None or self._operators is None:
            raise NotFound("this audit service keeps no dead letters")
        return self._dead_letters, await self._operators.operator_of(context)

    @at_the_edge(DOMAIN)
    async def ListDeadLetters(  # noqa: N802 - gRPC method name
        self, request: pb.ListDeadLettersRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListDeadLettersResponse:
        desk, _operator = await self._desk(context)
        page = self._pages.page(
            LIST_DEAD_LETTERS,
            request.page_size,
            request.page_token,
            {"include_resolved": request.include_resolved},
        )
        rows = await desk.list(
            include_resolved=request.include_resolved, after=page.after, limit=page.fetch
        )
        served, token = page.cut(rows, lambda row: (row.dead_at, row.job))
        return pb.ListDeadLettersResponse(
            dead_letters=[dead_letter_record(r) for r in served], next_page_token=token
        )

    @at_the_edge(DOMAIN)
    async def RetryDeadLetter(  # noqa: N802 - gRPC method name
        self, request: pb.RetryDeadLetterRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeadLetterRecord:
        desk, operator = await self._desk(context)
        once = RequestOnce(
            tables.request_ids, OPERATORS, RETRY_DEAD_LETTER, request, pb.DeadLetterRecord
        )

        budget = request.budget if request.HasField("budget") else None

        async def retry() -> pb.DeadLetterRecord:
            row = await desk.retry(job_name(job_id(request.job)), operator, budget)
            record = dead_letter_record(row)
            deadline = await desk.deadline_of(row.job, row.generation + 1)
            if deadline is not None:
                record.deadline.CopyFrom(deadline)
            return record

        return await once.around(self._db, retry)

    @at_the_edge(DOMAIN)
    async def DiscardDeadLetter(  # noqa: N802 - gRPC method name
        self, request: pb.DiscardDeadLetterRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeadLetterRecord:
        desk, operator = await self._desk(context)
        once = RequestOnce(
            tables.request_ids, OPERATORS, DISCARD_DEAD_LETTER, request, pb.DeadLetterRecord
        )

        async def discard() -> pb.DeadLetterRecord:
            return dead_letter_record(await desk.discard(job_name(job_id(request.job)), operator))

        return await once.around(self._db, discard)

    @at_the_edge(DOMAIN)
    async def RecordRetirement(  # noqa: N802 - gRPC method name
        self, request: pb.RecordRetirementRequest, context: grpc.aio.ServicerContext
    ) -> pb.RecordRetirementResponse:
        if self._operators is None:
            raise NotFound("this audit service takes no operator calls")
        operator = await self._operators.operator_of(context)
        prefix, _, tenant = request.tenant.partition("/")
        if prefix != "tenants":
            raise NotFound("tenant not found")
        job = job_name(job_id(request.job)) if request.job else ""
        build = self._dead_letters.build_version if self._dead_letters else BUILD_VERSION
        actor = queue_pb2.Actor(service="operator", instance=operator, build_version=build)
        event_id, appended = await self._db.run(
            lambda s: record_retirement(s, tenant, job, request.retirement, actor)
        )
        return pb.RecordRetirementResponse(event_id=event_id, appended=appended)

    @at_the_edge(DOMAIN)
    async def RecordRulesetChange(  # noqa: N802 - gRPC method name
        self, request: pb.RecordRulesetChangeRequest, context: grpc.aio.ServicerContext
    ) -> pb.RecordRulesetChangeResponse:
        """Admission's call alone (``quire.accesspolicy``): it keeps the current versions."""
        event_id, appended = await self._db.run(
            lambda s: record_ruleset_change(s, request.change, request.change_time, request.actor)
        )
        return pb.RecordRulesetChangeResponse(event_id=event_id, appended=appended)

    @at_the_edge(DOMAIN)
    async def CompareTracks(  # noqa: N802 - gRPC method name
        self, request: pb.CompareTracksRequest, context: grpc.aio.ServicerContext
    ) -> pb.CompareTracksResponse:
        if self._operators is None:
            raise NotFound("this audit service takes no operator calls")
        await self._operators.operator_of(context)
        window = _window(request)
        tracks = await self._db.read(lambda s: compare_tracks(s, window))
        return pb.CompareTracksResponse(tracks=tracks)

    @at_the_edge(DOMAIN)
    async def GetJob(  # noqa: N802 - gRPC method name
        self, request: pb.GetJobRequest, context: grpc.aio.ServicerContext
    ) -> job_pb2.Job:
        name = job_name(job_id(request.name))
        views = await self._db.read(lambda s: _views(s, [name]))
        if name not in views:
            raise NotFound("job not found")
        return _job(views[name])

    @at_the_edge(DOMAIN)
    async def WatchJob(  # noqa: N802 - gRPC method name
        self, request: pb.WatchJobRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.WatchJobResponse]:
        name = job_name(job_id(request.name))
        if request.after_sequence < 0:
            raise InvalidInput(
                ReasonCode.INVALID_PAGE,
                "after_sequence must not be negative",
                (FieldViolation("after_sequence", "negative"),),
            )
        changes = self._watches.changes(
            name, request.after_sequence, settled_only=request.settled_only
        )
        async for facts, sequence in changes:
            yield pb.WatchJobResponse(job=_job(facts), sequence=sequence)

    async def FollowJobs(  # noqa: N802 - gRPC method name
        self, requests: AsyncIterator[pb.FollowJobsRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.FollowJobsResponse]:
        # Refusals travel inside the stream, under each follow's id. Headers
        # first: the caller writes only once the stream is known to be served.
        await context.send_initial_metadata(())
        async for response in self._follows.serve(requests):
            yield response

    @at_the_edge(DOMAIN)
    async def VerifyLedger(  # noqa: N802 - gRPC method name
        self, request: pb.VerifyLedgerRequest, context: grpc.aio.ServicerContext
    ) -> pb.VerifyLedgerResponse:
        files = self._checkpoints.files() if self._checkpoints else CheckpointFiles([], [], [])
        report = await self._db.read(
            lambda s: verify_ledger(
                s,
                files.checkpoints,
                heads=files.heads,
                refused=files.refused,
                missing=files.missing,
            )
        )
        return pb.VerifyLedgerResponse(
            ok=report.ok,
            entries=report.entries,
            chains=report.chains,
            checkpoints_checked=report.checkpoints_checked,
            findings=[
                pb.LedgerFinding(
                    kind=f.kind, sequence=f.sequence, tenant=f.tenant, column=f.column, job=f.job
                )
                for f in report.findings
            ],
        )

    @at_the_edge(DOMAIN)
    async def ExportEvidence(  # noqa: N802 - gRPC method name
        self, request: pb.ExportEvidenceRequest, context: grpc.aio.ServicerContext
    ) -> pb.Evidence:
        if self._checkpoints is None:
            raise NotFound("this audit service keeps no checkpoints")
        name = job_name(job_id(request.job))
        tenant = await self._evidence_scope(request.tenant, context)
        book = self._checkpoints
        # The one tenant's log: an export costs what that tenant has, not the ledger.
        owner = tenant or await self._db.read(lambda s: job_owner(s, name))
        await book.take(tenant=owner)  # so that a checkpoint covers even the newest entry
        documents = await asyncio.to_thread(book.documents, owner)
        evidence = await self._db.read(
            lambda s: build_evidence(
                s, name, documents, book.public_pem, since_size=request.since_size, tenant=tenant
            )
        )
        return pb.Evidence(job=name, json=dumps(evidence))

    async def _evidence_scope(self, tenant: str, context: grpc.aio.ServicerContext) -> str | None:
        """The tenant an export is scoped to: the one named (admission asks on
        a tenant's behalf, and gets that tenant's jobs only); None, any
        tenant's job, only for an operator. The access rule admitted the
        caller as admission or an operator; an unscoped export asks again
        whose token it carries, so a service's identity alone never reads
        across tenants."""
        if tenant:
            prefix, _, ident = tenant.partition("/")
            if prefix != "tenants" or not ident or "/" in ident:
                raise NotFound(NO_ENTRIES)  # as for another tenant's job
            return ident
        if self._operators is None:
            raise PermissionDenied("an export for no tenant needs an operator token")
        await self._operators.operator_of(context)
        return None

    @at_the_edge(DOMAIN)
    async def GetCheckpointKey(  # noqa: N802 - gRPC method name
        self, request: pb.GetCheckpointKeyRequest, context: grpc.aio.ServicerContext
    ) -> pb.CheckpointKey:
        if self._checkpoints is None:
            raise NotFound("this audit service keeps no checkpoints")
        pem = self._checkpoints.public_pem
        return pb.CheckpointKey(public_key_pem=pem, public_key_sha256=public_key_fingerprint(pem))

    @at_the_edge(DOMAIN)
    async def BatchGetJobs(  # noqa: N802 - gRPC method name
        self, request: pb.BatchGetJobsRequest, context: grpc.aio.ServicerContext
    ) -> pb.BatchGetJobsResponse:
        if len(request.names) > MAX_BATCH:
            raise InvalidInput(
                ReasonCode.INVALID_PAGE,
                f"at most {MAX_BATCH} names",
                (FieldViolation("names", "too many"),),
            )
        names = [job_name(job_id(name)) for name in request.names]
        views = await self._db.read(lambda s: _views(s, names))
        return pb.BatchGetJobsResponse(jobs=[_job(views[name]) for name in names if name in views])

    @at_the_edge(DOMAIN)
    async def ListJobEvents(  # noqa: N802 - gRPC method name
        self, request: pb.ListJobEventsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListJobEventsResponse:
        name = job_name(job_id(request.job))
        page = self._pages.page(
            LIST_JOB_EVENTS, request.page_size, request.page_token, {"job": name}
        )
        after = page.after[0] if page.after else 0  # the last sequence served
        table = tables.ledger
        rows = await self._db.read(
            lambda s: s.execute(
                select(table)
                .where(table.c.job == name, table.c.sequence > after)
                .order_by(table.c.sequence)
                .limit(page.fetch)
            ).all()
        )
        served, token = page.cut(rows, lambda row: (row.sequence,))
        return pb.ListJobEventsResponse(
            entries=[
                pb.LedgerEntry(
                    sequence=row.sequence,
                    event=queue_pb2.TransitionEvent.FromString(row.event),
                    prev_hash=row.prev_hash,
                    entry_hash=row.entry_hash,
                )
                for row in served
            ],
            next_page_token=token,
        )
