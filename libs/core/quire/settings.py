"""Settings: read from the environment once, in each process's ``main``, into
frozen dataclasses that are passed to whatever needs them.

Every variable is ``QUIRE_*``; per-service ones are ``QUIRE_<SERVICE>_*``
(for example ``QUIRE_VALIDATOR_CONCURRENCY``, ``QUIRE_AUDIT_DATABASE_URL``).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from quire.backoff import Backoff, Jitter
from quire.blobbackend import blob_backend
from quire.environment import setting_float, setting_int, setting_text
from quire.errors import InvalidSetting
from quire.identity import IdentitySettings
from quire.kek import KekSettings
from quire.logs import log_format
from quire.pipeline import HISTORY_BEFORE_COMPLETION, SERVICES, STAGES
from quire.tls import TlsSettings

__all__ = [
    "SERVICES",
    "DEFAULT_PORTS",
    "ServiceSettings",
    "QueueSettings",
    "SandboxSettings",
    "AdmissionSettings",
    "TempSpaceSettings",
    "RetentionSettings",
    "ValidationLimits",
    "WatchSettings",
    "NotificationSettings",
    "BatchSettings",
    "DiagnosticsSettings",
    "service_address_var",
    "service_health_var",
    "HEALTH_PORT_OFFSET",
    "METRICS_PORT_OFFSET",
    "service_metrics_var",
    "DEFAULT_STAGE_LIMIT",
    "read_secret_file",
    "BUILD_VERSION",
    "build_version",
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
_BUILD_VERSION = re.compile(r"[A-Za-z0-9._+-]{1,64}")
GIB = 1024 * 1024 * 1024
DEFAULT_STAGE_LIMIT = 64
WORKER_TTL_HEARTBEATS = 3
"""Heartbeats an announcement outlives: one or two may be late without the entry vanishing."""
"""Jobs one stage works on at once across its replicas, unless configured."""


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


_get = setting_text


def _optional_path(env: Mapping[str, str], name: str) -> Path | None:
    value = env.get(name, "")
    return Path(value) if value else None


def build_version(env: Mapping[str, str]) -> str:
    """``QUIRE_BUILD_VERSION``: the deployable version this process runs (an
    image tag, say ``2026.12.1-3``), 1 to 64 of ``A-Z a-z 0-9 . _ + -``; unset,
    :data:`BUILD_VERSION`. It is the ``build_version`` of the actor on every
    ledger entry the process writes, and what it announces (``quire.announcements``)."""
    value = setting_text(env, "QUIRE_BUILD_VERSION", BUILD_VERSION)
    if not _BUILD_VERSION.fullmatch(value):
        raise InvalidSetting("QUIRE_BUILD_VERSION", "1 to 64 of A-Z a-z 0-9 . _ + -")
    return value


def read_secret_file(path: Path, variable: str) -> str:
    """The one line a mounted Secret holds; ``InvalidSetting`` naming the
    variable when it cannot be read or is empty."""
    try:
        value = path.read_text().strip()
    except OSError:
        raise InvalidSetting(variable, "a readable file") from None
    if not value:
        raise InvalidSetting(variable, "a file that is not empty")
    return value


@dataclass(frozen=True)
class QueueSettings:
    """How JetStream leases and retries work items."""

    ack_wait_seconds: float = 30.0
    """Lease length; workers send in_progress() heartbeats at a third of it."""
    max_deliver: int = 5
    """Deliveries before the job ends FAILED (RETRY_LIMIT_REACHED)."""
    backoff_base_seconds: float = 0.5
    backoff_cap_seconds: float = 30.0
    """Redeliveries wait ``quire.backoff.Backoff`` from these (equal jitter)."""
    fetch_timeout_seconds: float = 5.0
    """Long-poll length of one pull request; not a sleep."""
    duplicate_window_seconds: float = 600.0
    """Window in which a republish with the same Nats-Msg-Id is dropped."""
    replicas: int = 1
    """Copies JetStream keeps of every stream, consumer and bucket: 1 on the
    embedded stack, 3 in a cluster (so losing one NATS node stalls nothing)."""
    age_budget_seconds: float = 60.0
    """How long a ready message may wait before admission sheds new work and
    the queue-age alert fires (``QUIRE_QUEUE_AGE_BUDGET_SECONDS``)."""
    worker_heartbeat_seconds: float = 10.0
    """How often each process refreshes its announcement in the workers bucket
    (``QUIRE_WORKER_HEARTBEAT_SECONDS``); the bucket keeps an entry for
    ``WORKER_TTL_HEARTBEATS`` of them, so a dead process's entry expires."""
    announce_after_seconds: float = 1.0
    """How long a stage works on a job before it announces the working state
    (``VALIDATING``, say) on its own; work that ends sooner sends the entry
    event with its outcome, in one message (``QUIRE_ANNOUNCE_AFTER_SECONDS``;
    0 announces at once)."""
    stage_limits: Mapping[str, int] = field(default_factory=dict)
    """Jobs a stage works on at once, across all its replicas, by stage name;
    a stage missing here gets ``DEFAULT_STAGE_LIMIT``. Enforced by JetStream
    (``max_ack_pending`` of the stage's consumers), not by each pod."""

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
    def from_env(cls, env: Mapping[str, str]) -> QueueSettings:
        """``QUIRE_NATS_REPLICAS``; ``QUIRE_<SERVICE>_STAGE_LIMIT`` for the stage
        that service works (``QUIRE_VALIDATOR_STAGE_LIMIT``, say)."""
        limits = {}
        for stage in STAGES:
            name = f"QUIRE_{stage.service.upper()}_STAGE_LIMIT"
            limit = setting_int(env, name, DEFAULT_STAGE_LIMIT)
            if limit < 2:
                raise InvalidSetting(name, "at least 2 (interactive and batch work)")
            limits[stage.name] = limit
        return cls(
            ack_wait_seconds=setting_float(env, "QUIRE_ACK_WAIT_SECONDS", 30),
            max_deliver=setting_int(env, "QUIRE_MAX_DELIVER", 5),
            backoff_base_seconds=setting_float(env, "QUIRE_BACKOFF_BASE_SECONDS", 0.5),
            backoff_cap_seconds=setting_float(env, "QUIRE_BACKOFF_CAP_SECONDS", 30),
            replicas=setting_int(env, "QUIRE_NATS_REPLICAS", 1),
            age_budget_seconds=setting_float(env, "QUIRE_QUEUE_AGE_BUDGET_SECONDS", 60),
            worker_heartbeat_seconds=setting_float(
                env, "QUIRE_WORKER_HEARTBEAT_SECONDS", 10, minimum=0.5
            ),
            announce_after_seconds=setting_float(env, "QUIRE_ANNOUNCE_AFTER_SECONDS", 1.0),
            stage_limits=limits,
        )


