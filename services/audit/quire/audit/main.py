"""Audit process: ``python -m quire.audit.main``.

Two consumers: the events stream into the ledger, and the commit work queue
into completions. Concurrency is the setting for both.
"""

from __future__ import annotations

import asyncio
import hashlib

import grpc

from quire.announcements import Announcer
from quire.audit import records as audit_records
from quire.audit import tables
from quire.audit.checkpoints import CheckpointBook, CheckpointSigner
from quire.audit.completion import CompletionDesk
from quire.audit.config import AuditConfig
from quire.audit.deadletterbook import DeadLetterBook
from quire.audit.deadletterdesk import DeadLetterDesk
from quire.audit.deadletters import DeadLetterOffice
from quire.audit.measures import AuditMeasures
from quire.audit.recorder import EVENTS_IN_FLIGHT, EventRecorder
from quire.audit.replicanews import ReplicaNews
from quire.audit.retrydrive import RetryRedriver
from quire.audit.servicer import AuditServicer
from quire.audit.v1 import audit_service_pb2_grpc as pb_grpc
from quire.audit.watch import JobWatches, LedgerNotices
from quire.audit.witnessing import Witnessing
from quire.audit.writes import AuditWrites
from quire.auditword import WordTeller
from quire.database import Database
from quire.exportservice import SERVICE_NAME as EXPORT_SERVICE
from quire.exportservice import ExportServicer, with_export
from quire.jobgate import JobGate
from quire.metrics import ServiceMetrics, transaction_counter
from quire.paging import PageTokens
from quire.peers import Peers
from quire.pipeline import STAGES
from quire.runtime import load_wire, run_service, start_runtime
from quire.schema import upgrade_schema
from quire.servicerun import ServiceRun
from quire.stageservice import batch_slots
from quire.storage import open_blob_store
from quire.transitions import EventFactory
from quire.witness.v1 import witness_service_pb2_grpc as witness_grpc
from quire.workqueue import EVENTS_STREAM, WORK_STREAM, Publisher, WorkQueueWorker, consumer_name
from quire.workqueue.topology import (
    CHECKPOINT_SUBJECT,
    DEAD_BOOK_CONSUMER,
    DEAD_CONSUMER,
    DEAD_STREAM,
    EVENTS_CONSUMER,
)
from quire.workqueue.worker import Handler

SERVICE = "audit"
COMMIT = STAGES[-1].name
"""Audit works the pipeline's last stage: it alone completes a job."""


