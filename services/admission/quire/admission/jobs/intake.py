"""Job intake: a checked manifest becomes one job, exactly once per idempotency key.

Order of decisions, cheapest and most certain first:
  1. the request itself (request_id, manifest) — INVALID_ARGUMENT, every violation;
  2. the idempotency key — a live key returns its job (even under load), or is
     refused as reused for a different request;
  3. load — the pipeline's temporary space, the validate queue's backlog age
     and the tenant's outstanding jobs — RESOURCE_EXHAUSTED with a retry hint,
     nothing persisted;
  4. the key, the job row, its first task and its ACCEPTED event, committed in
     one transaction; the key is the primary key, so concurrent identical
     submissions make one job.
Publishing to the validate queue happens right after (``Dispatcher``), and a
sweep republishes anything a crash left undispatched.

A manifest item may name its source by reference to one of the tenant's
source systems instead of an uploaded digest: the check reads those systems'
registrations as it reads the uploads (and not at all for a manifest of
uploads only), and the task copies each one into its ``SourceRef.fetch``. A
job with a budget (asked for, or the default for references; ``budgets``)
carries its deadline, acceptance time plus budget, in ``JobTask.deadline``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf.duration_pb2 import Duration
from sqlalchemy import Connection, bindparam, delete, select

from quire.admission import tables
from quire.admission.jobs.budgets import JobBudgets
from quire.admission.jobs.manifests import (
    PRIORITIES,
    check_manifest,
    has_references,
    referenced_systems,
)
from quire.admission.jobs.outstanding import OutstandingJobs, count_outstanding
from quire.admission.jobs.screening import Screened, Screening
from quire.admission.rollouts.records import OpenRollouts, candidate_ruleset
from quire.admission.rulesets.catalog import RulesetCatalog, resolve_ruleset
from quire.admission.rulesets.currents import CurrentRulesets
from quire.admission.settings import AdmissionSettings
from quire.admission.tenants.directory import Tenant
from quire.admission.tenants.sourcesystems import SourceSystem, fetch_of, read_systems
from quire.admission.uploads.inlinesources import KeptSources
from quire.admission.uploads.tempguard import TempSpaceGuard
from quire.admission.v1 import admission_service_pb2 as pb
from quire.database import Database, insert_if_absent, savepoint
from quire.datakeys import DataKeys
from quire.driversql import DriverStatement
from quire.errors import (
    Conflict,
    FieldViolation,
    InvalidInput,
    Overloaded,
    QuireError,
    QuotaViolation,
)
from quire.groupcommit import GroupCommit
from quire.idempotency import check_request_id
from quire.jobs import job_name, manifest_digest, new_job_id, timestamp
from quire.metrics import ServiceMetrics
from quire.pipeline import State
from quire.reasons import ReasonCode
from quire.tracks import CANDIDATE, track_for
from quire.transitions import EventFactory
from quire.type import job_pb2, queue_pb2
from quire.workqueue.backlog import QueueAgeProbe
from quire.workqueue.topology import PRIORITIES as CLASSES

__all__ = [
    "Intake",
    "AcceptedJob",
    "MAX_VIOLATIONS_SHOWN",
    "bundle_id_violations",
    "shown_violations",
]

# The statements every submission runs, built once (building a statement on
# every call costs more CPU than SQLite takes to run it).
_KEY = DriverStatement(
    select(tables.idempotency_keys).where(
        tables.idempotency_keys.c.tenant == bindparam("tenant"),
        tables.idempotency_keys.c.request_id == bindparam("request_id"),
    )
)
_JOB = DriverStatement(select(tables.jobs).where(tables.jobs.c.job == bindparam("job")))
_SOURCES = DriverStatement(
    select(tables.sources).where(
        tables.sources.c.tenant == bindparam("tenant"),
        tables.sources.c.sha256.in_(bindparam("digests", expanding=True)),
    )
)
_LOCK_TENANT = DriverStatement(
    select(tables.tenants.c.id).where(tables.tenants.c.id == bindparam("tenant")).with_for_update()
)
_EXPIRED_KEY = DriverStatement(
    delete(tables.idempotency_keys).where(
        tables.idempotency_keys.c.tenant == bindparam("tenant"),
        tables.idempotency_keys.c.request_id == bindparam("request_id"),
        tables.idempotency_keys.c.expires_at <= bindparam("now"),
    )
)
_NEW_JOB = DriverStatement(
    tables.jobs.insert().values(
        {
            name: bindparam(name)
            for name in (
                "job",
                "tenant",
                "request_id",
                "manifest_digest",
                "item_count",
                "task",
                "accepted_event",
                "created_at",
                "bundle_id",
                "batch",
                "deadline",
            )
        }
    )
)

CHILD_KEY_PREFIX = "batch:"
"""The prefix of the idempotency keys the batch dispatcher gives packets' jobs."""

