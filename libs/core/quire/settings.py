"""The settings several services share, read from the environment once, in
each process's ``main``, into frozen models that are passed to whatever
needs them (``quire.environment`` says how a model names its variables).
A setting only one service reads lives in that service (``settings.py`` or
``config.py`` beside its ``main``).

Every variable is ``QUIRE_*``; per-service ones are ``QUIRE_<SERVICE>_*``
(for example ``QUIRE_VALIDATOR_CONCURRENCY``, ``QUIRE_AUDIT_DATABASE_URL``).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, model_validator
from pydantic_settings import SettingsConfigDict

from quire.backoff import Backoff, Jitter
from quire.environment import Expect, Given, Keyed, Reads, Settings, Variable
from quire.identity import IdentitySettings
from quire.kek import KekSettings
from quire.logs import LogFormat
from quire.pipeline import HISTORY_BEFORE_COMPLETION, SERVICES, STAGES
from quire.tls import TlsSettings

__all__ = [
    "SERVICES",
    "DEFAULT_PORTS",
    "ServiceSettings",
    "QueueSettings",
    "SandboxSettings",
    "TempSpaceSettings",
    "RetentionSettings",
    "ReconcileSettings",
    "WatchSettings",
    "DiagnosticsSettings",
    "EventLoopSettings",
    "EVERY_SERVICE_READS",
    "service_address_var",
    "service_health_var",
    "HEALTH_PORT_OFFSET",
    "METRICS_PORT_OFFSET",
    "service_metrics_var",
    "DEFAULT_STAGE_LIMIT",
    "BUILD_VERSION",
]

DEFAULT_PORTS = {
    "admission": 7700,
    "validator": 7701,
    "assembler": 7702,
    "signer": 7703,
    "audit": 7704,
}
HEALTH_PORT_OFFSET = 100
"""A service's own health port is its gRPC port plus this, unless set."""
METRICS_PORT_OFFSET = 200
"""A service's ``/metrics`` port is its gRPC port plus this, unless set."""
BUILD_VERSION = "0.1.0"
"""The deployable version when ``QUIRE_BUILD_VERSION`` is unset: the distribution's."""
GIB = 1024 * 1024 * 1024
DEFAULT_STAGE_LIMIT = 64
"""Jobs one stage works on at once across its replicas, unless configured."""
WORKER_TTL_HEARTBEATS = 3
"""Heartbeats an announcement outlives: one or two may be late without the entry vanishing."""
DAY = 86400.0


def _loopback(service: str, offset: int = 0) -> str:
    return f"127.0.0.1:{DEFAULT_PORTS.get(service, 0) + offset}"


def _peers() -> dict[str, str]:
    return {name: _loopback(name) for name in DEFAULT_PORTS}


def _password(directory: Path | None, user: str) -> Path | None:
    return directory / f"{user}.password" if directory and user else None


def service_address_var(service: str) -> str:
    """The variable holding ``host:port`` of ``service``'s gRPC endpoint."""
    return f"QUIRE_{service.upper()}_ADDR"


def service_health_var(service: str) -> str:
    """The variable holding ``host:port`` of ``service``'s plaintext health endpoint."""
    return f"QUIRE_{service.upper()}_HEALTH_ADDR"


def service_metrics_var(service: str) -> str:
    """The variable holding ``host:port`` of ``service``'s Prometheus ``/metrics``
    endpoint; an empty value turns it off."""
    return f"QUIRE_{service.upper()}_METRICS_ADDR"