async def main() -> None:
    config = AuditConfig.from_env()  # every setting, read and checked before anything starts
    settings, audit = config.service, config.audit
    checkpoint_signer = CheckpointSigner(settings.service_dir / "keys", audit.checkpoint_key_file)
    nc, js = await start_runtime(settings)
    wire = load_wire(settings)
    publisher = Publisher(js, signer=wire.signer)
    metrics = ServiceMetrics(SERVICE)
    database = Database(
        settings.database_url,
        tables.metadata,
        transactions=transaction_counter(metrics),
    )
    await asyncio.to_thread(upgrade_schema, database, tables.metadata, tables.MIGRATIONS)
    watches = JobWatches(database, config.watch)
    history = LedgerNotices(watches)
    # Other replicas' appends wake this one's watches and completions at once.
    news = ReplicaNews(nc, settings.instance, history.heard)
    await news.start()
    history.tell = news.grew
    blobs = await asyncio.to_thread(open_blob_store, settings, owner=SERVICE)
    measures = AuditMeasures(metrics)
    writes = AuditWrites(database)
    recorder = EventRecorder(
        writes,
        history,
        settings.queue.backoff,
        measures,
        unexplained_seconds=audit.unexplained_seconds,
        word=WordTeller(nc, wire.signer),
    )
    desk = CompletionDesk(
        database=database,
        writes=writes,
        blobs=blobs,
        events=EventFactory(SERVICE, settings.instance, settings.build_version),
        queue=settings.queue,
        history=history,
        measures=measures,
        recorder=recorder,
    )
    gate = await JobGate.open(js, wire.signer, wire.verifier)
    office = DeadLetterOffice(
        js,
        gate,
        EventFactory("dead-letter", settings.instance, settings.build_version),
        publisher=publisher,
        verifier=wire.verifier,
        backoff=settings.queue.backoff,
    )
    dead_letters = DeadLetterDesk(
        database,
        publisher,
        gate,
        settings.build_version,
        max_budget_seconds=audit.max_retry_budget_seconds,
    )
    peers = Peers.load(settings)
    operators = peers.operators()

    def consume(stream: str, consumers: dict[str, int], handler: Handler) -> WorkQueueWorker:
        """One of audit's consumers, on the queue settings they all share."""
        return WorkQueueWorker(
            js,
            stream=stream,
            consumers=consumers,
            handler=handler,
            ack_wait_seconds=settings.queue.ack_wait_seconds,
            fetch_timeout_seconds=settings.queue.fetch_timeout_seconds,
            verifier=wire.verifier,
        )

    workers = [
        consume(
            DEAD_STREAM,
            {DEAD_BOOK_CONSUMER: 1},
            DeadLetterBook(database, settings.queue.backoff).handle,
        ),
        consume(DEAD_STREAM, {DEAD_CONSUMER: 1}, office.handle),
        consume(
            EVENTS_STREAM,
            {EVENTS_CONSUMER: max(settings.concurrency, EVENTS_IN_FLIGHT)},
            recorder.handle,
        ),
        consume(
            WORK_STREAM,
            {
                consumer_name(COMMIT, "interactive"): settings.concurrency,
                consumer_name(COMMIT, "batch"): batch_slots(settings.concurrency),
            },
            desk.handle,
        ),
    ]

    checkpoints = CheckpointBook(
        database,
        checkpoint_signer,
        settings.service_dir / "checkpoints",
        refused=measures.checkpoint_refused,
        witnessing=Witnessing(
            witness_grpc.WitnessServiceStub(peers.channel("signer")),
            database,
            checkpoint_signer.public_raw,
            refused=measures.checkpoint_refused,
        ),
    )

    async def publish_checkpoint(document: bytes) -> None:
        digest = hashlib.sha256(document).hexdigest()
        await publisher.publish_bytes(CHECKPOINT_SUBJECT, document, f"checkpoint.{digest}")

    run = ServiceRun(
        settings, access=peers.guard(), announcer=Announcer.of(js, settings), metrics=metrics
    )
    for close in (database.close, blobs.close, peers.close):
        run.on_close(close)
    run.on_close(nc.close)  # workers are drained; nothing is in flight
    for worker in workers:
        run.on_ready(worker.start)
    retries = RetryRedriver(database=database, publisher=publisher, settings=config.reconcile)
    run.loop(lambda: checkpoints.every(audit.checkpoint_seconds, publish_checkpoint))
    run.loop(retries.run_forever)
    run.loop(lambda: measures.count_dead_letters_forever(database))
    run.on_drain(news.close)
    run.on_drain(watches.close)
    run.on_drain(lambda: asyncio.gather(*(worker.drain() for worker in workers)))
    run.on_drain(lambda: checkpoints.take(publish_checkpoint))

    pages = PageTokens.for_service(settings.identity)

    def register(server: grpc.aio.Server) -> None:
        pb_grpc.add_AuditServiceServicer_to_server(
            AuditServicer(
                database,
                checkpoints,
                dead_letters=dead_letters,
                operators=operators,
                watches=watches,
                pages=pages,
            ),
            server,
        )

    await run.serve(
        register=with_export(
            register,
            ExportServicer(
                database,
                audit_records.collections(
                    settings.service_dir / "checkpoints", checkpoint_signer.public_pem
                ),
                authorize=operators.operator_of,
                pages=pages,
                domain=f"{SERVICE}.quire",
            ),
        ),
        service_names=("quire.audit.v1.AuditService", EXPORT_SERVICE),
    )


def run() -> None:
    """The ``quire-audit`` command."""
    run_service(SERVICE, main)


if __name__ == "__main__":
    run()
