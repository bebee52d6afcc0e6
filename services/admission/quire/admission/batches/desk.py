"""The batch desk behind SubmitBatch, GetBatch, ListBatchJobs and CancelBatch.

SubmitBatch checks every packet as SubmitJob checks a manifest, then
persists the batch and all its packets in one transaction and answers at
once: no job is made here. The dispatcher (``dispatch``) makes them;
the end tracker (``finishes``) records their ends. Another tenant's batch is
NOT_FOUND, like one that never was.
"""

from __future__ import annotations

import asyncio
import secrets
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, func, select, update

from quire.admission import tables
from quire.admission.batches.finishes import EndTracker, settle_batch
from quire.admission.batches.manifests import bundle_ids, check_packets, packets_from_json
from quire.admission.batches.views import BATCH_PREFIX, batch_message
from quire.admission.jobs.auditjobs import ask_audit
from quire.admission.jobs.intake import shown_violations
from quire.admission.jobs.manifests import referenced_systems
from quire.admission.rulesets.catalog import RulesetCatalog, resolve_ruleset
from quire.admission.rulesets.currents import CurrentRulesets
from quire.admission.settings import AdmissionSettings, BatchSettings
from quire.admission.tenants.directory import Tenant
from quire.admission.tenants.sourcesystems import read_systems
from quire.admission.v1 import batch_pb2
from quire.audit.v1 import audit_service_pb2_grpc
from quire.blobstore import BlobStore
from quire.database import Database
from quire.errors import FieldViolation, InvalidInput, NotFound
from quire.idempotency import RequestOnce, check_request_id
from quire.jobs import state_name, state_value
from quire.paging import PageTokens
from quire.reasons import ReasonCode

__all__ = ["Batches"]

SUBMIT_BATCH = "quire.admission.v1.AdmissionService/SubmitBatch"
CANCEL_BATCH = "quire.admission.v1.AdmissionService/CancelBatch"
LIST_BATCH_JOBS = "quire.admission.v1.AdmissionService/ListBatchJobs"
UNDISPATCHED = "CANCELLED_UNDISPATCHED"
DIGESTS_PER_QUERY = 500


def batch_name(name: str) -> str:
    """``batches/{32 hex}``, or NOT_FOUND."""
    ident = name.removeprefix(BATCH_PREFIX)
    if (
        not name.startswith(BATCH_PREFIX)
        or len(ident) != 32
        or any(c not in "0123456789abcdef" for c in ident)
    ):
        raise NotFound("batch not found")
    return name


def _owned(connection: Connection, tenant: str, name: str, *, lock: bool = False) -> Any:
    table = tables.batches
    query = select(table).where(table.c.batch == name, table.c.tenant == tenant)
    row = connection.execute(query.with_for_update() if lock else query).first()
    if row is None:
        raise NotFound("batch not found")
    return row


def _job_counts(
    connection: Connection, name: str, running: Counter[str], in_flight: int
) -> Counter[str]:
    """Ended jobs by their final state (admission's record), running ones by
    audit's view; a job audit has not recorded yet is ACCEPTED."""
    packets = tables.batch_packets
    counts: Counter[str] = Counter()
    for state, count in connection.execute(
        select(packets.c.final_state, func.count())
        .where(
            packets.c.batch == name,
            packets.c.final_state.is_not(None),
            packets.c.final_state != UNDISPATCHED,
        )
        .group_by(packets.c.final_state)
    ):
        counts[state] += count
    counts.update(running)
    unseen = in_flight - sum(running.values())
    if unseen > 0:
        counts["ACCEPTED"] += unseen
    return counts


def _batch_view(connection: Connection, row: Any, running: dict[str, Any]) -> batch_pb2.Batch:
    """The batch as GetBatch and CancelBatch both show it: ended jobs by
    their recorded final state, running ones by audit's view (``running``,
    from ``EndTracker.refresh_batch``)."""
    states = Counter(state_name(job.state) for job in running.values())
    in_flight = row.dispatched_count - row.terminal_count
    return batch_message(row, _job_counts(connection, row.batch, states, in_flight))