@dataclass(frozen=True)
class SandboxSettings:
    """Limits for the worker processes that open untrusted PDFs."""

    workers: int = 2
    memory_bytes: int = 1536 * 1024 * 1024
    """RLIMIT_AS of each worker process."""
    cpu_seconds: int = 20
    """CPU seconds one task may use (RLIMIT_CPU, relative to the worker's usage)."""
    wall_seconds: float = 30.0
    """Wall-clock timeout of one task; the worker is killed when it passes."""
    nice: int = 0
    """Added to the workers' scheduling niceness (a quarantine lane yields the CPU)."""
    reserved_workers: int = 1
    """Workers only interactive work may take: batch work holds at most
    ``workers - reserved_workers`` at once, and always at least one."""
    batch_nice: int = 10
    """Added to ``nice`` for the processes that run batch work, so on a busy
    machine the kernel gives interactive PDF work the CPU first."""
    in_memory_bytes: int = 4 * 1024 * 1024
    """Documents up to this size go to a worker as bytes over its pipe and
    stay in memory (``quire.attemptfiles``); larger ones are files in the
    attempt's private directory. 0: always files."""

    def batch_workers(self) -> int:
        """How many tasks batch work may run at once (``quire.sandboxlanes``)."""
        return max(1, self.workers - self.reserved_workers)

    @classmethod
    def from_env(
        cls, env: Mapping[str, str], service: str, lane: str = "sandbox"
    ) -> SandboxSettings:
        """``QUIRE_<SERVICE>_SANDBOX_*``, or ``QUIRE_<SERVICE>_QUARANTINE_*`` for the
        quarantine lane (one worker at lower CPU priority by default)."""
        prefix = f"QUIRE_{service.upper()}_{lane.upper()}_"
        base = cls(workers=1, nice=19) if lane == "quarantine" else cls()
        return cls(
            workers=setting_int(env, prefix + "WORKERS", base.workers, minimum=1),
            memory_bytes=setting_int(env, prefix + "MEMORY_BYTES", base.memory_bytes),
            cpu_seconds=setting_int(env, prefix + "CPU_SECONDS", base.cpu_seconds),
            wall_seconds=setting_float(env, prefix + "WALL_SECONDS", base.wall_seconds),
            nice=setting_int(env, prefix + "NICE", base.nice),
            reserved_workers=setting_int(
                env, prefix + "RESERVED_WORKERS", base.reserved_workers, minimum=0
            ),
            batch_nice=setting_int(env, prefix + "BATCH_NICE", base.batch_nice, minimum=0),
            in_memory_bytes=setting_int(
                env, prefix + "IN_MEMORY_BYTES", base.in_memory_bytes, minimum=0
            ),
        )


