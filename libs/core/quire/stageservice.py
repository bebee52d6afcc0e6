"""Process wiring shared by the queue-driven stages (validator, assembler, signer)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol, runtime_checkable

import grpc
from pydantic import Field
from sqlalchemy import MetaData, Table

from quire.announcements import Announcer
from quire.audit.v1.audit_service_pb2_grpc import AuditServiceStub
from quire.auditword import AuditWord
from quire.authority import JobAuthority
from quire.blobstore import BlobStore
from quire.database import Database
from quire.diagnosticsservice import SERVICE_NAME as DIAGNOSTICS_SERVICE
from quire.diagnosticsservice import DiagnosticsServicer, with_diagnostics
from quire.diagnosticstore import DiagnosticsStore, DiagnosticTables
from quire.environment import Reads, Settings
from quire.exportrecords import Collections
from quire.exportservice import SERVICE_NAME as EXPORT_SERVICE
from quire.exportservice import ExportServicer, with_export
from quire.groupcommit import GroupCommit, Writes
from quire.jobgate import JobGate
from quire.leases import LeaseStore
from quire.metrics import ServiceMetrics, StageMeter, transaction_counter
from quire.paging import PageTokens
from quire.peers import Peers
from quire.pipeline import TEMP_SPACE_SERVICES, Stage
from quire.queueclock import QueueClock
from quire.rolloutboard import RolloutBoard, StageRollout
from quire.runtime import load_wire, start_runtime
from quire.sandbox import SandboxPool
from quire.schema import upgrade_schema
from quire.servicerun import ServiceRun
from quire.settings import (
    EVERY_SERVICE_READS,
    DiagnosticsSettings,
    SandboxSettings,
    ServiceSettings,
    TempSpaceSettings,
)
from quire.stage import StageRunner, StageWork
from quire.storage import open_blob_store
from quire.tempspace import TempKeeper
from quire.transitions import EventFactory
from quire.workqueue import WORK_STREAM, Publisher, WorkQueueWorker, consumer_name
from quire.workqueue.backlog import QueueGauges
from quire.workqueue.deferral import Deferrals
from quire.workqueue.routing import TrackBinder
from quire.workqueue.topology import candidate_consumer_name

__all__ = [
    "StageConfig",
    "StageService",
    "Registrar",
    "RunsRulesets",
    "FollowsRollout",
    "run_stage_service",
    "batch_slots",
]

Registrar = Callable[[grpc.aio.Server], None]
"""Adds the stage's gRPC servicer to a server."""


@runtime_checkable
class RunsRulesets(Protocol):
    """A stage's work that evaluates rulesets (the validator's): it names them
    in the process's announcement."""

    def ruleset_keys(self) -> list[str]:
        """``name@version`` of every ruleset it can run now."""
        ...


@runtime_checkable
class FollowsRollout(Protocol):
    """A stage's work that acts on its stage's rollout (the validator's runs a
    candidate ruleset only while its rollout is open)."""

    def rollout_changed(self, rollout: StageRollout | None) -> None:
        """The stage's latest rollout, read again (None: there never was one)."""
        ...


