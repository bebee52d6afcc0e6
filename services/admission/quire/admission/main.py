"""Admission process: ``python -m quire.admission.main``."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Awaitable, Callable

import grpc

from quire.admission import records as admission_records
from quire.admission import tables
from quire.admission.admin import TenantAdminServicer
from quire.admission.batches.desk import Batches
from quire.admission.batches.dispatch import BatchDispatcher
from quire.admission.batches.dispatchlease import DispatchLease
from quire.admission.batches.everyone import TenantBatches
from quire.admission.batches.finishes import EndTracker
from quire.admission.config import AdmissionConfig
from quire.admission.jobs.cancellation import Canceller
from quire.admission.jobs.dispatch import Dispatcher
from quire.admission.jobs.evidence import EvidenceDesk
from quire.admission.jobs.intake import Intake
from quire.admission.jobs.outstanding import OutstandingJobs
from quire.admission.jobs.queues import QueueReadings
from quire.admission.jobs.reconciler import Reconciler
from quire.admission.jobs.views import JobViews
from quire.admission.notifications.desk import Notifications
from quire.admission.notifications.notifier import Notifier
from quire.admission.notifications.secrets import NotificationSecrets
from quire.admission.rollouts.rulesets import RolloutRulesets
from quire.admission.rollouts.sync import RolloutSync
from quire.admission.rulesets.catalog import RulesetCatalog
from quire.admission.rulesets.ledger import RulesetLedger
from quire.admission.servicer import AdmissionServicer
from quire.admission.tenants.directory import TenantDirectory
from quire.admission.tenants.storageusage import UsageRecount
from quire.admission.uploads.gate import UploadGate
from quire.admission.uploads.limits import UploadLedger
from quire.admission.uploads.tempguard import TempSpaceGuard
from quire.admission.v1 import admission_service_pb2_grpc as pb_grpc
from quire.admission.v1 import tenant_admin_service_pb2_grpc as admin_grpc
from quire.admission.watches.relay import WatchRelay
from quire.announcements import Announcer
from quire.audit.v1 import audit_service_pb2_grpc
from quire.database import Database
from quire.exportservice import SERVICE_NAME as EXPORT_SERVICE
from quire.exportservice import ExportServicer, with_export
from quire.jobgate import JobGate
from quire.metrics import ServiceMetrics, transaction_counter
from quire.paging import PageTokens
from quire.peers import Peers
from quire.pipeline import STAGE_NAMES
from quire.rolloutboard import RolloutBoardWriter
from quire.runtime import load_wire, run_service, start_runtime
from quire.schema import upgrade_schema
from quire.servicerun import ServiceRun
from quire.storage import open_blob_store
from quire.tempspace import TempKeeper
from quire.transitions import EventFactory
from quire.validator.v1 import validator_service_pb2_grpc
from quire.workqueue import Publisher
from quire.workqueue.backlog import QueueAgeProbe
from quire.workqueue.interactive import InteractivePresence

SERVICE = "admission"


async def main() -> None:
    config = AdmissionConfig.from_env()  # every setting, read and checked before anything starts
    settings, admission, temp_space = config.service, config.admission, config.temp_space
    metrics = ServiceMetrics(SERVICE)
    nc, js = await start_runtime(settings)
    database = Database(
        settings.database_url,
        tables.metadata,
        transactions=transaction_counter(metrics),
    )
    await asyncio.to_thread(upgrade_schema, database, tables.metadata, tables.MIGRATIONS)
    tenants = TenantDirectory(database)
    tenants.ensure_bootstrap(settings.service_dir, config.operator_token)
    blobs = await asyncio.to_thread(open_blob_store, settings, owner=SERVICE)
    keeper = TempKeeper(blobs.tmp_dir, temp_space, service=SERVICE)
    temp_guard = TempSpaceGuard(
        keeper.monitor, temp_space, retry_after_seconds=admission.retry_after_seconds
    )
    wire = load_wire(settings)
    publisher = Publisher(js, signer=wire.signer)
    events = EventFactory(SERVICE, settings.instance, settings.build_version)
    dispatcher = Dispatcher(database, publisher, idempotency=True)
    peers = Peers.load(settings)
    audit = audit_service_pb2_grpc.AuditServiceStub(peers.channel("audit"))
    validator_channel = peers.channel("validator")
    outstanding = OutstandingJobs(database, audit)
    pages = PageTokens.for_service(settings.identity)
    validator = validator_service_pb2_grpc.ValidatorServiceStub(validator_channel)
    views = JobViews(database, audit, outstanding, pages=pages, validator=validator)
    watches = WatchRelay(audit, outstanding, config.watch)
    catalog = RulesetCatalog(validator)
    intake = Intake(
        database,
        events,
        admission,
        backlog=QueueAgeProbe(js, cache_seconds=admission.queue_age_cache_seconds),
        outstanding=outstanding,
        catalog=catalog,
        temp_space=temp_guard,
        metrics=metrics,
        budgets=config.budgets,
        keys=blobs.keys,
    )
    ruleset_ledger = RulesetLedger(database, audit, catalog=catalog, currents=intake.currents)
    notify_secrets = NotificationSecrets(blobs.keys)
    notifier = Notifier(
        database, notify_secrets, config.notifications, egress=config.egress, metrics=metrics
    )
    ends = EndTracker(database, audit, poll_seconds=config.batch.finish_poll_seconds)
    batch_dispatcher = BatchDispatcher(
        database,
        intake,
        dispatcher,
        config.batch,
        admission,
        lease=DispatchLease(
            f"{settings.instance}:{secrets.token_hex(8)}", config.batch.lease_seconds
        ),
        backlog=QueueAgeProbe(js, cache_seconds=admission.queue_age_cache_seconds),
        outstanding=outstanding,
        interactive=InteractivePresence(
            js, STAGE_NAMES, hold_seconds=config.batch.interactive_hold_seconds
        ),
        metrics=metrics,
    )
    batches = Batches(
        database,
        blobs,
        audit,
        config.batch,
        admission,
        ends=ends,
        pages=pages,
        currents=intake.currents,
        catalog=catalog,
    )
    servicer = AdmissionServicer(
        database=database,
        blobs=blobs,
        tenants=tenants,
        uploads=UploadGate(
            database,
            blobs,
            admission,
            ledger=UploadLedger(admission),
            temp_space=temp_guard,
            metrics=metrics,
        ),
        intake=intake,
        dispatcher=dispatcher,
        views=views,
        canceller=Canceller(
            database=database,
            views=views,
            gate=await JobGate.open(js, wire.signer, wire.verifier),
            publisher=publisher,
            events=events,
            outstanding=outstanding,
        ),
        settings=admission,
        watches=watches,
        batches=batches,
        notifications=Notifications(
            database, notify_secrets, config.notifications, egress=config.egress
        ),
        evidence=EvidenceDesk(audit),
    )
    reconciler = Reconciler(
        database=database,
        publisher=publisher,
        audit=audit,
        outstanding=outstanding,
        settings=config.reconcile,
        queues={stage: QueueAgeProbe(js, cache_seconds=1.0, stage=stage) for stage in STAGE_NAMES},
    )
    rollout_sync = RolloutSync(
        js, await RolloutBoardWriter.open(js, wire.signer), tenants.transaction, settings.queue
    )
    run = ServiceRun(
        settings, access=peers.guard(), announcer=Announcer.of(js, settings), metrics=metrics
    )
    for close in (database.close, nc.close, peers.close, blobs.close, keeper.stop):
        run.on_close(close)  # nc: workers are drained; nothing is in flight
    for forever in (
        dispatcher.sweep_forever,
        reconciler.run_forever,
        notifier.run_forever,
        ends.run_forever,
        outstanding.flush_forever,
        batch_dispatcher.run_forever,
        rollout_sync.run_forever,
        ruleset_ledger.run_forever,
        UsageRecount(database).run_forever,
    ):
        run.loop(forever)
    run.on_drain(watches.close)
    run.on_drain(_releasing(batch_dispatcher))

    def register(server: grpc.aio.Server) -> None:
        pb_grpc.add_AdmissionServiceServicer_to_server(servicer, server)
        admin_grpc.add_TenantAdminServiceServicer_to_server(
            TenantAdminServicer(
                tenants,
                pages=pages,
                open_rollouts=intake.rollouts,
                rollout_sync=rollout_sync,
                rollout_rulesets=RolloutRulesets(
                    catalog, intake.currents, ruleset_ledger, build_version=settings.build_version
                ),
                egress=config.egress,
                batches=TenantBatches(database, batches, pages=pages),
                queues=QueueReadings.of(js, cache_seconds=admission.queue_age_cache_seconds),
            ),
            server,
        )

    await keeper.start()  # a first reading before the first request; leftovers swept
    await run.serve(
        register=with_export(
            register,
            ExportServicer(
                database,
                admission_records.collections(),
                authorize=tenants.authenticate_operator,
                pages=pages,
                domain=f"{SERVICE}.quire",
            ),
        ),
        service_names=(
            "quire.admission.v1.AdmissionService",
            "quire.admission.v1.TenantAdminService",
            EXPORT_SERVICE,
        ),
        # Inline sources ride in SubmitJob, with room for the rest of the request.
        max_receive_bytes=admission.inline_source_bytes + 1024 * 1024,
    )


def _releasing(batch_dispatcher: BatchDispatcher) -> Callable[[], Awaitable[None]]:
    """The dispatcher's lease given up on the way out; another replica takes it
    at expiry anyway, so a failure here is not one."""

    async def release() -> None:
        with contextlib.suppress(Exception):
            await batch_dispatcher.release()

    return release


def run() -> None:
    """The ``quire-admission`` command."""
    run_service(SERVICE, main)


if __name__ == "__main__":
    run()
