"""Validator process: ``python -m quire.validator.main``."""

from __future__ import annotations

import grpc

from quire.blobstore import BlobStore
from quire.database import Database
from quire.groupcommit import Writes
from quire.jobgate import JobGate
from quire.metrics import ServiceMetrics
from quire.paging import PageTokens
from quire.peers import Peers
from quire.pipeline import stage
from quire.queueclock import QueueClock
from quire.runtime import run_service
from quire.sandbox import SandboxPool
from quire.stageservice import Registrar, StageService, run_stage_service
from quire.validator import records as validator_records
from quire.validator import tables
from quire.validator.config import ValidatorConfig
from quire.validator.evaluation import Evaluator
from quire.validator.pdfchecks import PdfLimits
from quire.validator.reviewinspector import ReviewInspector
from quire.validator.reviews import ReviewDesk
from quire.validator.rulesets import RulesetBook, load_directory
from quire.validator.servicer import ValidatorServicer
from quire.validator.sources.breakers import SourceBreakers
from quire.validator.sources.fetcher import SourceFetcher, source_client
from quire.validator.sources.meter import SourceMeter
from quire.validator.sources.pinning import SourcePinner
from quire.validator.sources.pins import PinStore
from quire.validator.sources.waits import SourceWaits
from quire.validator.v1 import validator_service_pb2_grpc as pb_grpc
from quire.validator.work import ValidatorWork
from quire.workqueue import Publisher

SERVICE = "validator"
PDF_INSPECTION_MODULES = (
    "magic",
    "pikepdf",
    "pypdf",
    "quire.validator.inspection",
    "quire.validator.judging",
)
"""What every inspection worker runs: loaded once by the forkserver."""


async def main() -> None:
    config = ValidatorConfig.from_env()
    # Read before anything connects: a file that is no ruleset refuses the start.
    rulesets = load_directory(config.rulesets_dir)
    settings = config.stage.service
    peers = Peers.load(settings)
    pool = SandboxPool(
        config.stage.sandbox,
        name="pdf-inspection",
        preload=PDF_INSPECTION_MODULES,
    )
    # Sources that exhaust the shared pool are retried here, with their own
    # worker(s) and limits, so ordinary documents never wait behind them.
    quarantine = SandboxPool(
        config.quarantine,
        name="pdf-quarantine",
        preload=PDF_INSPECTION_MODULES,
    )
    budgets, limits = config.budgets, config.limits
    metrics = ServiceMetrics(settings.service)
    # One HTTP client for every source system, all deliveries together.
    client = source_client(config.sources, config.egress)
    meter = SourceMeter(metrics)
    breakers = SourceBreakers(
        failures=config.sources.breaker_failures,
        open_seconds=config.sources.breaker_open_seconds,
        on_state=meter.breaker,
    )

    queue_clock = QueueClock()

    def build(
        database: Database,
        blobs: BlobStore,
        gate: JobGate,
        publisher: Publisher,
        _writes: Writes,
    ) -> tuple[ValidatorWork, Registrar]:
        book = RulesetBook(database)
        book.install(rulesets)  # a published version changed: refused, exit status 2
        evaluator = Evaluator(
            blobs=blobs,
            sandbox=pool,
            limits=PdfLimits(
                max_pages=limits.max_pages, max_decompressed_bytes=limits.max_decompressed_bytes
            ),
            quarantine=quarantine,
            budgets=budgets,
        )
        waits = SourceWaits(database)
        servicer = ValidatorServicer(
            database,
            book=book,
            reviews=ReviewDesk(database, publisher, gate, build_version=settings.build_version),
            evaluator=evaluator,
            operators=peers.operators(),
            pages=PageTokens.for_service(settings.identity),
            waits=waits,
            inspector=ReviewInspector(blobs=blobs, sandbox=pool, book=book, budgets=budgets),
        )

        def register(server: grpc.aio.Server) -> None:
            pb_grpc.add_ValidatorServiceServicer_to_server(servicer, server)

        sources = SourcePinner(
            fetcher=SourceFetcher(client, blobs),
            pins=PinStore(database),
            blobs=blobs,
            breakers=breakers,
            settings=config.sources,
            max_deliver=settings.queue.max_deliver,
            meter=meter,
            waits=waits,
            # A deadline is admission's; it is judged on JetStream's clock,
            # never on this host's alone (quire.queueclock).
            clock=queue_clock.now,
        )
        return ValidatorWork(evaluator=evaluator, book=book, sources=sources), register

    try:
        await run_stage_service(
            config.stage,
            StageService(
                stage=stage("validate"),
                metadata=tables.metadata,
                migrations=tables.MIGRATIONS,
                leases=tables.leases,
                grpc_service_name="quire.validator.v1.ValidatorService",
                records=validator_records.collections(),
            ),
            build=build,
            sandbox=pool,
            peers=peers,
            metrics=metrics,
            queue_clock=queue_clock,
        )
    finally:
        await client.aclose()
        quarantine.close()


def run() -> None:
    """The ``quire-validator`` command."""
    run_service(SERVICE, main)


if __name__ == "__main__":
    run()
