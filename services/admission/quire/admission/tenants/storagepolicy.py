"""A tenant's storage policy: how many bytes of uploads it may keep, and how
long its bytes are kept after its jobs end.

Admission holds the policy beside the tenant (``tables.tenant_storage``; a
missing value follows the service-wide default) and enforces the quota at
upload: an upload whose bytes would take the tenant's stored uploads past
its quota is refused before anything is written (``RESOURCE_EXHAUSTED``,
``STORAGE_QUOTA_EXCEEDED``). Bytes the tenant already has cost nothing.
The periods are read by ``quire retention``, which retires what outlived
them and then asks admission to forget the uploads it deleted
(``forget_source``), so they no longer count against the quota.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sqlalchemy import Connection, bindparam, delete, func, select, update

from quire.admission import tables
from quire.database import insert_if_absent
from quire.driversql import DriverStatement
from quire.errors import Overloaded, QuotaViolation
from quire.reasons import ReasonCode

__all__ = [
    "TenantStorage",
    "PERIODS",
    "read_storage",
    "write_storage",
    "stored_bytes",
    "count_stored",
    "summed_bytes",
    "check_quota",
    "forget_source",
]

PERIODS = ("sources_seconds", "packets_seconds", "artifacts_seconds", "unused_uploads_seconds")
"""The retention periods a tenant may set, as named in the table and the API."""


@dataclass(frozen=True)
class TenantStorage:
    """A tenant's own quota and periods; None follows the default."""

    storage_quota_bytes: int | None = None
    sources_seconds: int | None = None
    packets_seconds: int | None = None
    artifacts_seconds: int | None = None
    unused_uploads_seconds: int | None = None

    def quota(self, default: int) -> int:
        return self.storage_quota_bytes or default


def _storage(row: object | None) -> TenantStorage:
    if row is None:
        return TenantStorage()
    return TenantStorage(**{name: getattr(row, name) or None for name in asdict(TenantStorage())})


def read_storage(connection: Connection, tenants: list[str]) -> dict[str, TenantStorage]:
    """Each named tenant's policy (the defaults for one that set none)."""
    table = tables.tenant_storage
    rows = {
        r.tenant: r for r in connection.execute(select(table).where(table.c.tenant.in_(tenants)))
    }
    return {tenant: _storage(rows.get(tenant)) for tenant in tenants}


def write_storage(connection: Connection, tenant: str, **values: int | None) -> TenantStorage:
    """Set the named fields (0 or None: back to the default); others stay."""
    table = tables.tenant_storage
    insert_if_absent(connection, table, {"tenant": tenant})
    connection.execute(
        update(table)
        .where(table.c.tenant == tenant)
        .values(**{name: value or None for name, value in values.items()})
    )
    return read_storage(connection, [tenant])[tenant]


_USAGE = DriverStatement(
    select(tables.tenant_usage.c.stored_bytes).where(
        tables.tenant_usage.c.tenant == bindparam("tenant")
    )
)
_COUNT = DriverStatement(
    update(tables.tenant_usage)
    .where(tables.tenant_usage.c.tenant == bindparam("b_tenant"))
    .values(stored_bytes=tables.tenant_usage.c.stored_bytes + bindparam("b_bytes"))
)
"""Built once: every upload runs them."""


def stored_bytes(connection: Connection, tenant: str) -> int:
    """Bytes of the uploads admission holds for ``tenant``: one row, kept by
    ``count_stored`` (not a sum over every source, which would make each
    upload cost more the more a tenant has stored)."""
    row = _USAGE.first(connection, {"tenant": tenant})
    return int(row.stored_bytes or 0) if row is not None else 0


def count_stored(connection: Connection, tenant: str, added: int) -> None:
    """Move ``tenant``'s stored bytes by ``added`` (negative: forgotten), in the
    transaction that adds or forgets the source."""
    insert_if_absent(connection, tables.tenant_usage, {"tenant": tenant, "stored_bytes": 0})
    _COUNT.run(connection, {"b_tenant": tenant, "b_bytes": added})


def summed_bytes(connection: Connection, tenant: str) -> int:
    """``stored_bytes`` the long way, from every source row (the recount's)."""
    table = tables.sources
    total = connection.execute(
        select(func.coalesce(func.sum(table.c.size_bytes), 0)).where(table.c.tenant == tenant)
    ).scalar_one()
    return int(total)


_POLICY = DriverStatement(
    select(tables.tenant_storage).where(tables.tenant_storage.c.tenant == bindparam("tenant"))
)
"""Built once: every upload reads its tenant's policy."""


def check_quota(connection: Connection, tenant: str, adding: int, default_quota: int) -> None:
    """Refuse ``adding`` new bytes past the tenant's storage quota."""
    policy = _storage(_POLICY.first(connection, {"tenant": tenant}))
    quota = policy.quota(default_quota)
    if stored_bytes(connection, tenant) + adding > quota:
        raise Overloaded(
            ReasonCode.STORAGE_QUOTA_EXCEEDED,
            f"stored uploads would pass the tenant's {quota}-byte storage quota",
            quota=(QuotaViolation(f"tenants/{tenant}", f"stored uploads at most {quota} bytes"),),
        )


def forget_source(connection: Connection, tenant: str, sha256: str) -> bool:
    """Drop the record of an upload whose bytes were retired; False if there was none."""
    table = tables.sources
    gone = connection.execute(
        delete(table)
        .where(table.c.tenant == tenant, table.c.sha256 == sha256)
        .returning(table.c.size_bytes)
    ).first()
    if gone is None:
        return False
    count_stored(connection, tenant, -int(gone.size_bytes))
    return True