@dataclass(frozen=True)
class ValidationLimits:
    """What the validator refuses regardless of ruleset."""

    max_pages: int = 2000
    max_decompressed_bytes: int = 256 * 1024 * 1024

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ValidationLimits:
        env = os.environ if env is None else env
        return cls(
            max_pages=setting_int(env, "QUIRE_MAX_PAGES", 2000),
            max_decompressed_bytes=setting_int(
                env, "QUIRE_MAX_DECOMPRESSED_BYTES", 256 * 1024 * 1024
            ),
        )


def _nats_login(env: Mapping[str, str], service: str) -> tuple[str, Path | None]:
    """``QUIRE_NATS_USER`` + ``QUIRE_NATS_PASSWORD_FILE`` (a mounted Secret), or the
    service's own user in ``QUIRE_NATS_CREDENTIALS_DIR`` (the embedded stack)."""
    user = env.get("QUIRE_NATS_USER", "")
    password = env.get("QUIRE_NATS_PASSWORD_FILE", "")
    directory = env.get("QUIRE_NATS_CREDENTIALS_DIR", "")
    if not user and directory:
        user, password = service, str(Path(directory) / f"{service}.password")
    return user, Path(password) if password else None


@dataclass(frozen=True)
class ServiceSettings:
    """What every Quire service process needs to start."""

    service: str
    data_dir: Path
    nats_url: str
    grpc_address: str
    """``host:port`` this service binds; loopback by default."""
    health_address: str
    """``host:port`` where ``grpc.health.v1`` alone is served in plaintext (probes)."""
    metrics_address: str
    """``host:port`` where Prometheus scrapes ``/metrics``; empty: not served."""
    database_url: str
    blob_root: Path
    instance: str
    build_version: str
    concurrency: int
    """Jobs this process works on at once."""
    queue: QueueSettings
    peers: Mapping[str, str]
    """``host:port`` of the other services, by name."""
    trace_file: Path | None = None
    """When set, finished spans are appended to this file as JSON lines."""
    drain_seconds: float = 20.0
    """On SIGTERM: time allowed to finish in-flight work before stopping."""
    tls: TlsSettings | None = None
    """Mutual TLS for every gRPC server and client of this process, when set."""
    identity: IdentitySettings | None = None
    """This service's signing key and the public keys it trusts (see ``quire.identity``)."""
    nats_user: str = ""
    """NATS user this service connects as; empty connects without credentials."""
    nats_password_file: Path | None = None
    """File holding that user's password (a mounted Secret, or the stack's credentials)."""
    kek: KekSettings = field(default_factory=KekSettings)
    """Where the key-encryption keys that wrap tenants' data keys come from (``quire.kek``)."""
    blob_backend: str = "local"
    faults_dir: Path | None = None
    """Where the fault tests put their faults (``QUIRE_FAULTS_DIR``); never set in production."""
    log_format: str = "json"
    """``json`` (a JSON object per line) or ``text`` (``QUIRE_LOG_FORMAT``; ``quire.logs``)."""
    """Where blobs live: ``local`` (a directory) or ``nats`` (``QUIRE_BLOB_BACKEND``)."""

    @classmethod
    def from_env(cls, service: str, env: Mapping[str, str] | None = None) -> ServiceSettings:
        env = os.environ if env is None else env
        upper = service.upper()
        data_dir = Path(_get(env, "QUIRE_DATA_DIR", ".quire")).resolve()
        db_default = f"sqlite:///{data_dir / service / (service + '.db')}"
        trace = env.get("QUIRE_TRACE_FILE", "")
        return cls(
            service=service,
            data_dir=data_dir,
            nats_url=_get(env, "QUIRE_NATS_URL", "nats://127.0.0.1:4222"),
            grpc_address=_get(
                env, service_address_var(service), f"127.0.0.1:{DEFAULT_PORTS[service]}"
            ),
            health_address=_get(
                env,
                service_health_var(service),
                f"127.0.0.1:{DEFAULT_PORTS[service] + HEALTH_PORT_OFFSET}",
            ),
            metrics_address=env.get(
                service_metrics_var(service),
                f"127.0.0.1:{DEFAULT_PORTS[service] + METRICS_PORT_OFFSET}",
            ),
            database_url=_get(env, f"QUIRE_{upper}_DATABASE_URL", db_default),
            blob_root=Path(_get(env, "QUIRE_BLOB_ROOT", str(data_dir / "blobs"))),
            instance=_get(env, "QUIRE_INSTANCE", f"{socket.gethostname()}-{os.getpid()}"),
            build_version=build_version(env),
            concurrency=setting_int(env, f"QUIRE_{upper}_CONCURRENCY", 4),
            queue=QueueSettings.from_env(env),
            peers={
                name: _get(env, service_address_var(name), f"127.0.0.1:{port}")
                for name, port in DEFAULT_PORTS.items()
            },
            trace_file=Path(trace) if trace else None,
            drain_seconds=setting_float(env, "QUIRE_DRAIN_SECONDS", 20),
            tls=TlsSettings.from_env(env),
            identity=IdentitySettings.from_env(service, data_dir, env),
            nats_user=_nats_login(env, service)[0],
            nats_password_file=_nats_login(env, service)[1],
            kek=KekSettings.from_env(env),
            blob_backend=blob_backend(env),
            faults_dir=_optional_path(env, "QUIRE_FAULTS_DIR"),
            log_format=log_format(env),
        )

    @property
    def service_dir(self) -> Path:
        """This service's private directory under the data directory."""
        return self.data_dir / self.service


