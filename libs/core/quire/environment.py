"""The ``QUIRE_*`` variables a process is started with: typed reads that name
the variable when its value is unusable, and a report of the variables that
no Quire process reads (a misspelt name would otherwise be silently ignored
and its default used).

Settings classes read through ``setting_int``, ``setting_float`` and
``setting_text``; each service's command reports unknown variables once at
start (``quire.runtime.run_service``). ``KNOWN`` lists every variable a Quire
process reads; a test checks it against the sources, so it cannot fall behind.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from quire.errors import InvalidSetting
from quire.pipeline import HISTORY_BEFORE_COMPLETION, SERVICES, STAGES

__all__ = [
    "KNOWN",
    "setting_int",
    "setting_float",
    "setting_text",
    "unknown_settings",
]

_GLOBAL = (
    "ACK_WAIT_SECONDS",
    "ANNOUNCE_AFTER_SECONDS",
    "BACKOFF_BASE_SECONDS",
    "BACKOFF_CAP_SECONDS",
    "BATCH_FINISH_POLL_SECONDS",
    "BATCH_INTERACTIVE_HOLD_SECONDS",
    "BATCH_LEASE_SECONDS",
    "BATCH_MAX_MANIFEST_BYTES",
    "BATCH_MAX_PACKETS",
    "BATCH_PAGE_SIZE",
    "BATCH_RATE",
    "BATCH_SHARED_WINDOW",
    "BATCH_TICK_SECONDS",
    "BATCH_WINDOW",
    "BLOB_BACKEND",
    "BLOB_ROOT",
    "BUILD_VERSION",
    "CORPUS",
    "DATA_DIR",
    "DIAGNOSTICS_RETENTION_DAYS",
    "DRAIN_SECONDS",
    "EVENT_LOOP",
    "FAULTS",
    "FAULTS_DIR",
    "IDEMPOTENCY_WINDOW_SECONDS",
    "IDENTITY_DIR",
    "IDENTITY_TRUST_DIR",
    "INLINE_SOURCE_BYTES",
    "INSTANCE",
    "KEK_DEVELOPMENT",
    "KEK_FILE",
    "KEK_PKCS11_LABELS",
    "KEK_PKCS11_MODULE",
    "KEK_PKCS11_PIN_FILE",
    "KEK_PKCS11_TOKEN",
    "JOB_BUDGET_RESERVE_SECONDS",
    "LOG_FORMAT",
    "MAX_DECOMPRESSED_BYTES",
    "MAX_DELIVER",
    "MAX_JOB_BUDGET_SECONDS",
    "MAX_MANIFEST_ITEMS",
    "MAX_OUTSTANDING_JOBS",
    "MAX_PAGES",
    "MAX_TENANT_UPLOADS",
    "MAX_UPLOADS_IN_FLIGHT",
    "MAX_UPLOAD_BYTES",
    "MAX_WATCHES",
    "MAX_TENANT_WATCHES",
    "EGRESS_ALLOW",
    "NATS_CREDENTIALS_DIR",
    "NATS_PASSWORD_FILE",
    "NATS_REPLICAS",
    "NATS_URL",
    "NATS_USER",
    "NOTIFY_BACKOFF_BASE_SECONDS",
    "NOTIFY_BACKOFF_CAP_SECONDS",
    "NOTIFY_CONCURRENCY",
    "NOTIFY_LOOPBACK_HTTP",
    "NOTIFY_MAX_ATTEMPTS",
    "NOTIFY_POLL_SECONDS",
    "NOTIFY_TENANT_CONCURRENCY",
    "NOTIFY_TIMEOUT_SECONDS",
    "OPERATOR_TOKEN",
    "OPERATOR_TOKEN_FILE",
    "PORT_RANGE",
    "QUEUE_AGE_BUDGET_SECONDS",
    "QUEUE_AGE_CACHE_SECONDS",
    "RECONCILE_SECONDS",
    "RETENTION_ARTIFACTS_DAYS",
    "RETENTION_PACKETS_DAYS",
    "RETENTION_SOURCES_DAYS",
    "RETENTION_UNUSED_UPLOAD_HOURS",
    "RETRY_AFTER_SECONDS",
    "RULESETS_DIR",
    "SOURCE_BREAKER_FAILURES",
    "SOURCE_CREDENTIALS_DIR",
    "SOURCE_BREAKER_OPEN_SECONDS",
    "SOURCE_JOB_BUDGET_SECONDS",
    "STALL_SECONDS",
    "STORAGE_QUOTA_BYTES",
    "TEMP_FREE_RESERVE_BYTES",
    "TEMP_MEASURE_SECONDS",
    "TEMP_SHED_FRACTION",
    "TEMP_SPACE_LIMIT_BYTES",
    "TEMP_STALE_SECONDS",
    "TEMP_SWEEP_SECONDS",
    "TENANT_UPLOAD_SHARE_BYTES",
    "TLS_CA_FILE",
    "TLS_CERT_FILE",
    "TLS_KEY_FILE",
    "TOKEN",
    "TRACE_FILE",
    "UPLOAD_BYTES_IN_FLIGHT",
    "UPLOAD_IDLE_SECONDS",
    "UPLOAD_LINGER_BYTES",
    "UPLOAD_LINGER_SECONDS",
    "UPLOAD_MAX_SECONDS",
    "UPLOAD_MIN_BYTES_PER_SECOND",
    "WATCH_POLL_SECONDS",
    "WORKER_HEARTBEAT_SECONDS",
)
_PER_SERVICE = (
    "ADDR",
    "HEALTH_ADDR",
    "METRICS_ADDR",
    "CONCURRENCY",
    "DATABASE_URL",
    "IDENTITY_KEY_FILE",
    "STAGE_LIMIT",
    "TEMP_BUDGET_BYTES",
    *(
        f"{lane}_{limit}"
        for lane in ("SANDBOX", "QUARANTINE")
        for limit in (
            "WORKERS",
            "MEMORY_BYTES",
            "CPU_SECONDS",
            "WALL_SECONDS",
            "NICE",
            "RESERVED_WORKERS",
            "BATCH_NICE",
            "IN_MEMORY_BYTES",
        )
    ),
)
_SERVICE_OWN = (
    "AUDIT_CHECKPOINT_KEY_FILE",
    "AUTHORITY_PATIENCE_SECONDS",
    "AUDIT_CHECKPOINT_SECONDS",
    "AUDIT_UNEXPLAINED_SECONDS",
    "CONSOLE_KEY_FILE",
    "CONSOLE_SESSION_SECONDS",
    "CONSOLE_TRACE_URL",
    "GATEWAY_ADDR",
    "GATEWAY_HEADER_SECONDS",
    "GATEWAY_IDLE_SECONDS",
    "GATEWAY_METRICS_ADDR",
    "SIGNER_CERT_FILE",
    "SIGNER_KEY_FILE",
    "SIGNER_PKCS11_KEY_LABEL",
    "SIGNER_PKCS11_MODULE",
    "SIGNER_PKCS11_PIN",
    "SIGNER_PKCS11_TOKEN",
    "SIGNER_TSA_URL",
    "VALIDATOR_BUDGET_BASE_SECONDS",
    "VALIDATOR_BUDGET_SECONDS_PER_MIB",
    "VALIDATOR_BUDGET_SECONDS_PER_PAGE",
    "VALIDATOR_QUARANTINE_BUDGET_SCALE",
    "VALIDATOR_BUDGET_WALL_FACTOR",
    "VALIDATOR_QUARANTINE_FLOOR_SECONDS",
    "VALIDATOR_QUARANTINE_SLOTS",
    "VALIDATOR_QUARANTINE_WAIT_SECONDS",
    "WITNESS_KEY_FILE",
    "WITNESS_LOG_KEY_SHA256",
    "WITNESS_NAME",
)

KNOWN: frozenset[str] = frozenset(
    {f"QUIRE_{name}" for name in _GLOBAL}
    | {f"QUIRE_{service.upper()}_{name}" for service in SERVICES for name in _PER_SERVICE}
    | {f"QUIRE_{name}" for name in _SERVICE_OWN}
    | {f"QUIRE_STALL_{state}_SECONDS" for state in HISTORY_BEFORE_COMPLETION}
    | {f"QUIRE_{stage.service.upper()}_STAGE_LIMIT" for stage in STAGES}
)
"""Every ``QUIRE_*`` variable some Quire process reads."""


CREDENTIAL_PREFIX = "QUIRE_SOURCE_CREDENTIAL_"
"""Variables holding source systems' credentials (``env:`` references): not
settings, and never reported by name as unknown."""


def unknown_settings(env: Mapping[str, str]) -> list[str]:
    """A line for each ``QUIRE_*`` variable in ``env`` that no Quire process
    reads, with the nearest known name when there is one. Names only: a
    value may be a secret."""
    lines = []
    for name in sorted(env):
        if not name.startswith("QUIRE_") or name in KNOWN:
            continue
        if name.startswith(CREDENTIAL_PREFIX):
            continue  # a source system's credential, named by its registration
        near = difflib.get_close_matches(name, KNOWN, n=1, cutoff=0.8)
        hint = f"; did you mean {near[0]}?" if near else ""
        lines.append(f"{name} is not a Quire setting and is ignored{hint}")
    return lines


def setting_text(env: Mapping[str, str], name: str, default: str) -> str:
    """The variable's value, or ``default`` when it is unset or empty."""
    value = env.get(name, "")
    return value if value else default


def setting_int(
    env: Mapping[str, str], name: str, default: int, *, minimum: int | None = None
) -> int:
    raw = env.get(name, "")
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidSetting(name, _expected("a whole number", minimum)) from None
    if minimum is not None and value < minimum:
        raise InvalidSetting(name, _expected("a whole number", minimum))
    return value


def setting_float(
    env: Mapping[str, str], name: str, default: float, *, minimum: float | None = None
) -> float:
    raw = env.get(name, "")
    if not raw:
        return float(default)
    try:
        value = float(raw)
    except ValueError:
        raise InvalidSetting(name, _expected("a number", minimum)) from None
    if value != value or (minimum is not None and value < minimum):  # NaN is never usable
        raise InvalidSetting(name, _expected("a number", minimum))
    return value


def _expected(kind: str, minimum: float | None) -> str:
    return kind if minimum is None else f"{kind} of at least {minimum:g}"