class QueueSettings(Settings):
    """How JetStream leases and retries work items."""

    ack_wait_seconds: float = 30.0
    """Lease length; workers send in_progress() heartbeats at a third of it."""
    max_deliver: int = 5
    """Deliveries before the job ends FAILED (RETRY_LIMIT_REACHED)."""
    backoff_base_seconds: float = 0.5
    """The first redelivery's wait (``quire.backoff.Backoff``, equal jitter)."""
    backoff_cap_seconds: float = 30.0
    """The longest wait between two deliveries."""
    fetch_timeout_seconds: Annotated[float, Given()] = 5.0
    """Long-poll length of one pull request; not a sleep."""
    duplicate_window_seconds: Annotated[float, Given()] = 600.0
    """Window in which a republish with the same Nats-Msg-Id is dropped."""
    replicas: Annotated[int, Variable("QUIRE_NATS_REPLICAS")] = 1
    """Copies JetStream keeps of every stream, consumer and bucket: 1 on the
    embedded stack, 3 in a cluster (so losing one NATS node stalls nothing)."""
    age_budget_seconds: Annotated[float, Variable("QUIRE_QUEUE_AGE_BUDGET_SECONDS")] = 60.0
    """How long a ready message may wait before admission sheds new work and
    the queue-age alert fires."""
    worker_heartbeat_seconds: float = Field(default=10.0, ge=0.5)
    """How often each process refreshes its announcement in the workers bucket
    (``quire workers``); the bucket keeps an entry for three of them, so a
    dead process's entry expires."""
    announce_after_seconds: float = 1.0
    """How long a stage works on a job before it announces the working state
    (``VALIDATING``, say) on its own; work that ends sooner sends the entry
    event with its outcome, in one message (0 announces at once)."""
    events_with_commit: bool = True
    """The signer's events ride on its task to audit's commit stage (one
    message, not two); audit records them as it completes the job. Turn it
    off while audit replicas of a release before this setting still run:
    they would not read them, and jobs would stay at ``SIGNING``."""
    stage_limits: Annotated[
        Mapping[str, Annotated[int, Field(ge=2)]],
        Keyed(
            "QUIRE_{SERVICE}_STAGE_LIMIT", {s.name: s.service.upper() for s in STAGES}, "SERVICE"
        ),
        Expect("at least 2 (interactive and batch work), a whole number"),
    ] = Field(default_factory=dict)
    """Jobs a stage works on at once, across all its replicas (64 unless set):
    enforced by JetStream (``max_ack_pending`` of the stage's consumers, two
    thirds interactive, a third batch), not by each pod."""

    def stage_limit(self, stage: str) -> int:
        return self.stage_limits.get(stage, DEFAULT_STAGE_LIMIT)

    @property
    def backoff(self) -> Backoff:
        """How long a retried delivery waits (equal jitter: never much sooner than asked)."""
        return Backoff(self.backoff_base_seconds, self.backoff_cap_seconds, Jitter.EQUAL)

    @property
    def worker_ttl_seconds(self) -> float:
        """How long an announcement outlives its last heartbeat."""
        return self.worker_heartbeat_seconds * WORKER_TTL_HEARTBEATS

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> QueueSettings:
        return cls.read(env)


class SandboxSettings(Settings):
    """Limits for the worker processes that open untrusted PDFs: the shared
    pool (``QUIRE_<SERVICE>_SANDBOX_*``) and the validator's quarantine lane
    (``QUIRE_VALIDATOR_QUARANTINE_*``: one worker at nice 19 unless set)."""

    model_config = SettingsConfigDict(env_prefix="QUIRE_{SERVICE}_{LANE}_")

    workers: int = Field(default=2, ge=1)
    """Worker processes."""
    memory_bytes: int = 1536 * 1024 * 1024
    """RLIMIT_AS of each worker process."""
    cpu_seconds: int = 20
    """CPU seconds one task may use (RLIMIT_CPU, relative to the worker's usage)."""
    wall_seconds: float = 30.0
    """Wall-clock timeout of one task; the worker is killed when it passes."""
    nice: int = 0
    """Added to the workers' scheduling niceness (a quarantine lane yields the CPU)."""
    reserved_workers: int = Field(default=1, ge=0)
    """Workers only interactive work may take: batch work holds at most
    ``workers - reserved_workers`` at once, and always at least one."""
    batch_nice: int = Field(default=10, ge=0)
    """Added to ``nice`` for the processes that run batch work, so on a busy
    machine the kernel gives interactive PDF work the CPU first."""
    in_memory_bytes: int = Field(default=4 * 1024 * 1024, ge=0)
    """Documents up to this size go to a worker as bytes over its pipe and
    stay in memory (``quire.attemptfiles``); larger ones are files in the
    attempt's private directory. 0: always files."""

    QUARANTINE: ClassVar[Mapping[str, int]] = {"workers": 1, "nice": 19}
    """The quarantine lane's own defaults: one worker, at the lowest CPU priority."""

    def batch_workers(self) -> int:
        """How many tasks batch work may run at once (``quire.sandboxlanes``)."""
        return max(1, self.workers - self.reserved_workers)

    @classmethod
    def from_env(
        cls, env: Mapping[str, str], service: str, lane: str = "sandbox"
    ) -> SandboxSettings:
        """``QUIRE_<SERVICE>_SANDBOX_*``, or ``QUIRE_<SERVICE>_QUARANTINE_*`` for the
        quarantine lane."""
        given = cls.QUARANTINE if lane == "quarantine" else {}
        return cls.read(env, {"SERVICE": service.upper(), "LANE": lane.upper()}, **given)