@dataclass(frozen=True)
class AdmissionSettings:
    """The front door's limits. Upload ceiling and outstanding quota are
    defaults that a tenant's own limits override."""

    max_upload_bytes: int = 25 * 1024 * 1024
    allowed_content_types: frozenset[str] = frozenset({"application/pdf", "application/json"})
    max_manifest_items: int = 200
    chunk_bytes: int = 256 * 1024
    """Size of each chunk of a download stream."""
    max_outstanding_jobs: int = 100
    """Non-terminal jobs a tenant may have before new ones are refused."""
    queue_age_budget_seconds: float = 60.0
    """Refuse new work when the oldest ready validate message is older than this."""
    queue_age_cache_seconds: float = 1.0
    """How long a reading of the queue's age is reused."""
    idempotency_window_seconds: float = 24 * 3600.0
    """How long a request_id keeps returning the job it made."""
    retry_after_seconds: float = 5.0
    """The retry hint given when refusing for load."""
    max_tenant_uploads: int = 16
    """Uploads one tenant may have open at once in this process."""
    max_uploads_in_flight: int = 1024
    """Uploads open at once in this process, all tenants together (each may hold a descriptor)."""
    upload_bytes_in_flight: int = 512 * 1024 * 1024
    """Declared bytes of the uploads open in this process, reserved when the header arrives."""
    tenant_upload_share_bytes: int = 128 * 1024 * 1024
    """Declared bytes one tenant's open uploads may reserve; a quarter of the above by default."""
    upload_idle_seconds: float = 30.0
    """An upload that moves fewer than ``upload_min_bytes_per_second`` for this long is closed."""
    upload_min_bytes_per_second: int = 8 * 1024
    """The slowest rate an upload may keep up, measured over windows of ``upload_idle_seconds``."""
    upload_max_seconds: float = 900.0
    """The longest an upload may take from its first message to its last."""
    upload_linger_seconds: float = 5.0
    """How long a refused upload is still read (and discarded) so the caller hears the reason."""
    upload_linger_bytes: int = 64 * 1024 * 1024
    """How many bytes of a refused upload are read and discarded at most."""
    storage_quota_bytes: int = 10 * GIB
    """Bytes of stored uploads one tenant may keep (its own quota overrides it)."""
    inline_source_bytes: int = 4 * 1024 * 1024
    """Bytes of sources a SubmitJob may carry inline, all together; admission
    accepts request messages this much larger than gRPC's default."""
    operator_token_file: Path | None = None
    """A file (a mounted Secret) holding the first operator token, so every
    replica and the operators agree on it. Unset, admission makes one on first
    start and writes it, with a development tenant's, into its own directory."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AdmissionSettings:
        env = os.environ if env is None else env
        in_flight = setting_int(env, "QUIRE_UPLOAD_BYTES_IN_FLIGHT", 512 * 1024 * 1024)
        return cls(
            max_upload_bytes=setting_int(env, "QUIRE_MAX_UPLOAD_BYTES", 25 * 1024 * 1024),
            max_manifest_items=setting_int(env, "QUIRE_MAX_MANIFEST_ITEMS", 200),
            max_outstanding_jobs=setting_int(env, "QUIRE_MAX_OUTSTANDING_JOBS", 100),
            queue_age_budget_seconds=setting_float(env, "QUIRE_QUEUE_AGE_BUDGET_SECONDS", 60),
            queue_age_cache_seconds=setting_float(env, "QUIRE_QUEUE_AGE_CACHE_SECONDS", 1),
            idempotency_window_seconds=setting_float(
                env, "QUIRE_IDEMPOTENCY_WINDOW_SECONDS", 24 * 3600
            ),
            retry_after_seconds=setting_float(env, "QUIRE_RETRY_AFTER_SECONDS", 5),
            max_tenant_uploads=setting_int(env, "QUIRE_MAX_TENANT_UPLOADS", 16),
            max_uploads_in_flight=setting_int(env, "QUIRE_MAX_UPLOADS_IN_FLIGHT", 1024),
            upload_bytes_in_flight=in_flight,
            tenant_upload_share_bytes=setting_int(
                env, "QUIRE_TENANT_UPLOAD_SHARE_BYTES", in_flight // 4
            ),
            upload_idle_seconds=setting_float(env, "QUIRE_UPLOAD_IDLE_SECONDS", 30),
            upload_min_bytes_per_second=setting_int(
                env, "QUIRE_UPLOAD_MIN_BYTES_PER_SECOND", 8 * 1024
            ),
            upload_max_seconds=setting_float(env, "QUIRE_UPLOAD_MAX_SECONDS", 900),
            upload_linger_seconds=setting_float(env, "QUIRE_UPLOAD_LINGER_SECONDS", 5),
            upload_linger_bytes=setting_int(env, "QUIRE_UPLOAD_LINGER_BYTES", 64 * 1024 * 1024),
            storage_quota_bytes=setting_int(env, "QUIRE_STORAGE_QUOTA_BYTES", 10 * GIB),
            inline_source_bytes=setting_int(env, "QUIRE_INLINE_SOURCE_BYTES", 4 * 1024 * 1024),
            operator_token_file=_optional_path(env, "QUIRE_OPERATOR_TOKEN_FILE"),
        )


DAY = 86400.0


@dataclass(frozen=True)
class RetentionSettings:
    """How long stored bytes are kept when a tenant sets no period of its own
    (``quire retention``). Ledger facts are kept whatever these say."""

    sources_seconds: float = 30 * DAY
    """Uploaded sources, from the end of the last job that used them."""
    packets_seconds: float = 7 * DAY
    """Assembled packets, from the end of their job (the signed artifact holds them)."""
    artifacts_seconds: float = 365 * DAY
    """Signed artifacts, from the end of their job."""
    unused_uploads_seconds: float = DAY
    """Uploads no job used, from the upload."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RetentionSettings:
        """``QUIRE_RETENTION_{SOURCES,PACKETS,ARTIFACTS}_DAYS`` and
        ``QUIRE_RETENTION_UNUSED_UPLOAD_HOURS`` (fractions allowed)."""
        env = os.environ if env is None else env
        return cls(
            sources_seconds=setting_float(env, "QUIRE_RETENTION_SOURCES_DAYS", 30) * DAY,
            packets_seconds=setting_float(env, "QUIRE_RETENTION_PACKETS_DAYS", 7) * DAY,
            artifacts_seconds=setting_float(env, "QUIRE_RETENTION_ARTIFACTS_DAYS", 365) * DAY,
            unused_uploads_seconds=setting_float(env, "QUIRE_RETENTION_UNUSED_UPLOAD_HOURS", 24)
            * 3600.0,
        )


