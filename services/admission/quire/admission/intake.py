"""Job intake: a checked manifest becomes one job, exactly once per idempotency key.

The job row, its first task and its ACCEPTED event are committed together;
only then is the caller told OK. Publishing to the validate queue happens
right after (``Dispatcher``), and a sweep republishes anything a crash left
undispatched, so an accepted job is never lost and never doubled (the queue
drops a republish by its ``Nats-Msg-Id``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from quire.admission import tables
from quire.admission.manifests import PRIORITIES, check_manifest
from quire.admission.v1 import admission_service_pb2 as pb
from quire.database import Database, insert_if_absent
from quire.errors import Conflict, FieldViolation, InvalidInput
from quire.jobs import job_name, manifest_digest, new_job_id
from quire.reasons import ReasonCode
from quire.settings import AdmissionSettings
from quire.transitions import EventFactory
from quire.type import job_pb2, queue_pb2

__all__ = ["Intake", "AcceptedJob"]

MAX_REQUEST_ID = 128


@dataclass(frozen=True)
class AcceptedJob:
    name: str
    manifest_digest: str
    item_count: int
    created_at: datetime
    dispatched: bool


def _request_sha256(digest: str, priority: str) -> str:
    canonical = json.dumps({"manifest": digest, "priority": priority}, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


class Intake:
    def __init__(
        self, database: Database, events: EventFactory, settings: AdmissionSettings
    ) -> None:
        self._db = database
        self._events = events
        self._settings = settings

    async def submit(self, tenant: str, request: pb.SubmitJobRequest) -> AcceptedJob:
        if not request.request_id:
            raise InvalidInput(
                ReasonCode.REQUEST_ID_MISSING,
                "request_id is required",
                (FieldViolation("request_id", "required"),),
            )
        if len(request.request_id) > MAX_REQUEST_ID:
            raise InvalidInput(
                ReasonCode.REQUEST_ID_TOO_LONG,
                f"request_id is limited to {MAX_REQUEST_ID} characters",
                (FieldViolation("request_id", "too long"),),
            )
        return await self._db.run(lambda s: self._submit(s, tenant, request))

    def _submit(self, session: Session, tenant: str, request: pb.SubmitJobRequest) -> AcceptedJob:
        digests = {item.sha256 for item in request.manifest.items}
        rows = session.execute(
            select(tables.sources).where(
                tables.sources.c.tenant == tenant, tables.sources.c.sha256.in_(digests)
            )
        ).all()
        uploaded = {row.sha256: row for row in rows}
        violations = check_manifest(
            request.manifest, uploaded=uploaded, max_items=self._settings.max_manifest_items
        )
        if request.priority not in PRIORITIES:
            violations.append(
                FieldViolation("priority", "must be interactive or batch", "UNKNOWN_PRIORITY")
            )
        if violations:
            raise InvalidInput(
                ReasonCode.INVALID_MANIFEST, "the manifest is invalid", tuple(violations)
            )

        digest = manifest_digest(request.manifest)
        priority = request.priority or "interactive"
        request_sha = _request_sha256(digest, priority)
        job = job_name(new_job_id())
        task = queue_pb2.JobTask(
            job=job,
            tenant=tenant,
            manifest_digest=digest,
            ruleset=request.manifest.ruleset or "default",
            render_profile=request.manifest.render_profile or "simple",
            priority=priority,
            sources=[
                job_pb2.SourceRef(
                    position=item.position,
                    document_id=item.document_id,
                    sha256=item.sha256,
                    content_type=uploaded[item.sha256].content_type,
                    size_bytes=uploaded[item.sha256].size_bytes,
                    blob_key=uploaded[item.sha256].blob_key,
                )
                for item in sorted(request.manifest.items, key=lambda i: i.position)
            ],
        )
        accepted = self._events.transition(task, "", "ACCEPTED", attempt=1, lease_token=0)
        now = datetime.now(UTC)
        inserted = insert_if_absent(
            session,
            tables.jobs,
            {
                "job": job,
                "tenant": tenant,
                "request_id": request.request_id,
                "request_sha256": request_sha,
                "manifest_digest": digest,
                "item_count": len(task.sources),
                "task": task.SerializeToString(),
                "accepted_event": accepted.SerializeToString(),
                "created_at": now,
            },
        )
        row = session.execute(
            select(tables.jobs).where(
                tables.jobs.c.tenant == tenant, tables.jobs.c.request_id == request.request_id
            )
        ).one()
        if not inserted and row.request_sha256 != request_sha:
            raise Conflict(
                ReasonCode.IDEMPOTENCY_KEY_REUSED, "request_id was used for a different request"
            )
        return AcceptedJob(
            name=row.job,
            manifest_digest=row.manifest_digest,
            item_count=row.item_count,
            created_at=row.created_at,
            dispatched=row.dispatched_at is not None,
        )