class ServiceSettings(Settings):
    """What every Quire service process needs to start."""

    service: Annotated[str, Given()]
    """The service this process runs."""
    data_dir: Annotated[Path, AfterValidator(Path.resolve)] = Path(".quire")
    """Databases, blobs, keys and logs (made absolute)."""
    nats_url: str = "nats://127.0.0.1:4222"
    """The NATS server (``quire up`` starts one, unless this is set); several
    servers of a cluster comma-separated."""
    grpc_address: Annotated[str, Variable("QUIRE_{SERVICE}_ADDR")] = Field(
        default_factory=lambda data: _loopback(data["service"])
    )
    """``host:port`` this service binds: loopback and the service's own port
    (admission 7700 to audit 7704) unless set."""
    health_address: Annotated[str, Variable("QUIRE_{SERVICE}_HEALTH_ADDR")] = Field(
        default_factory=lambda data: _loopback(data["service"], HEALTH_PORT_OFFSET)
    )
    """``host:port`` where ``grpc.health.v1`` alone is served in plaintext
    (probes): the gRPC port + 100 unless set."""
    metrics_address: Annotated[
        str, Variable("QUIRE_{SERVICE}_METRICS_ADDR", empty_is_a_value=True)
    ] = Field(default_factory=lambda data: _loopback(data["service"], METRICS_PORT_OFFSET))
    """``host:port`` where Prometheus scrapes ``/metrics``: the gRPC port + 200
    unless set; set empty, not served."""
    database_url: Annotated[str, Variable("QUIRE_{SERVICE}_DATABASE_URL")] = Field(
        default_factory=lambda data: (
            f"sqlite:///{data['data_dir'] / data['service']}/{data['service']}.db"
        )
    )
    """SQLAlchemy URL of the service's database: SQLite (WAL) under the data
    directory unless set (``postgresql://...``)."""
    blob_root: Path = Field(default_factory=lambda data: data["data_dir"] / "blobs")
    """Where local blobs live: ``<data dir>/blobs`` unless set."""
    instance: str = Field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    """This process's name in announcements and leases: host and pid unless set."""
    build_version: Annotated[
        str,
        Field(pattern=r"^[A-Za-z0-9._+-]{1,64}$"),
        Expect("1 to 64 of A-Z a-z 0-9 . _ + -"),
    ] = BUILD_VERSION
    """The deployable version this process runs (an image tag, say
    ``2026.12.1-3``): the ``build_version`` of the actor on every ledger
    entry the process writes, and what it announces (``quire.announcements``)."""
    concurrency: Annotated[int, Variable("QUIRE_{SERVICE}_CONCURRENCY")] = 4
    """Interactive jobs this process works on at once (batch work gets half)."""
    queue: QueueSettings = QueueSettings()
    peers: Annotated[
        Mapping[str, str],
        Keyed("QUIRE_{SERVICE}_ADDR", {name: name.upper() for name in DEFAULT_PORTS}, "SERVICE"),
        AfterValidator(lambda given: _peers() | given),
    ] = Field(default_factory=lambda: _peers())
    """``host:port`` of the other services, by name."""
    trace_file: Path | None = None
    """When set, finished spans are appended to this file as JSON lines (a
    test aid; OTLP is the way out)."""
    drain_seconds: float = 20.0
    """On SIGTERM: time allowed to finish in-flight work before stopping."""
    tls: TlsSettings | None = None
    """Mutual TLS for every gRPC server and client of this process, when set."""
    identity: IdentitySettings | None = None
    """This service's signing key and the public keys it trusts (see ``quire.identity``)."""
    nats_credentials_dir: Path | None = None
    """A directory of ``<user>.password`` files, one per NATS user (the
    embedded stack's ``<data dir>/credentials/nats``)."""
    nats_user: str = Field(
        default_factory=lambda data: data["service"] if data["nats_credentials_dir"] else ""
    )
    """NATS user this service connects as: the service's own when
    ``QUIRE_NATS_CREDENTIALS_DIR`` is set, else none (no credentials)."""
    nats_password_file: Path | None = Field(
        default_factory=lambda data: _password(data["nats_credentials_dir"], data["nats_user"])
    )
    """File holding that user's password (a mounted Secret): the user's in
    ``QUIRE_NATS_CREDENTIALS_DIR`` unless set."""
    kek: KekSettings = KekSettings()
    """Where the key-encryption keys that wrap tenants' data keys come from (``quire.kek``)."""
    blob_backend: Literal["local", "nats"] = "local"
    """Where blobs live: ``local`` (a directory) or ``nats`` (a replicated
    JetStream object store, for clusters with no shared disk)."""
    faults_dir: Path | None = None
    """Where the fault tests put their faults; never set in production."""
    log_format: LogFormat = "json"
    """``json`` (a JSON object per line) or ``text`` (for people)."""

    @classmethod
    def from_env(cls, service: str, env: Mapping[str, str] | None = None) -> ServiceSettings:
        settings = cls.read(
            env,
            {"SERVICE": service.upper()},
            service=service,
            queue=QueueSettings.from_env(env),
            tls=TlsSettings.from_env(env),
            kek=KekSettings.from_env(env),
        )
        identity = IdentitySettings.from_env(service, settings.data_dir, env)
        return settings.model_copy(update={"identity": identity})

    @property
    def service_dir(self) -> Path:
        """This service's private directory under the data directory."""
        return self.data_dir / self.service