@dataclass(frozen=True)
class TempSpaceSettings:
    """Limits and housekeeping of the blob store's temporary space (``.tmp``)."""

    budget_bytes: int = 2 * GIB
    """This service's own temporary bytes above which its queue worker stops pulling."""
    space_limit_bytes: int = 8 * GIB
    """The whole pipeline's temporary space; admission sheds new work near it."""
    shed_fraction: float = 0.9
    """Admission refuses new work at this fraction of ``space_limit_bytes``."""
    free_reserve_bytes: int = GIB
    """Admission refuses new work when the disk holding ``.tmp`` has less free."""
    measure_seconds: float = 1.0
    """How often usage is measured (in the background, never per request or message)."""
    sweep_seconds: float = 60.0
    """How often entries left by dead processes are removed (and once at start)."""
    stale_seconds: float = 3600.0
    """Age after which another host's entry (shared storage) counts as left over."""

    @classmethod
    def from_env(cls, env: Mapping[str, str], service: str) -> TempSpaceSettings:
        return cls(
            budget_bytes=setting_int(env, f"QUIRE_{service.upper()}_TEMP_BUDGET_BYTES", 2 * GIB),
            space_limit_bytes=setting_int(env, "QUIRE_TEMP_SPACE_LIMIT_BYTES", 8 * GIB),
            shed_fraction=setting_float(env, "QUIRE_TEMP_SHED_FRACTION", 0.9),
            free_reserve_bytes=setting_int(env, "QUIRE_TEMP_FREE_RESERVE_BYTES", GIB),
            measure_seconds=setting_float(env, "QUIRE_TEMP_MEASURE_SECONDS", 1),
            sweep_seconds=setting_float(env, "QUIRE_TEMP_SWEEP_SECONDS", 60),
            stale_seconds=setting_float(env, "QUIRE_TEMP_STALE_SECONDS", 3600),
        )


