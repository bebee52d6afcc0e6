"""The current version of each ruleset name: what a job that names no
version (or only the name) is pinned to when admission accepts it.

Loading a new version changes nothing for such jobs. A rollout gives the
new version to its candidate-track jobs (``JobTask.candidate_ruleset``);
promoting the rollout makes it the current version (``promote``), for every
job accepted after; rolling it back leaves the current version as it was.
There is one current version per name for the whole system: no tenant has
versions of its own.

First sight. A name without a record is *adopted* at the newest version
known when admission first sees it (``adopt``): on a new deployment that is
the version loaded with it; on one upgraded from a release that pinned the
newest version, it is the version its jobs already got, so the upgrade
itself changes no job's ruleset. Admission looks for new names at its start
and every few seconds after (``quire.admission.rulesets.ledger``), and before
pinning a job, so a version loaded later never becomes current by being
first. What a job was pinned to is on its ACCEPTED ledger entry
(``ruleset_version``).

Each promotion is a row of ``ruleset_changes``, written in the promotion's
transaction, which ``quire.admission.rulesets.ledger`` then records in
audit's ledger (from, to, the rollout, the operator).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Connection, select, update

from quire.admission import tables
from quire.admission.rollouts.records import RolloutRecord
from quire.admission.rulesets.catalog import newest_versions
from quire.admission.v1 import rollout_pb2
from quire.database import Database, as_utc, insert_if_absent
from quire.jobs import timestamp

__all__ = ["CurrentRulesets", "adopt", "current_messages", "promote", "read_current"]

REFRESH_SECONDS = 1.0


def read_current(connection: Connection) -> dict[str, str]:
    """Every name's current ``name@version``."""
    table = tables.current_rulesets
    return {row.name: row.version for row in connection.execute(select(table))}


def current_messages(connection: Connection) -> list[rollout_pb2.CurrentRuleset]:
    """Every name's current version, by name, as operators read it."""
    table = tables.current_rulesets
    return [
        rollout_pb2.CurrentRuleset(
            name=row.name, version=row.version, update_time=timestamp(as_utc(row.updated_at))
        )
        for row in connection.execute(select(table).order_by(table.c.name))
    ]


def adopt(connection: Connection, known: frozenset[str]) -> list[str]:
    """Give each name of ``known`` without a current version its newest known
    version; the names adopted here (another replica's adoption wins a race)."""
    current = read_current(connection)
    now = datetime.now(UTC)
    return [
        name
        for name, newest in sorted(newest_versions(known).items())
        if name not in current
        and insert_if_absent(
            connection,
            tables.current_rulesets,
            {"name": name, "version": newest, "updated_at": now},
        )
    ]


def promote(
    connection: Connection, record: RolloutRecord, *, operator: str, build_version: str
) -> bool:
    """Make the promoted rollout's candidate ruleset its name's current
    version, in the promotion's transaction, and keep the change for the
    ledger; False when there was nothing to change."""
    if not record.candidate_ruleset:
        return False
    name = record.candidate_ruleset.partition("@")[0]
    table = tables.current_rulesets
    now = datetime.now(UTC)
    previous = connection.scalar(select(table.c.version).where(table.c.name == name))
    if previous == record.candidate_ruleset:
        return False
    if previous is None:
        connection.execute(
            table.insert(), {"name": name, "version": record.candidate_ruleset, "updated_at": now}
        )
    else:
        connection.execute(
            update(table)
            .where(table.c.name == name)
            .values(version=record.candidate_ruleset, updated_at=now)
        )
    connection.execute(
        tables.ruleset_changes.insert(),
        {
            "name": name,
            "previous_version": previous or "",
            "current_version": record.candidate_ruleset,
            "rollout": record.name,
            "operator": operator,
            "build_version": build_version,
            "changed_at": now,
        },
    )
    return True


@dataclass(frozen=True)
class _Kept:
    versions: Mapping[str, str]
    read_at: float


class CurrentRulesets:
    """The current versions, read at most once per ``refresh_seconds`` (and at
    once after ``changed``), with every name of the catalog adopted first."""

    def __init__(
        self,
        database: Database,
        *,
        refresh_seconds: float = REFRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._db = database
        self._refresh = refresh_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._kept = _Kept({}, float("-inf"))
        self._generation = 0
        self._adopted: frozenset[str] | None = None
        """The catalog's keys whose every name is known to have a current version."""

    def changed(self) -> None:
        """A current version changed (a promotion here): read again next time."""
        with self._lock:
            self._generation += 1
            self._kept = _Kept(self._kept.versions, float("-inf"))

    async def versions(self, known: frozenset[str]) -> Mapping[str, str]:
        """Each name's current version, every name of ``known`` adopted first."""
        with self._lock:
            kept, generation = self._kept, self._generation
            adopted = known is self._adopted or known == self._adopted
        if adopted and self._clock() - kept.read_at < self._refresh:
            return kept.versions
        names = set(newest_versions(known))
        if not adopted and not names <= set(kept.versions):
            await self._db.run(lambda s: adopt(s, known))
        now = self._clock()
        versions = await self._db.read(read_current)
        with self._lock:
            # A change made while this read ran invalidates it: keep it for
            # this call only, and read again next time.
            if generation == self._generation:
                self._kept = _Kept(versions, now)
            if names <= set(versions):
                self._adopted = known
        return versions