MAX_VIOLATIONS_SHOWN = 40
"""Beyond this, a count: gRPC trailers must stay small enough to arrive."""
BUNDLE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
"""A client's bundle_id: short, and safe to show anywhere (no spaces, no slashes)."""


def bundle_id_violations(bundle_id: str, field: str = "bundle_id") -> list[FieldViolation]:
    """An empty id is no id; a present one must match ``BUNDLE_ID``."""
    if not bundle_id or BUNDLE_ID.match(bundle_id):
        return []
    return [FieldViolation(field, "at most 128 characters of A-Z a-z 0-9 . _ : -", "BAD_BUNDLE_ID")]


def shown_violations(violations: list[FieldViolation], field: str) -> tuple[FieldViolation, ...]:
    """The first ``MAX_VIOLATIONS_SHOWN``, and a count of the rest under ``field``."""
    shown = tuple(violations[:MAX_VIOLATIONS_SHOWN])
    if len(violations) > MAX_VIOLATIONS_SHOWN:
        more = len(violations) - MAX_VIOLATIONS_SHOWN
        shown += (FieldViolation(field, f"and {more} more violations", "MORE"),)
    return shown


@dataclass(frozen=True)
class AcceptedJob:
    """A job as admission accepted it (its ``jobs`` row). ``handoff`` is set only
    on the call that accepted it."""

    name: str
    manifest_digest: str
    item_count: int
    created_at: datetime
    dispatched: bool
    handoff: tuple[bytes, bytes] | None = None
    """For a job accepted by this call: its task and ACCEPTED event, to publish."""
    bundle_id: str = ""
    batch: str = ""
    """The batch (``batches/{batch}``) the job is a packet of, if any."""
    deadline: datetime | None = None
    """When the job's budget runs out; None for a job without one."""
    track: str = ""
    """The rollout track the job was pinned to (``quire.tracks``); "" for none."""


class _OverQuota(Exception):
    """Raised inside the transaction so that it rolls back and writes nothing."""

    def __init__(self, outstanding: int) -> None:
        super().__init__(outstanding)
        self.outstanding = outstanding


def _requested_budget(request: pb.SubmitJobRequest) -> Duration | None:
    return request.budget if request.HasField("budget") else None


def _request_sha(request: pb.SubmitJobRequest, digest: str) -> str:
    """The request's own digest: what a reuse of its key must match."""
    priority = request.priority or "interactive"
    return _request_sha256(digest, priority, request.bundle_id, _requested_budget(request))