@dataclass(frozen=True)
class DiagnosticsSettings:
    """How long a stage keeps the original text of its errors for operators
    (``quire.diagnosticstore``), and how often it deletes what has expired."""

    retention_days: int = 7
    """Days a diagnostic is kept (and served) after it was recorded: 1 to 365."""
    sweep_seconds: float = 3600.0
    """How often each stage process deletes expired diagnostics (never more
    often than this; expired ones are never served meanwhile)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DiagnosticsSettings:
        """``QUIRE_DIAGNOSTICS_RETENTION_DAYS`` (a whole number from 1 to 365)."""
        env = os.environ if env is None else env
        name = "QUIRE_DIAGNOSTICS_RETENTION_DAYS"
        days = setting_int(env, name, 7)
        if not 1 <= days <= 365:
            raise InvalidSetting(name, "a whole number from 1 to 365")
        return cls(retention_days=days)


STALL_STATES = HISTORY_BEFORE_COMPLETION
"""The states a job waits or works in on its way to COMPLETED: each has a stall budget."""


@dataclass(frozen=True)
class ReconcileSettings:
    """When admission's reconciler re-drives a job that sits still.

    A job that stays in one non-terminal state (``NEEDS_REVIEW`` is parked,
    not stalled) longer than that state's budget is re-driven from the
    stages' committed records: its messages were lost or purged.
    """

    interval_seconds: float = 30.0
    """How often accepted, unfinished jobs are compared with audit's view."""
    stall_seconds: Mapping[str, float] = field(default_factory=dict)
    """Budget per state; a state missing here uses ``default_stall_seconds``."""
    default_stall_seconds: float = 600.0
    """Longer than a stage's ack wait times its deliveries, so a slow worker is not raced."""

    def budget(self, state: str) -> float:
        return self.stall_seconds.get(state, self.default_stall_seconds)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ReconcileSettings:
        """``QUIRE_STALL_SECONDS`` for every state, ``QUIRE_STALL_<STATE>_SECONDS`` for one."""
        env = os.environ if env is None else env
        default = setting_float(env, "QUIRE_STALL_SECONDS", 600)
        return cls(
            interval_seconds=setting_float(env, "QUIRE_RECONCILE_SECONDS", 30),
            stall_seconds={
                state: setting_float(env, f"QUIRE_STALL_{state}_SECONDS", default)
                for state in STALL_STATES
            },
            default_stall_seconds=default,
        )