class Batches:
    """Admission's ``BatchDesk``: takes, reads, lists and cancels batches. Makes no
    job itself: the dispatcher does."""

    def __init__(
        self,
        database: Database,
        blobs: BlobStore,
        audit: audit_service_pb2_grpc.AuditServiceStub,
        settings: BatchSettings,
        admission: AdmissionSettings,
        *,
        ends: EndTracker,
        pages: PageTokens,
        currents: CurrentRulesets,
        catalog: RulesetCatalog | None = None,
    ) -> None:
        self._db = database
        self._blobs = blobs
        self._audit = audit
        self._settings = settings
        self._admission = admission
        self._ends = ends
        self._pages = pages
        self._catalog = catalog
        self._currents = currents

    async def submit(
        self, tenant: Tenant, request: batch_pb2.SubmitBatchRequest
    ) -> batch_pb2.Batch:
        check_request_id(request.request_id, required=True)
        await asyncio.to_thread(self._blobs.keys.check_takes_work, tenant.id)
        once = RequestOnce(tables.request_ids, tenant.id, SUBMIT_BATCH, request, batch_pb2.Batch)
        replay = await self._db.read(once.replayed)
        if replay is not None:
            return replay
        packets = await self._packets(tenant, request)
        rulesets = await self._catalog.keys() if self._catalog else frozenset({"default@1"})
        digests = sorted({item.sha256 for p in packets for item in p.manifest.items})
        named = set().union(*(referenced_systems(p.manifest) for p in packets))
        uploaded, systems = await self._db.read(
            lambda s: (_uploaded(s, tenant.id, digests), read_systems(s, tenant.id, named))
        )
        violations = check_packets(
            packets,
            uploaded=uploaded,
            max_items=self._admission.max_manifest_items,
            max_packets=self._settings.max_packets,
            rulesets=rulesets,
            systems=systems,
        )
        if violations:
            raise InvalidInput(
                ReasonCode.INVALID_MANIFEST,
                "the batch is invalid",
                shown_violations(violations, "packets"),
            )
        current = await self._currents.versions(rulesets)
        for packet in packets:  # each job carries name@version from here on
            packet.manifest.ruleset = (
                resolve_ruleset(packet.manifest.ruleset, rulesets, current) or ""
            )
        return await self._db.run(
            lambda s: once.run(s, lambda: _persist(s, tenant.id, request.request_id, packets))
        )

    async def _packets(
        self, tenant: Tenant, request: batch_pb2.SubmitBatchRequest
    ) -> list[batch_pb2.BatchPacket]:
        if request.packets and request.manifest_sha256:
            raise InvalidInput(
                ReasonCode.INVALID_MANIFEST,
                "give packets or manifest_sha256, not both",
                (FieldViolation("manifest_sha256", "not with packets", "BOTH_GIVEN"),),
            )
        if not request.manifest_sha256:
            if len(request.packets) > self._settings.max_packets:  # before copying them
                raise InvalidInput(
                    ReasonCode.INVALID_MANIFEST,
                    "the batch is invalid",
                    (
                        FieldViolation(
                            "packets",
                            f"at most {self._settings.max_packets} packets",
                            "TOO_MANY_PACKETS",
                        ),
                    ),
                )
            return [_copy(packet) for packet in request.packets]
        data = await self._manifest_bytes(tenant, request.manifest_sha256)
        return await asyncio.to_thread(
            packets_from_json, data, max_packets=self._settings.max_packets
        )

    async def _manifest_bytes(self, tenant: Tenant, sha256: str) -> bytes:
        """The uploaded manifest, read whole (it is bounded) with its digest checked."""
        source = tables.sources
        row = await self._db.read(
            lambda s: s.execute(
                select(source).where(source.c.tenant == tenant.id, source.c.sha256 == sha256)
            ).first()
        )

        def refused(description: str, reason: str) -> InvalidInput:
            return InvalidInput(
                ReasonCode.INVALID_MANIFEST,
                "the batch manifest cannot be used",
                (FieldViolation("manifest_sha256", description, reason),),
            )

        if row is None:
            raise refused("no upload with this digest", "UNKNOWN_SOURCE")
        if row.content_type != "application/json":
            raise refused("the upload is not application/json", "NOT_JSON")
        if row.size_bytes > self._settings.max_manifest_bytes:
            raise refused(
                f"at most {self._settings.max_manifest_bytes} bytes", "MANIFEST_TOO_LARGE"
            )
        return await asyncio.to_thread(
            lambda: b"".join(self._blobs.read_verified(row.blob_key, sha256))
        )

    async def get(self, tenant: Tenant, name: str) -> batch_pb2.Batch:
        return await self.get_of(tenant.id, name)

    async def get_of(self, tenant_id: str, name: str) -> batch_pb2.Batch:
        """The tenant's batch ``name`` (GetBatch, and an operator's GetTenantBatch)."""
        name = batch_name(name)
        await self._db.read(lambda s: _owned(s, tenant_id, name))
        running = await self._ends.refresh_batch(name)
        return await self._db.read(lambda s: self._view(s, tenant_id, name, running))

    def _view(
        self, connection: Connection, tenant: str, name: str, running: dict[str, Any]
    ) -> batch_pb2.Batch:
        return _batch_view(connection, _owned(connection, tenant, name), running)

    async def list_jobs(
        self, tenant: Tenant, request: batch_pb2.ListBatchJobsRequest
    ) -> batch_pb2.ListBatchJobsResponse:
        return await self.list_jobs_of(tenant.id, request)

    async def list_jobs_of(
        self, tenant_id: str, request: batch_pb2.ListBatchJobsRequest, *, rpc: str = LIST_BATCH_JOBS
    ) -> batch_pb2.ListBatchJobsResponse:
        """The tenant's batch's packets (ListBatchJobs, and an operator's
        ListTenantBatchJobs: ``rpc``, whose page tokens these are)."""
        name = batch_name(request.parent)
        page = self._pages.page(
            rpc,
            request.page_size,
            request.page_token,
            {"tenant": tenant_id, "parent": name},
        )
        after = int(str(page.after[0])) if page.after else -1
        packets = tables.batch_packets

        def read(connection: Connection) -> list[Any]:
            _owned(connection, tenant_id, name)
            return list(
                connection.execute(
                    select(packets)
                    .where(packets.c.batch == name, packets.c.index > after)
                    .order_by(packets.c.index)
                    .limit(page.fetch)
                )
            )

        rows, token = page.cut(await self._db.read(read), lambda row: (row.index,))
        running = [row.job for row in rows if row.job and row.final_state is None]
        known = await ask_audit(self._audit, running) if running else {}
        return batch_pb2.ListBatchJobsResponse(
            jobs=[_batch_job(row, known) for row in rows], next_page_token=token
        )

    async def cancel(
        self, tenant: Tenant, request: batch_pb2.CancelBatchRequest
    ) -> batch_pb2.CancelBatchResponse:
        name = batch_name(request.name)
        once = RequestOnce(
            tables.request_ids, tenant.id, CANCEL_BATCH, request, batch_pb2.CancelBatchResponse
        )

        async def act() -> batch_pb2.CancelBatchResponse:
            await self._db.read(lambda s: _owned(s, tenant.id, name))
            # Ended children count as ended; the running ones are shown in
            # the states audit gives them, as GetBatch shows them.
            running = await self._ends.refresh_batch(name)
            return await self._db.run(lambda s: self._cancel(s, tenant.id, name, running))

        return await once.around(self._db, act)

    def _cancel(
        self, connection: Connection, tenant: str, name: str, running: dict[str, Any]
    ) -> batch_pb2.CancelBatchResponse:
        """One transaction, the batch row locked: the dispatcher's next page
        re-reads the state and creates nothing once this commits."""
        row = _owned(connection, tenant, name, lock=True)
        now = datetime.now(UTC)
        batches, packets = tables.batches, tables.batch_packets
        if row.state in ("DISPATCHING", "FINISHING"):
            stopped = row.packet_count - row.next_index
            connection.execute(
                update(packets)
                .where(packets.c.batch == name, packets.c.index >= row.next_index)
                .values(final_state=UNDISPATCHED, finished_at=now)
            )
            connection.execute(
                update(batches)
                .where(batches.c.batch == name)
                .values(
                    state="CANCELLED",
                    cancelled_undispatched=stopped,
                    next_index=row.packet_count,
                    cancelled_at=now,
                    updated_at=now,
                )
            )
            settle_batch(connection, name, now)
            row = _owned(connection, tenant, name)
        in_flight = row.dispatched_count - row.terminal_count
        return batch_pb2.CancelBatchResponse(
            batch=_batch_view(connection, row, running),
            not_dispatched_cancelled=row.cancelled_undispatched,
            in_flight_finishing=in_flight,
            already_terminal=row.terminal_count,
        )