class EventLoopSettings(Settings):
    """The asyncio loop a service's ``main`` runs on (``quire.runtime``)."""

    event_loop: Literal["uvloop", "asyncio"] = "uvloop"
    """``uvloop`` (libuv's loop: the same asyncio API, a fifth or so less CPU
    per job on the pipeline bench), or ``asyncio``, the standard library's."""


EVERY_SERVICE_READS = (Reads(ServiceSettings), Reads(EventLoopSettings))
"""What every service process reads; its ``quire.settings`` entry point adds its own."""


class RetentionSettings(Settings):
    """How long stored bytes are kept when a tenant sets no period of its own
    (``quire retention``). Ledger facts are kept whatever these say."""

    model_config = SettingsConfigDict(env_prefix="QUIRE_RETENTION_")

    sources_days: float = 30
    """Uploaded sources, from the end of the last job that used them."""
    packets_days: float = 7
    """Assembled packets, from the end of their job (the signed artifact holds them)."""
    artifacts_days: float = 365
    """Signed artifacts, from the end of their job."""
    unused_upload_hours: float = 24
    """Uploads no job used, from the upload."""

    @property
    def sources_seconds(self) -> float:
        return self.sources_days * DAY

    @property
    def packets_seconds(self) -> float:
        return self.packets_days * DAY

    @property
    def artifacts_seconds(self) -> float:
        return self.artifacts_days * DAY

    @property
    def unused_uploads_seconds(self) -> float:
        return self.unused_upload_hours * 3600.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RetentionSettings:
        return cls.read(env)