@dataclass(frozen=True)
class WatchSettings:
    """Open ``WatchJob`` streams: how many one process holds, and how often
    audit looks for entries another replica appended (its own appends wake
    the watches at once)."""

    max_watches: int = 1024
    """Beyond this, per process, WatchJob is refused (RESOURCE_EXHAUSTED, ``WATCHES_EXCEEDED``)."""
    max_tenant_watches: int = 256
    """One tenant's share of them (``TENANT_WATCHES_EXCEEDED``), so that no
    tenant can take every watch from the others."""
    poll_seconds: float = 0.5
    """One query per process per interval, for every open watch together."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WatchSettings:
        """``QUIRE_MAX_WATCHES``, ``QUIRE_MAX_TENANT_WATCHES`` and ``QUIRE_WATCH_POLL_SECONDS``."""
        env = os.environ if env is None else env
        return cls(
            max_watches=setting_int(env, "QUIRE_MAX_WATCHES", 1024),
            max_tenant_watches=setting_int(env, "QUIRE_MAX_TENANT_WATCHES", 256, minimum=1),
            poll_seconds=setting_float(env, "QUIRE_WATCH_POLL_SECONDS", 0.5),
        )


@dataclass(frozen=True)
class BatchSettings:
    """Batches: how big one may be, and how fast admission's dispatcher turns
    their packets into jobs (``quire.admission.batchdispatch``)."""

    max_packets: int = 10_000
    """Packets one SubmitBatch may carry."""
    max_manifest_bytes: int = 16 * 1024 * 1024
    """The largest uploaded batch manifest (JSON) SubmitBatch reads."""
    window: int = 32
    """Batch children in flight (created, not yet known ended), all tenants
    together, while no interactive work is in the pipeline."""
    shared_window: int = 3
    """The window while interactive work waits or runs at some stage (or did
    within ``interactive_hold_seconds``): the capacity batch work leaves to it."""
    interactive_hold_seconds: float = 3.0
    """How long interactive work counts as present after it was last seen."""
    rate: float = 50.0
    """Children created per second at most (a token bucket)."""
    page_size: int = 16
    """Children created in one transaction."""
    tick_seconds: float = 0.2
    """How often the dispatcher looks for work when it has none."""
    lease_seconds: float = 5.0
    """How long the dispatch lease lasts unless renewed; another replica takes it after."""
    finish_poll_seconds: float = 0.5
    """How often the end tracker asks audit which children and notified jobs ended."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> BatchSettings:
        """``QUIRE_BATCH_*``: MAX_PACKETS, MAX_MANIFEST_BYTES, WINDOW, SHARED_WINDOW,
        INTERACTIVE_HOLD_SECONDS, RATE, PAGE_SIZE, TICK_SECONDS, LEASE_SECONDS,
        FINISH_POLL_SECONDS."""
        env = os.environ if env is None else env
        return cls(
            max_packets=setting_int(env, "QUIRE_BATCH_MAX_PACKETS", 10_000, minimum=1),
            max_manifest_bytes=setting_int(
                env, "QUIRE_BATCH_MAX_MANIFEST_BYTES", 16 * 1024 * 1024, minimum=1
            ),
            window=setting_int(env, "QUIRE_BATCH_WINDOW", 32, minimum=1),
            shared_window=setting_int(env, "QUIRE_BATCH_SHARED_WINDOW", 3, minimum=1),
            interactive_hold_seconds=setting_float(
                env, "QUIRE_BATCH_INTERACTIVE_HOLD_SECONDS", 3, minimum=0
            ),
            rate=setting_float(env, "QUIRE_BATCH_RATE", 50, minimum=0.01),
            page_size=setting_int(env, "QUIRE_BATCH_PAGE_SIZE", 16, minimum=1),
            tick_seconds=setting_float(env, "QUIRE_BATCH_TICK_SECONDS", 0.2, minimum=0.01),
            lease_seconds=setting_float(env, "QUIRE_BATCH_LEASE_SECONDS", 5, minimum=0.5),
            finish_poll_seconds=setting_float(
                env, "QUIRE_BATCH_FINISH_POLL_SECONDS", 0.5, minimum=0.05
            ),
        )


