"""A tenant's source systems: where the pipeline fetches the sources that a
manifest names by reference (``ManifestItem.source``).

Operators register them (``TenantAdminService.PutSourceSystem``); a job
copies its systems' registrations into its task when it is accepted
(``SourceRef.fetch``), so changing or deleting a system later never changes a
job already accepted. ``credential_ref`` says where the fetching service
finds the credential ("env:NAME" or "file:/path"); it is never the
credential itself. Neither it nor the base URL's path is ever logged: logs
name the tenant and the system only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

from google.protobuf import duration_pb2
from sqlalchemy import Connection, bindparam, delete, select, update

from quire.admission import tables
from quire.admission.jobs.budgets import duration_seconds
from quire.admission.v1 import tenant_admin_service_pb2 as pb
from quire.database import insert_if_absent
from quire.egress import EgressPolicy
from quire.errors import FieldViolation, InvalidInput, NotFound
from quire.jobs import timestamp
from quire.reasons import ReasonCode
from quire.type import job_pb2

__all__ = [
    "SourceSystem",
    "SYSTEM_ID",
    "checked_system",
    "delete_system",
    "fetch_of",
    "list_systems",
    "parse_name",
    "put_system",
    "read_systems",
    "system_message",
    "system_name",
]

# Matched whole (``fullmatch``): ``$`` alone would let a trailing newline through.
SYSTEM_ID = re.compile(r"[a-z][a-z0-9-]{0,62}")
ENV_NAME = re.compile(r"QUIRE_SOURCE_CREDENTIAL_[A-Z0-9_]+")
"""The validator reads only these variables for a credential (never another
setting or secret the process has): ``quire.validator.sources.credentials``."""
SCHEMA = re.compile(r"[a-z][a-z0-9-]*@[0-9]+")
MAX_BASE_URL = 2048
MAX_CREDENTIAL_REF = 1024
MAX_SCHEMA = 128
DEFAULT_TIMEOUT_MS = 5_000
MAX_TIMEOUT_MS = 60_000
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
MAX_MAX_BYTES = 256 * 1024 * 1024
FIELD = "source_system"


@dataclass(frozen=True)
class SourceSystem:
    """One registration, as stored (defaults applied)."""

    tenant: str
    system: str
    base_url: str
    credential_ref: str
    timeout_ms: int
    max_bytes: int
    schema: str
    updated_at: datetime | None = None

    @classmethod
    def from_row(cls, row: object) -> SourceSystem:
        return cls(
            tenant=row.tenant,  # type: ignore[attr-defined]
            system=row.system,  # type: ignore[attr-defined]
            base_url=row.base_url,  # type: ignore[attr-defined]
            credential_ref=row.credential_ref,  # type: ignore[attr-defined]
            timeout_ms=row.timeout_ms,  # type: ignore[attr-defined]
            max_bytes=row.max_bytes,  # type: ignore[attr-defined]
            schema=row.schema,  # type: ignore[attr-defined]
            updated_at=row.updated_at,  # type: ignore[attr-defined]
        )


def _timeout(milliseconds: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(
        seconds=milliseconds // 1000, nanos=(milliseconds % 1000) * 1_000_000
    )


def system_name(tenant: str, system: str) -> str:
    return f"tenants/{tenant}/sourceSystems/{system}"


def system_message(system: SourceSystem) -> pb.SourceSystem:
    message = pb.SourceSystem(
        name=system_name(system.tenant, system.system),
        base_url=system.base_url,
        credential_ref=system.credential_ref,
        timeout=_timeout(system.timeout_ms),
        max_bytes=system.max_bytes,
        schema=system.schema,
    )
    if system.updated_at is not None:
        message.update_time.CopyFrom(timestamp(system.updated_at))
    return message


def fetch_of(system: SourceSystem, reference: job_pb2.SourceReference) -> job_pb2.SourceFetch:
    """What a job carries for one referenced source: the reference and its
    system's registration as it is now."""
    return job_pb2.SourceFetch(
        system=reference.system,
        key=reference.key,
        content_type=reference.content_type,
        base_url=system.base_url,
        credential_ref=system.credential_ref,
        timeout=_timeout(system.timeout_ms),
        max_bytes=system.max_bytes,
        schema=system.schema,
    )