class TempSpaceSettings(Settings):
    """Limits and housekeeping of the blob store's temporary space (``.tmp``)."""

    model_config = SettingsConfigDict(env_prefix="QUIRE_TEMP_")

    budget_bytes: Annotated[int, Variable("QUIRE_{SERVICE}_TEMP_BUDGET_BYTES")] = 2 * GIB
    """This service's own temporary bytes above which its queue worker stops pulling."""
    space_limit_bytes: int = 8 * GIB
    """The whole pipeline's temporary space; admission sheds new work near it."""
    shed_fraction: float = 0.9
    """Admission refuses new work at this fraction of ``space_limit_bytes``."""
    free_reserve_bytes: int = GIB
    """Admission refuses new work when the disk holding ``.tmp`` has less free."""
    pause_free_bytes: int = Field(default=64 * 1024 * 1024, ge=0)
    """A stage takes no new work (nor a retry) while the disk holding
    ``.tmp`` has less free: a full disk pauses it instead of using up jobs'
    deliveries. Below admission's ``free_reserve_bytes``, so work already
    accepted can finish."""
    measure_seconds: float = 1.0
    """How often usage is measured (in the background, never per request or message)."""
    sweep_seconds: float = 60.0
    """How often entries left by dead processes are removed (and once at start)."""
    stale_seconds: float = 3600.0
    """Age after which another host's entry (shared storage) counts as left over."""

    @classmethod
    def from_env(cls, env: Mapping[str, str], service: str) -> TempSpaceSettings:
        return cls.read(env, {"SERVICE": service.upper()})


class DiagnosticsSettings(Settings):
    """How long a stage keeps the original text of its errors for operators
    (``quire.diagnosticstore``), and how often it deletes what has expired."""

    model_config = SettingsConfigDict(env_prefix="QUIRE_DIAGNOSTICS_")

    retention_days: int = Field(default=7, ge=1, le=365)
    """Days a diagnostic is kept (and served) after it was recorded: 1 to 365."""
    sweep_seconds: ClassVar[float] = 3600.0
    """How often each stage process deletes expired diagnostics (never more
    often than this; expired ones are never served meanwhile)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DiagnosticsSettings:
        return cls.read(env)


STALL_STATES = HISTORY_BEFORE_COMPLETION
"""The states a job waits or works in on its way to COMPLETED: each has a stall budget."""


class ReconcileSettings(Settings):
    """When admission's reconciler re-drives a job that sits still.

    A job that stays in one non-terminal state (``NEEDS_REVIEW`` is parked,
    not stalled) longer than that state's budget is re-driven from the
    stages' committed records: its messages were lost or purged.
    """

    interval_seconds: Annotated[float, Variable("QUIRE_RECONCILE_SECONDS")] = 30.0
    """How often accepted, unfinished jobs are compared with audit's view."""
    stall_seconds: Annotated[
        Mapping[str, float],
        Keyed(
            "QUIRE_STALL_{STATE}_SECONDS",
            {str(state): str(state) for state in STALL_STATES},
            "STATE",
        ),
    ] = Field(default_factory=dict)
    """One state's stall budget; a state not set uses ``QUIRE_STALL_SECONDS``."""
    default_stall_seconds: Annotated[float, Variable("QUIRE_STALL_SECONDS")] = 600.0
    """How long a job may sit in one state: longer than a stage's ack wait
    times its deliveries, so a slow worker is not raced."""

    @model_validator(mode="before")
    @classmethod
    def _every_state(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Every stall state's budget, the default where none is set."""
        default = values.get("default_stall_seconds")
        if default is None:
            default = cls.model_fields["default_stall_seconds"].default
        budgets = dict.fromkeys((str(state) for state in STALL_STATES), default)
        return {**values, "stall_seconds": {**budgets, **values.get("stall_seconds", {})}}

    def budget(self, state: str) -> float:
        return self.stall_seconds.get(state, self.default_stall_seconds)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ReconcileSettings:
        return cls.read(env)


class WatchSettings(Settings):
    """Open ``WatchJob`` streams: how many one process holds, and how often
    audit looks for entries another replica appended (its own appends wake
    the watches at once)."""

    max_watches: int = 1024
    """Beyond this, per process, WatchJob is refused (RESOURCE_EXHAUSTED, ``WATCHES_EXCEEDED``)."""
    max_tenant_watches: int = Field(default=256, ge=1)
    """One tenant's share of them (``TENANT_WATCHES_EXCEEDED``), so that no
    tenant can take every watch from the others."""
    poll_seconds: Annotated[float, Variable("QUIRE_WATCH_POLL_SECONDS")] = 0.5
    """One query per process per interval, for every open watch together."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WatchSettings:
        return cls.read(env)