def _request_sha256(
    digest: str, priority: str, bundle_id: str = "", budget: Duration | None = None
) -> str:
    # Without a bundle_id (or a budget) the document is what it was before
    # bundle ids (budgets), so keys stored then still match their requests.
    fields = {"manifest": digest, "priority": priority}
    if bundle_id:
        fields["bundle_id"] = bundle_id
    if budget is not None:  # the budget asked for, not the default a reference gets
        fields["budget"] = f"{budget.seconds}.{budget.nanos:09d}"
    canonical = json.dumps(fields, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


_DEFAULT_RULESETS = frozenset({"default@1"})
"""The rulesets known without a catalog (tests that build an intake alone)."""


def accepted_from_row(row: object) -> AcceptedJob:
    return AcceptedJob(
        name=row.job,  # type: ignore[attr-defined]
        manifest_digest=row.manifest_digest,  # type: ignore[attr-defined]
        item_count=row.item_count,  # type: ignore[attr-defined]
        created_at=row.created_at,  # type: ignore[attr-defined]
        dispatched=row.dispatched_at is not None,  # type: ignore[attr-defined]
        bundle_id=row.bundle_id or "",  # type: ignore[attr-defined]
        batch=row.batch or "",  # type: ignore[attr-defined]
        deadline=row.deadline,  # type: ignore[attr-defined]
        track=_track(row),
    )


def _track(row: object) -> str:
    """The track pinned on the job's stored task."""
    task = getattr(row, "task", None)
    return queue_pb2.JobTask.FromString(task).track if task else ""


class Intake:
    """Turns a SubmitJob into one job, or refuses it; the job is committed, not
    yet published (``Dispatcher.hand_on``)."""

    def __init__(
        self,
        database: Database,
        events: EventFactory,
        settings: AdmissionSettings,
        *,
        backlog: QueueAgeProbe | None = None,
        outstanding: OutstandingJobs | None = None,
        catalog: RulesetCatalog | None = None,
        temp_space: TempSpaceGuard | None = None,
        metrics: ServiceMetrics | None = None,
        budgets: JobBudgets | None = None,
        rollouts: OpenRollouts | None = None,
        keys: DataKeys | None = None,
        currents: CurrentRulesets | None = None,
    ) -> None:
        """``keys``: the tenants' data keys, to refuse work for a shredded tenant."""
        self._budgets = budgets or JobBudgets()
        self.rollouts = rollouts or OpenRollouts()
        """The open rollouts each accepted job is pinned against (its track)."""
        self.currents = currents or CurrentRulesets(database)
        """Each ruleset name's current version: a job naming no version gets it."""
        self._accepted = metrics.counter("quire_jobs_accepted_total") if metrics else None
        for priority in CLASSES:  # every class's series exists from the start, at 0
            self.count_accepted(priority, 0)
        self._refused = metrics.counter("quire_jobs_refused_total") if metrics else None
        self._catalog = catalog
        self._temp_space = temp_space
        self._keys = keys
        self._db = database
        self._writes = GroupCommit(database)
        self._events = events
        self._settings = settings
        self._backlog = backlog
        self._outstanding = outstanding

    async def submit(
        self,
        tenant: Tenant,
        request: pb.SubmitJobRequest,
        kept: KeptSources | None = None,
        *,
        key_checked: bool = False,
        screened: Screened[AcceptedJob] | None = None,
    ) -> AcceptedJob:
        """Accept the job (or return the one this request made before), or refuse.
        ``kept``: the request's inline sources, stored and still to be recorded:
        they count as uploaded, and are recorded in the job's transaction (left
        recorded should the job be refused there; the caller records them if
        the refusal comes before). ``key_checked``: the caller already found,
        for this request, that the tenant takes work (``check_takes_work``).
        ``screened``: the request's ``screening`` and what it found, read
        beside the inline sources' own look-up (then not read again)."""
        try:
            accepted = await self._submit(tenant, request, kept, key_checked, screened)
        except QuireError as refused:
            if self._refused is not None:
                self._refused.labels(reason=refused.reason.value).inc()
            raise
        if accepted.handoff is not None:
            self.count_accepted(request.priority or "interactive")
        return accepted

    def count_accepted(self, priority: str, count: int = 1) -> None:
        """``quire_jobs_accepted_total{class}``: new jobs, by SubmitJob or a
        batch page (``create_child``, counted by the dispatcher once its
        page has committed); a repeated request makes none."""
        if self._accepted is not None:
            self._accepted.labels(**{"class": priority}).inc(count)

    def check_fields(self, request: pb.SubmitJobRequest) -> None:
        """The request's own fields, before anything is read or kept (inline
        sources are kept only for a request that passes these); a refusal is
        counted as ``submit`` counts its own."""
        try:
            self._check_fields(request)
        except QuireError as refused:
            if self._refused is not None:
                self._refused.labels(reason=refused.reason.value).inc()
            raise

    def _check_fields(self, request: pb.SubmitJobRequest) -> None:
        check_request_id(request.request_id, required=True)
        if request.request_id.startswith(CHILD_KEY_PREFIX):
            # Batch packets' jobs are keyed "batch:{batch}:{index}"; a client's
            # own key there would take a packet's place.
            raise InvalidInput(
                ReasonCode.REQUEST_ID_RESERVED,
                f"request_id must not start with {CHILD_KEY_PREFIX!r}",
                (FieldViolation("request_id", "reserved prefix"),),
            )
        bad_bundle = bundle_id_violations(request.bundle_id)
        if bad_bundle:
            raise InvalidInput(
                ReasonCode.INVALID_MANIFEST, "bundle_id is invalid", tuple(bad_bundle)
            )

    def screening(
        self, tenant: Tenant, request: pb.SubmitJobRequest
    ) -> Screening[AcceptedJob] | None:
        """What ``submit`` reads before it writes, for a caller to read in a
        transaction of its own (the inline sources' look-up), with every
        source the request carries inline counted as uploaded; None while the
        ruleset catalog must first ask the validator (``submit`` reads then)."""
        known = self._catalog.fresh() if self._catalog else _DEFAULT_RULESETS
        if known is None:
            return None
        digest = manifest_digest(request.manifest)
        request_sha = _request_sha(request, digest)
        coming = frozenset(source.header.sha256 for source in request.inline_sources)

        def read(connection: Connection) -> tuple[AcceptedJob | None, bool]:
            return self._replay_or_check(connection, tenant.id, request, request_sha, known, coming)

        return Screening(known, digest, request_sha, read)

    async def _submit(
        self,
        tenant: Tenant,
        request: pb.SubmitJobRequest,
        kept: KeptSources | None,
        key_checked: bool,
        screened: Screened[AcceptedJob] | None,
    ) -> AcceptedJob:
        self._check_fields(request)
        if self._keys is not None and not key_checked:
            await asyncio.to_thread(self._keys.check_takes_work, tenant.id)
        priority = request.priority or "interactive"
        if screened is not None:
            if isinstance(screened.found, QuireError):
                raise screened.found
            screening = screened.screening
            digest, request_sha = screening.manifest_digest, screening.request_sha
            known, (replay, keyless) = screening.rulesets, screened.found
        else:
            digest = manifest_digest(request.manifest)
            request_sha = _request_sha(request, digest)
            fresh = self._catalog.fresh() if self._catalog else _DEFAULT_RULESETS
            if fresh is None:
                # The catalog must ask the validator; a live key answers even when
                # the validator cannot, so look for one first.
                replay = await self._db.read(
                    lambda s: self._replay(s, tenant.id, request, request_sha)
                )
                if replay is not None:
                    return replay
                assert self._catalog is not None
                fresh = await self._catalog.keys()
            known = fresh
            coming = kept.digests if kept is not None else frozenset()
            replay, keyless = await self._db.read(
                lambda s: self._replay_or_check(s, tenant.id, request, request_sha, known, coming)
            )
        if replay is not None:
            return replay
        current = await self.currents.versions(known)
        pinned = pb.SubmitJobRequest()
        pinned.CopyFrom(request)
        pinned.manifest.ruleset = resolve_ruleset(request.manifest.ruleset, known, current) or ""
        request = pinned  # the job carries name@version from here on
        if self._temp_space is not None:
            self._temp_space.check()
        await self._shed_for_backlog(priority)
        quota = tenant.outstanding_quota(self._settings)
        args = (tenant.id, request, request_sha, digest, priority, quota, keyless)
        try:
            return await self._accept(*args, kept)
        except _OverQuota:
            if self._outstanding is None:
                raise self._over_quota(quota) from None
        await self._outstanding.refresh(tenant.id, quota)  # some may have ended: ask audit
        try:
            return await self._accept(*args, kept)
        except _OverQuota:
            raise self._over_quota(quota) from None

    async def _accept(
        self,
        tenant: str,
        request: pb.SubmitJobRequest,
        request_sha: str,
        digest: str,
        priority: str,
        quota: int,
        keyless: bool,
        kept: KeptSources | None,
    ) -> AcceptedJob:
        args = (tenant, request, request_sha, digest, priority, quota, keyless)
        if kept is None or kept.recorded:
            return await self._writes.run(lambda s: self._insert(s, *args))

        def record_and_insert(connection: Connection) -> AcceptedJob | Exception:
            kept.record(connection)
            try:
                with savepoint(connection):  # a refused job leaves the sources recorded
                    return self._insert(connection, *args)
            except Exception as refused:  # noqa: BLE001 - raised once the sources are committed
                return refused

        outcome = await self._writes.run(record_and_insert)
        kept.recorded = True
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def _replay(
        self, connection: Connection, tenant: str, request: pb.SubmitJobRequest, request_sha: str
    ) -> AcceptedJob | None:
        """The job a live key already made, or None; refuses a key reused differently."""
        key = _KEY.first(connection, {"tenant": tenant, "request_id": request.request_id})
        return self._replay_of(connection, key, request_sha)

    @staticmethod
    def _replay_of(connection: Connection, key: Any, request_sha: str) -> AcceptedJob | None:
        if key is None or key.expires_at.replace(tzinfo=UTC) <= datetime.now(UTC):
            return None
        if key.request_sha256 != request_sha:
            raise Conflict(
                ReasonCode.IDEMPOTENCY_KEY_REUSED, "request_id was used for a different request"
            )
        (row,) = _JOB.rows(connection, {"job": key.job})
        return accepted_from_row(row)

    def _replay_or_check(
        self,
        connection: Connection,
        tenant: str,
        request: pb.SubmitJobRequest,
        request_sha: str,
        rulesets: frozenset[str],
        coming: frozenset[str] = frozenset(),
    ) -> tuple[AcceptedJob | None, bool]:
        """A live key's job, or None once the request has passed every check;
        and whether the request's key was absent altogether (then the writing
        transaction need not look for it again: one made meanwhile is live,
        and taking the key finds it). ``coming``: digests of sources recorded
        with the job (inline)."""
        key = _KEY.first(connection, {"tenant": tenant, "request_id": request.request_id})
        replay = self._replay_of(connection, key, request_sha)
        if replay is None:
            self._check(connection, tenant, request, rulesets, coming)
        return replay, key is None

    def _check(
        self,
        connection: Connection,
        tenant: str,
        request: pb.SubmitJobRequest,
        rulesets: frozenset[str],
        coming: frozenset[str] = frozenset(),
    ) -> None:
        digests = sorted({item.sha256 for item in request.manifest.items if item.sha256} - coming)
        rows = _SOURCES.rows(connection, {"tenant": tenant, "digests": digests}) if digests else []
        systems = (
            read_systems(connection, tenant, referenced_systems(request.manifest))
            if has_references(request.manifest)
            else {}
        )
        violations = check_manifest(
            request.manifest,
            uploaded={**{row.sha256: True for row in rows}, **dict.fromkeys(coming, True)},
            max_items=self._settings.max_manifest_items,
            rulesets=rulesets,
            systems=systems,
        )
        if request.priority not in PRIORITIES:
            violations.append(
                FieldViolation("priority", "must be interactive or batch", "UNKNOWN_PRIORITY")
            )
        budget = self._budgets.violations(_requested_budget(request))
        violations += budget
        if violations:
            # A budget too short is its own reason (the client's to fix by
            # asking for more time); every violation is listed either way.
            short = any(v.reason == "BUDGET_TOO_SHORT" for v in budget)
            raise InvalidInput(
                ReasonCode.BUDGET_TOO_SHORT if short else ReasonCode.INVALID_MANIFEST,
                "the budget is too short" if short else "the manifest is invalid",
                shown_violations(violations, "manifest"),
            )

    async def _shed_for_backlog(self, priority: str) -> None:
        if self._backlog is None:
            return
        age = await self._backlog.oldest_ready_age(priority)
        budget = self._settings.queue_age_budget_seconds
        if age > budget:
            raise Overloaded(
                ReasonCode.QUEUE_BACKLOG,
                "the pipeline is behind; try again later",
                retry_after=self._settings.retry_after_seconds,
                quota=(
                    QuotaViolation(
                        f"queue:validate.{priority}",
                        f"oldest ready job waited {age:.0f}s, over the {budget:.0f}s budget",
                    ),
                ),
            )

    def _over_quota(self, quota: int) -> Overloaded:
        return Overloaded(
            ReasonCode.TENANT_QUOTA_EXCEEDED,
            "too many outstanding jobs; try again when some have finished",
            retry_after=self._settings.retry_after_seconds,
            quota=(QuotaViolation("tenant:outstanding_jobs", f"at most {quota} outstanding jobs"),),
        )

    def _insert(
        self,
        connection: Connection,
        tenant: str,
        request: pb.SubmitJobRequest,
        request_sha: str,
        digest: str,
        priority: str,
        quota: int,
        keyless: bool = False,
    ) -> AcceptedJob:
        """``keyless``: the read before found no key for the request."""
        # Serialize a tenant's submissions (PostgreSQL; SQLite's write lock already does).
        (_tenant,) = _LOCK_TENANT.rows(connection, {"tenant": tenant})
        now = datetime.now(UTC)
        if not keyless:
            replay = self._live_replay(connection, tenant, request, request_sha, now)
            if replay is not None:
                return replay
        outstanding = count_outstanding(connection, tenant)
        if outstanding >= quota:
            # A twin submission may have taken the key meanwhile: its job, not a refusal.
            replay = self._replay(connection, tenant, request, request_sha) if keyless else None
            if replay is not None:
                return replay
            raise _OverQuota(outstanding)
        return self._create(connection, tenant, request, request_sha, digest, priority, now)

    def create_child(
        self, connection: Connection, tenant: str, request: pb.SubmitJobRequest, *, batch: str
    ) -> AcceptedJob:
        """A batch packet's job, in the dispatcher's transaction: the same key,
        row, task and ACCEPTED event as ``SubmitJob`` makes, under the packet's
        deterministic request id (a live key returns its job, never a second).
        The caller has checked the manifest (at SubmitBatch), the quota and the
        queue's age."""
        digest = manifest_digest(request.manifest)
        request_sha = _request_sha256(digest, "batch", request.bundle_id)
        now = datetime.now(UTC)
        replay = self._live_replay(connection, tenant, request, request_sha, now)
        if replay is not None:
            return replay
        return self._create(connection, tenant, request, request_sha, digest, "batch", now, batch)

    def _live_replay(
        self,
        connection: Connection,
        tenant: str,
        request: pb.SubmitJobRequest,
        request_sha: str,
        now: datetime,
    ) -> AcceptedJob | None:
        """Forget the request's key if its window has passed, then the job a
        live key made (or None), in the writing transaction."""
        _EXPIRED_KEY.run(
            connection, {"tenant": tenant, "request_id": request.request_id, "now": now}
        )
        return self._replay(connection, tenant, request, request_sha)

    def _create(
        self,
        connection: Connection,
        tenant: str,
        request: pb.SubmitJobRequest,
        request_sha: str,
        digest: str,
        priority: str,
        now: datetime,
        batch: str = "",
    ) -> AcceptedJob:
        """Claim the key, then write the job's row, task and ACCEPTED event."""
        keys = tables.idempotency_keys
        job = job_name(new_job_id())
        inserted = insert_if_absent(
            connection,
            keys,
            {
                "tenant": tenant,
                "request_id": request.request_id,
                "request_sha256": request_sha,
                "job": job,
                "expires_at": now + timedelta(seconds=self._settings.idempotency_window_seconds),
            },
        )
        if not inserted:  # a concurrent identical submission won the key
            replay = self._replay(connection, tenant, request, request_sha)
            assert replay is not None
            return replay
        task = self._task(connection, tenant, job, request, digest, priority, batch=batch)
        # One track per job for every open rollout; "" when none is open, so
        # jobs accepted with no rollout are as before. A candidate-track job is
        # routed by the queues to each open rollout's candidate (quire.tracks,
        # quire.workqueue.routing).
        open_rollouts = self.rollouts.snapshot(connection)
        task.track = track_for(job, tenant, open_rollouts)
        if task.track == CANDIDATE:
            task.candidate_stages.extend(sorted(r.stage for r in open_rollouts))
            task.candidate_ruleset = candidate_ruleset(task.ruleset, open_rollouts)
        budget = self._budgets.budget(
            _requested_budget(request), references=has_references(request.manifest)
        )
        deadline = None if budget is None else now + budget
        if deadline is not None:
            task.deadline.CopyFrom(timestamp(deadline))
        accepted = self._events.transition(task, "", State.ACCEPTED, attempt=1, lease_token=0)
        _NEW_JOB.run(
            connection,
            {
                "job": job,
                "tenant": tenant,
                "request_id": request.request_id,
                "manifest_digest": digest,
                "item_count": len(task.sources),
                "task": task.SerializeToString(),
                "accepted_event": accepted.SerializeToString(),
                "created_at": now,
                "bundle_id": request.bundle_id or None,
                "batch": batch or None,
                "deadline": deadline,
            },
        )
        return AcceptedJob(
            job,
            digest,
            len(task.sources),
            now,
            dispatched=False,
            handoff=(task.SerializeToString(), accepted.SerializeToString()),
            bundle_id=request.bundle_id,
            batch=batch,
            deadline=deadline,
            track=task.track,
        )

    @staticmethod
    def _task(
        connection: Connection,
        tenant: str,
        job: str,
        request: pb.SubmitJobRequest,
        digest: str,
        priority: str,
        *,
        batch: str = "",
    ) -> queue_pb2.JobTask:
        items = sorted(request.manifest.items, key=lambda i: i.position)
        digests = sorted({item.sha256 for item in items if not item.HasField("source")})
        uploaded = (
            {
                row.sha256: row
                for row in _SOURCES.rows(connection, {"tenant": tenant, "digests": digests})
            }
            if digests
            else {}
        )
        systems = (
            read_systems(connection, tenant, referenced_systems(request.manifest))
            if has_references(request.manifest)
            else {}
        )
        if not batch:
            _refuse_unregistered(request.manifest, systems)
        return queue_pb2.JobTask(
            job=job,
            tenant=tenant,
            manifest_digest=digest,
            ruleset=request.manifest.ruleset,
            render_profile=request.manifest.render_profile or "simple",
            priority=priority,
            sources=[
                _referenced(item, systems.get(item.source.system))
                if item.HasField("source")
                else job_pb2.SourceRef(
                    position=item.position,
                    document_id=item.document_id,
                    sha256=item.sha256,
                    content_type=uploaded[item.sha256].content_type,
                    size_bytes=uploaded[item.sha256].size_bytes,
                    blob_key=uploaded[item.sha256].blob_key,
                )
                for item in items
            ],
        )


def _refuse_unregistered(manifest: job_pb2.Manifest, systems: dict[str, SourceSystem]) -> None:
    """A system deleted between the check and the write: refused as the check would."""
    missing = [
        FieldViolation(
            f"manifest.items[{index}].source.system",
            "no source system of this name is registered for the tenant",
            "UNKNOWN_SOURCE_SYSTEM",
        )
        for index, item in enumerate(manifest.items)
        if item.HasField("source") and item.source.system not in systems
    ]
    if missing:
        raise InvalidInput(
            ReasonCode.INVALID_MANIFEST,
            "the manifest is invalid",
            shown_violations(missing, "manifest"),
        )


def _referenced(item: job_pb2.ManifestItem, system: SourceSystem | None) -> job_pb2.SourceRef:
    """A source named by reference: its system's registration copied in, its
    digest, size and blob key left for the validator to pin. A batch packet's
    system deleted after the batch was checked leaves the fetch without a
    base URL: the fetching stage cannot reach it and ends the job."""
    reference = item.source
    if system is None:
        fetch = job_pb2.SourceFetch(
            system=reference.system, key=reference.key, content_type=reference.content_type
        )
    else:
        fetch = fetch_of(system, reference)
    return job_pb2.SourceRef(
        position=item.position,
        document_id=item.document_id,
        content_type=reference.content_type,
        fetch=fetch,
    )