@dataclass(frozen=True)
class NotificationSettings:
    """Delivery of completion notifications to tenants' callback URLs
    (admission's notifier; ``quire.notifysign`` says how they are signed)."""

    max_attempts: int = 12
    """Tries per notification before it is abandoned (each is listed to the tenant)."""
    backoff_base_seconds: float = 2.0
    """The first retry waits up to this; each further one up to twice as long (full jitter)."""
    backoff_cap_seconds: float = 600.0
    """The longest wait between two tries."""
    timeout_seconds: float = 10.0
    """One POST, from connecting to the last byte of the reply."""
    concurrency: int = 16
    """POSTs in flight at once in this process."""
    tenant_concurrency: int = 4
    """POSTs in flight at once to one tenant, so one slow receiver cannot take every slot."""
    poll_seconds: float = 1.0
    """How often the outbox is looked at for notifications due."""
    allow_loopback_http: bool = False
    """Accept ``http://`` URLs to a loopback address (the embedded stack sets it: tests,
    a receiver on the same machine). Otherwise only ``https://``."""

    @property
    def backoff(self) -> Backoff:
        """How long the next try waits (full jitter: many receivers' retries spread out)."""
        return Backoff(self.backoff_base_seconds, self.backoff_cap_seconds, Jitter.FULL)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> NotificationSettings:
        """``QUIRE_NOTIFY_*``; ``QUIRE_NOTIFY_LOOPBACK_HTTP=1`` allows http to loopback."""
        env = os.environ if env is None else env
        return cls(
            max_attempts=setting_int(env, "QUIRE_NOTIFY_MAX_ATTEMPTS", 12, minimum=1),
            backoff_base_seconds=setting_float(
                env, "QUIRE_NOTIFY_BACKOFF_BASE_SECONDS", 2, minimum=0
            ),
            backoff_cap_seconds=setting_float(
                env, "QUIRE_NOTIFY_BACKOFF_CAP_SECONDS", 600, minimum=0
            ),
            timeout_seconds=setting_float(env, "QUIRE_NOTIFY_TIMEOUT_SECONDS", 10, minimum=0.1),
            concurrency=setting_int(env, "QUIRE_NOTIFY_CONCURRENCY", 16, minimum=1),
            tenant_concurrency=setting_int(env, "QUIRE_NOTIFY_TENANT_CONCURRENCY", 4, minimum=1),
            poll_seconds=setting_float(env, "QUIRE_NOTIFY_POLL_SECONDS", 1, minimum=0.05),
            allow_loopback_http=env.get("QUIRE_NOTIFY_LOOPBACK_HTTP", "") == "1",
        )