def _copy(packet: batch_pb2.BatchPacket) -> batch_pb2.BatchPacket:
    copied = batch_pb2.BatchPacket()
    copied.CopyFrom(packet)
    return copied


def _uploaded(connection: Connection, tenant: str, digests: list[str]) -> dict[str, bool]:
    source = tables.sources
    found: dict[str, bool] = {}
    for start in range(0, len(digests), DIGESTS_PER_QUERY):
        chunk = digests[start : start + DIGESTS_PER_QUERY]
        for row in connection.execute(
            select(source.c.sha256).where(source.c.tenant == tenant, source.c.sha256.in_(chunk))
        ):
            found[row.sha256] = True
    return found


def _persist(
    connection: Connection, tenant: str, request_id: str, packets: list[batch_pb2.BatchPacket]
) -> batch_pb2.Batch:
    """The batch row and every packet row, in the caller's one transaction."""
    now = datetime.now(UTC)
    name = f"{BATCH_PREFIX}{secrets.token_hex(16)}"
    connection.execute(
        tables.batches.insert(),
        {
            "batch": name,
            "tenant": tenant,
            "request_id": request_id,
            "packet_count": len(packets),
            "state": "DISPATCHING",
            "next_index": 0,
            "dispatched_count": 0,
            "cancelled_undispatched": 0,
            "terminal_count": 0,
            "created_at": now,
            "updated_at": now,
        },
    )
    connection.execute(
        tables.batch_packets.insert(),
        [
            {
                "batch": name,
                "index": index,
                "bundle_id": bundle,
                "manifest": packet.manifest.SerializeToString(deterministic=True),
            }
            for index, (packet, bundle) in enumerate(zip(packets, bundle_ids(packets), strict=True))
        ],
    )
    row = connection.execute(select(tables.batches).where(tables.batches.c.batch == name)).one()
    return batch_message(row)


def _batch_job(row: Any, known: dict[str, Any]) -> batch_pb2.BatchJob:
    job = batch_pb2.BatchJob(index=row.index, bundle_id=row.bundle_id, job=row.job or "")
    if row.final_state == UNDISPATCHED:
        job.cancelled_undispatched = True
    elif row.final_state is not None:
        job.state = state_value(row.final_state)  # type: ignore[assignment]
        job.reason_code = row.reason_code or ""
    elif row.job:
        view = known.get(row.job)
        job.state = view.state if view is not None else state_value("ACCEPTED")  # type: ignore[assignment]
        job.reason_code = view.reason_code if view is not None else ""
    return job