def batch_slots(concurrency: int) -> int:
    """Batch work gets half the capacity interactive work has, and at least one slot."""
    return max(1, concurrency // 2)


class StageSettings(Settings):
    """A stage's own settings besides those every service has."""

    authority_patience_seconds: float = Field(default=30.0, ge=0)
    """How long one delivery waits for audit to record a job at this stage
    before it is delivered again (``quire.authority``; the assembler and the
    signer ask)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> StageSettings:
        return cls.read(env)


@dataclass(frozen=True)
class StageConfig:
    """Every setting a stage process reads, read at once in its ``main``."""

    service: ServiceSettings
    sandbox: SandboxSettings
    """The worker processes that do the stage's PDF work."""
    temp_space: TempSpaceSettings
    diagnostics: DiagnosticsSettings = field(default_factory=DiagnosticsSettings)
    """How long failed deliveries' error texts are kept (``quire.diagnosticstore``)."""
    stage: StageSettings = field(default_factory=StageSettings)

    READS: ClassVar[tuple[Reads, ...]] = (
        *EVERY_SERVICE_READS,
        Reads(SandboxSettings, {"LANE": "SANDBOX"}),
        Reads(TempSpaceSettings),
        Reads(DiagnosticsSettings),
        Reads(StageSettings),
    )
    """The settings models every stage reads (its ``quire.settings`` entry point adds its own)."""

    @classmethod
    def from_env(cls, service: str, env: Mapping[str, str]) -> StageConfig:
        return cls(
            service=ServiceSettings.from_env(service, env),
            sandbox=SandboxSettings.from_env(env, service),
            temp_space=TempSpaceSettings.from_env(env, service),
            diagnostics=DiagnosticsSettings.from_env(env),
            stage=StageSettings.from_env(env),
        )


@dataclass(frozen=True)
class StageService:
    """What distinguishes one stage process from another."""

    stage: Stage
    """The pipeline stage this service works (``quire.pipeline``)."""
    metadata: MetaData
    migrations: Path
    """The stage's chain of schema migrations (``quire.migrations``)."""
    leases: Table
    grpc_service_name: str
    records: Collections
    """The records the stage owns, exported to operators (``quire.exportservice``)."""
    more_grpc_services: tuple[str, ...] = ()
    """Other gRPC services the process serves (the signer's witness)."""
    asks_audit: bool = False
    """Whether each task is confirmed with audit before any work (``quire.authority``)."""


async def run_stage_service(
    config: StageConfig,
    spec: StageService,
    *,
    build: Callable[[Database, BlobStore, JobGate, Publisher, Writes], tuple[StageWork, Registrar]],
    sandbox: SandboxPool,
    peers: Peers,
    metrics: ServiceMetrics | None = None,
    queue_clock: QueueClock | None = None,
) -> None:
    """Run one stage process. ``queue_clock``: told when JetStream stored
    each task (``quire.queueclock``), for work that judges a deadline.

    Before taking work it sweeps what dead processes left in the temporary
    space and warms ``sandbox``; while its temporary bytes are over budget it
    takes no new work (in-flight work finishes).
    """
    settings = config.service
    metrics = metrics or ServiceMetrics(settings.service)
    stage_name = spec.stage.name
    sandbox.count_replacements(
        metrics.counter("quire_sandbox_worker_restarts_total").labels(stage=stage_name).inc
    )
    nc, js = await start_runtime(settings)
    wire = load_wire(settings)
    database = Database(
        settings.database_url,
        spec.metadata,
        transactions=transaction_counter(metrics),
    )
    await asyncio.to_thread(upgrade_schema, database, spec.metadata, spec.migrations)
    # Temporary entries are named after this stage, so they count against its
    # budget and a dead process's leftovers are recognised and swept.
    blobs = await asyncio.to_thread(open_blob_store, settings, owner=settings.service)
    keeper = TempKeeper(
        blobs.tmp_dir,
        config.temp_space,
        service=settings.service,
    )
    gate = await JobGate.open(js, wire.signer, wire.verifier)
    # Audit's word that a job reached this stage (``quire.auditword``), heard
    # from before the first pull so that no task waits for one already said.
    word = AuditWord(nc, spec.stage, wire.verifier) if spec.asks_audit else None
    if word is not None:
        await word.start()
        confirmations = metrics.counter("quire_authority_confirmations_total")
    publisher = Publisher(js, signer=wire.signer)
    # One group commit for the stage's per-job writes (leases, outcomes, and
    # whatever its work records on the way), so a busy stage shares commits.
    writes = GroupCommit(database, name="leases")
    work, register = build(database, blobs, gate, publisher, writes)
    # The stage's metadata declares the diagnostics tables (``diagnostic_tables``).
    diagnostics = DiagnosticsStore(
        database,
        DiagnosticTables.of(spec.metadata),
        stage=stage_name,
        instance=settings.instance,
        build_version=settings.build_version,
        settings=config.diagnostics,
    )
    register = with_diagnostics(
        register,
        DiagnosticsServicer(diagnostics, peers.operators(), domain=f"{settings.service}.quire"),
    )
    register = with_export(
        register,
        ExportServicer(
            database,
            spec.records,
            authorize=peers.operators().operator_of,
            pages=PageTokens.for_service(settings.identity),
            domain=f"{settings.service}.quire",
        ),
    )
    meter = StageMeter(
        metrics, stage_name, settings.concurrency + batch_slots(settings.concurrency)
    )
    # Each class's wait for a sandbox worker: what the lanes' priority hand-off changes.
    sandbox.observe_waits(lambda lane, seconds: meter.observe(lane, "sandbox_wait", seconds))
    runner = StageRunner(
        stage=spec.stage,
        work=work,
        leases=LeaseStore(database, spec.leases, writes=writes),
        publisher=publisher,
        events=EventFactory(settings.service, settings.instance, settings.build_version),
        queue=settings.queue,
        gate=gate,
        meter=meter,
        diagnostics=diagnostics,
        deferrals=Deferrals(js),
        authority=(
            JobAuthority(
                AuditServiceStub(peers.channel("audit")),
                spec.stage,
                patience_seconds=config.stage.authority_patience_seconds,
                word=word,
                confirmed=lambda by: confirmations.labels(stage=stage_name, by=by).inc(),
            )
            if word is not None
            else None
        ),
        queue_clock=queue_clock,
    )
    queues = QueueGauges(js, stage_name, metrics, budget_seconds=settings.queue.age_budget_seconds)
    if settings.service in TEMP_SPACE_SERVICES:
        _export_temp_space(metrics, stage_name, keeper)
    interactive = consumer_name(spec.stage.name, "interactive")
    worker = WorkQueueWorker(
        js,
        stream=WORK_STREAM,
        consumers={
            interactive: settings.concurrency,
            consumer_name(spec.stage.name, "batch"): batch_slots(settings.concurrency),
        },
        # A rollout's candidate track takes interactive slots, never more.
        shared={candidate_consumer_name(spec.stage.name): interactive},
        handler=runner.handle,
        ack_wait_seconds=settings.queue.ack_wait_seconds,
        fetch_timeout_seconds=settings.queue.fetch_timeout_seconds,
        pull_gate=keeper.budget,
        verifier=wire.verifier,
    )

    announcer = Announcer.of(
        js, settings, work.ruleset_keys if isinstance(work, RunsRulesets) else None
    )
    binder = TrackBinder(
        await RolloutBoard.open(js, spec.stage.name, wire.verifier),
        worker,
        stage=spec.stage,
        version=settings.build_version,
        on_track=announcer.set_track,
        on_rollout=work.rollout_changed if isinstance(work, FollowsRollout) else None,
    )

    run = ServiceRun(settings, access=peers.guard(), announcer=announcer, metrics=metrics)
    for close in (database.close, blobs.close, sandbox.close, keeper.close, peers.close):
        run.on_close(close)
    run.on_close(nc.close)  # workers are drained; nothing is in flight
    for stop in (queues.stop, diagnostics.stop, binder.stop):
        run.on_close(stop)
    # First of all (newest first): a drain that timed out left it pulling.
    run.on_close(worker.halt)
    run.on_ready(keeper.start)
    run.on_ready(diagnostics.start)  # sweeps expired diagnostics, at most hourly
    run.on_ready(sandbox.warm)
    run.on_ready(binder.refresh)  # bound by the stage's rollout before the first pull
    for start in (worker.start, binder.start, queues.start):
        run.on_ready(start)
    run.on_drain(binder.stop)  # the announcement is withdrawn first: no new work
    run.on_drain(worker.drain)
    await run.serve(
        register=register,
        service_names=(
            spec.grpc_service_name,
            *spec.more_grpc_services,
            DIAGNOSTICS_SERVICE,
            EXPORT_SERVICE,
        ),
    )


def _export_temp_space(metrics: ServiceMetrics, stage: str, keeper: TempKeeper) -> None:
    """Temporary space used and budgeted, read from the keeper's last reading at scrape."""
    used = metrics.gauge("quire_temp_space_used_bytes").labels(stage=stage)
    used.set_function(keeper.budget.used_bytes)
    metrics.gauge("quire_temp_space_budget_bytes").labels(stage=stage).set(
        keeper.budget.budget_bytes
    )