def parse_name(name: str) -> tuple[str, str]:
    """``tenants/{tenant}/sourceSystems/{system}`` → (tenant, system), or NOT_FOUND."""
    parts = name.split("/")
    if len(parts) != 4 or parts[0] != "tenants" or parts[2] != "sourceSystems" or not parts[1]:
        raise NotFound("source system not found")
    return parts[1], parts[3]


def _violation(field: str, description: str, reason: str) -> FieldViolation:
    return FieldViolation(f"{FIELD}.{field}", description, reason)


def _base_url_violations(url: str) -> list[FieldViolation]:
    def bad(description: str) -> list[FieldViolation]:
        return [_violation("base_url", description, "BAD_BASE_URL")]

    if not url:
        return bad("base_url is required")
    if len(url) > MAX_BASE_URL:
        return bad(f"at most {MAX_BASE_URL} characters")
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url) or "\\" in url:
        return bad("no spaces, control characters or backslashes")
    if "?" in url or "#" in url:
        return bad("no query or fragment: the key is appended to it")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        return bad("not a URL")
    if parts.scheme not in ("http", "https"):
        return bad("http or https")
    if "@" in parts.netloc:
        return bad("no user name or password: give credentials by credential_ref")
    if not parts.hostname:
        return bad("a host is required")
    return []


def _credential_violations(ref: str) -> list[FieldViolation]:
    """The reference's shape only; its content is never echoed."""
    if not ref:
        return []
    if ref.startswith("env:") and ENV_NAME.fullmatch(ref.removeprefix("env:")):
        if len(ref) <= MAX_CREDENTIAL_REF:
            return []
    path = ref.removeprefix("file:")
    if (
        ref.startswith("file:/")
        and len(path) > 1
        and len(ref) <= MAX_CREDENTIAL_REF
        and not any(ord(c) < 0x20 or ord(c) == 0x7F for c in path)
        and ".." not in path.split("/")
    ):
        return []
    return [
        _violation(
            "credential_ref",
            "empty, env:QUIRE_SOURCE_CREDENTIAL_<NAME> or file:/absolute/path"
            " (in the validators' source-credentials directory)",
            "BAD_CREDENTIAL_REF",
        )
    ]


def _timeout_ms(timeout: duration_pb2.Duration | None) -> tuple[int, list[FieldViolation]]:
    if timeout is None:
        return DEFAULT_TIMEOUT_MS, []
    seconds = duration_seconds(timeout)
    if seconds is None or seconds < 0:
        return 0, [_violation("timeout", "not a positive duration", "BAD_TIMEOUT")]
    if seconds == 0:
        return DEFAULT_TIMEOUT_MS, []
    milliseconds = math.ceil(timeout.seconds * 1000 + timeout.nanos / 1_000_000)
    if milliseconds > MAX_TIMEOUT_MS:
        return 0, [_violation("timeout", f"at most {MAX_TIMEOUT_MS // 1000}s", "TIMEOUT_TOO_LONG")]
    return milliseconds, []


def _max_bytes(max_bytes: int) -> tuple[int, list[FieldViolation]]:
    if max_bytes < 0:
        return 0, [_violation("max_bytes", "must not be negative", "BAD_MAX_BYTES")]
    if max_bytes > MAX_MAX_BYTES:
        return 0, [
            _violation(
                "max_bytes", f"at most {MAX_MAX_BYTES} bytes (256 MiB)", "MAX_BYTES_TOO_LARGE"
            )
        ]
    return max_bytes or DEFAULT_MAX_BYTES, []


def checked_system(message: pb.SourceSystem) -> SourceSystem:
    """The registration ``message`` asks for, defaults applied; every
    violation at once (INVALID_ARGUMENT), or NOT_FOUND for a name that is not
    ``tenants/{tenant}/sourceSystems/{system}``."""
    parts = message.name.split("/")
    if len(parts) != 4 or parts[0] != "tenants" or parts[2] != "sourceSystems" or not parts[1]:
        raise InvalidInput(
            ReasonCode.INVALID_TENANT,
            "the source system is invalid",
            (
                _violation(
                    "name", "tenants/{tenant}/sourceSystems/{system}", "BAD_SOURCE_SYSTEM_NAME"
                ),
            ),
        )
    tenant, system = parts[1], parts[3]
    violations: list[FieldViolation] = []
    if not SYSTEM_ID.fullmatch(system):
        violations.append(
            _violation(
                "name",
                "the system id is 1-63 characters of a-z 0-9 -, starting with a letter",
                "BAD_SOURCE_SYSTEM_ID",
            )
        )
    violations += _base_url_violations(message.base_url)
    violations += _credential_violations(message.credential_ref)
    timeout_ms, bad_timeout = _timeout_ms(message.timeout if message.HasField("timeout") else None)
    violations += bad_timeout
    max_bytes, bad_size = _max_bytes(message.max_bytes)
    violations += bad_size
    if message.schema and (
        len(message.schema) > MAX_SCHEMA or not SCHEMA.fullmatch(message.schema)
    ):
        violations.append(
            _violation("schema", "empty, or name@version such as tax-record@1", "BAD_SCHEMA")
        )
    if violations:
        raise InvalidInput(
            ReasonCode.INVALID_TENANT, "the source system is invalid", tuple(violations)
        )
    return SourceSystem(
        tenant=tenant,
        system=system,
        base_url=message.base_url,
        credential_ref=message.credential_ref,
        timeout_ms=timeout_ms,
        max_bytes=max_bytes,
        schema=message.schema,
    )


async def check_destination(system: SourceSystem, egress: EgressPolicy) -> None:
    """Refuse (INVALID_ARGUMENT, ``BASE_URL_NOT_ALLOWED``) a base URL whose host
    is, or resolves to, an address Quire does not call. The validator checks
    again on every connection."""
    refusal = await egress.refusal_of_url(system.base_url)
    if refusal is not None:
        raise InvalidInput(
            ReasonCode.INVALID_TENANT,
            "the source system is invalid",
            (_violation("base_url", refusal, "BASE_URL_NOT_ALLOWED"),),
        )


def _tenant_exists(connection: Connection, tenant: str) -> None:
    found = connection.execute(
        select(tables.tenants.c.id).where(tables.tenants.c.id == tenant)
    ).first()
    if found is None:
        raise NotFound("tenant not found")


def put_system(connection: Connection, system: SourceSystem) -> SourceSystem:
    """Create or replace the registration, in the caller's transaction."""
    _tenant_exists(connection, system.tenant)
    table = tables.source_systems
    values = {
        "base_url": system.base_url,
        "credential_ref": system.credential_ref,
        "timeout_ms": system.timeout_ms,
        "max_bytes": system.max_bytes,
        "schema": system.schema,
        "updated_at": datetime.now(UTC),
    }
    keys = {"tenant": system.tenant, "system": system.system}
    if not insert_if_absent(connection, table, {**keys, **values}):
        connection.execute(
            update(table)
            .where(table.c.tenant == system.tenant, table.c.system == system.system)
            .values(**values)
        )
    row = connection.execute(
        select(table).where(table.c.tenant == system.tenant, table.c.system == system.system)
    ).one()
    return SourceSystem.from_row(row)


def list_systems(connection: Connection, tenant: str) -> list[SourceSystem]:
    """The tenant's registrations, by name; NOT_FOUND for an unknown tenant."""
    _tenant_exists(connection, tenant)
    table = tables.source_systems
    rows = connection.execute(
        select(table).where(table.c.tenant == tenant).order_by(table.c.system)
    )
    return [SourceSystem.from_row(row) for row in rows]


def delete_system(connection: Connection, tenant: str, system: str) -> bool:
    """Forget the registration; False when there was none."""
    _tenant_exists(connection, tenant)
    table = tables.source_systems
    gone = connection.execute(
        delete(table)
        .where(table.c.tenant == tenant, table.c.system == system)
        .returning(table.c.system)
    ).first()
    return gone is not None


_SYSTEMS = select(tables.source_systems).where(
    tables.source_systems.c.tenant == bindparam("tenant"),
    tables.source_systems.c.system.in_(bindparam("systems", expanding=True)),
)


def read_systems(
    connection: Connection, tenant: str, systems: Iterable[str]
) -> dict[str, SourceSystem]:
    """The tenant's registrations among ``systems``, by system id (one query)."""
    wanted = sorted(set(systems))
    if not wanted:
        return {}
    return {
        row.system: SourceSystem.from_row(row)
        for row in connection.execute(_SYSTEMS, {"tenant": tenant, "systems": wanted})
    }
