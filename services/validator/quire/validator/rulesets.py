"""Rulesets: declarative JSON files kept in the repository, versioned by name
and version, identified by the sha256 of their canonical JSON.

At start the validator loads every file into its database. A name@version
already stored with a different digest is refused: a published version never
changes, so a job pinned to it is judged tomorrow as it was today. A file that
is no ruleset, or that changed a published version, is the operator's
configuration to fix: the validator refuses to start (``InvalidSetting``,
exit status 2) with one line naming the file, not a traceback.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Connection, select

from quire.database import Database, insert_if_absent
from quire.errors import InvalidSetting
from quire.validator import tables
from quire.validator.ruleset import Ruleset, canonical

__all__ = ["Ruleset", "RulesetBook", "load_directory", "DEFAULT_DIRECTORY", "canonical"]

DIRECTORY_SETTING = "QUIRE_RULESETS_DIR"
RELOAD_SECONDS = 1.0
"""At most one reading of the rulesets table per second for keys not known here."""
DEFAULT_DIRECTORY = Path(__file__).resolve().parent / "shipped_rulesets"
"""The rulesets that ship with the validator, inside its distribution."""


def load_directory(directory: Path) -> list[Ruleset]:
    """Every ``*.json`` file of ``directory``; a file that is no ruleset
    refuses the start (``InvalidSetting``), naming it."""
    return [_load_file(path) for path in sorted(directory.glob("*.json"))]


def _load_file(path: Path) -> Ruleset:
    try:
        body = json.loads(path.read_text())
        if not isinstance(body, dict):
            raise ValueError("not a JSON object")
        return Ruleset.from_body(body, file=path)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        # ValueError covers undecodable JSON and an invalid rule; KeyError a
        # missing name or version; the others a field of the wrong type.
        raise InvalidSetting(
            DIRECTORY_SETTING, f"{path} is not a usable ruleset ({_why(error)})"
        ) from None


def _why(error: Exception) -> str:
    if isinstance(error, KeyError):
        return f"no {error.args[0]!r}"
    if isinstance(error, json.JSONDecodeError):
        return f"not JSON: line {error.lineno}"
    if isinstance(error, ValueError):
        return str(error)
    return type(error).__name__


def changed_after_publication(ruleset: Ruleset) -> InvalidSetting:
    """The refusal to start when a file holds a published version with other
    content: jobs pinned to that version must be judged as they were."""
    where = str(ruleset.file) if ruleset.file is not None else "a ruleset file"
    return InvalidSetting(
        DIRECTORY_SETTING,
        f"{where} holds ruleset {ruleset.key}, which differs from the published"
        f" {ruleset.key}; a published version never changes: restore the file, or"
        " give the new content a new version",
    )


class RulesetBook:
    """The rulesets stored in the validator's database, by ``name@version``."""

    def __init__(self, database: Database) -> None:
        self._db = database
        self._by_key: dict[str, Ruleset] = {}
        self._reloaded_at = float("-inf")
        self._reloading = asyncio.Lock()

    def install(self, rulesets: list[Ruleset]) -> None:
        """Store new versions; a changed body under a published version
        refuses the start (``changed_after_publication``)."""

        def write(connection: Connection) -> None:
            # Replicas starting together install the same rulesets at once: the
            # first insert wins, the others find its row (and check its digest).
            for ruleset in rulesets:
                inserted = insert_if_absent(
                    connection,
                    tables.rulesets,
                    {
                        "key": ruleset.key,
                        "name": ruleset.name,
                        "version": ruleset.version,
                        "digest": ruleset.digest,
                        "body": canonical(ruleset.body).decode(),
                        "loaded_at": datetime.now(UTC),
                    },
                )
                if inserted:
                    continue
                digest = connection.execute(
                    select(tables.rulesets.c.digest).where(tables.rulesets.c.key == ruleset.key)
                ).scalar_one()
                if digest != ruleset.digest:
                    raise changed_after_publication(ruleset)

        self._db.transaction(write)
        self.reload()

    def reload(self) -> None:
        rows = self._db.transaction(lambda s: s.execute(select(tables.rulesets)).all())
        self._by_key = {row.key: Ruleset.from_body(json.loads(row.body)) for row in rows}

    def get(self, key: str) -> Ruleset | None:
        return self._by_key.get(key)

    async def find(self, key: str) -> Ruleset | None:
        """``get``, reading the database again (off the event loop) when
        ``key`` is not known here: another replica, a rollout's candidate
        build say, may have published it since. Such readings are at least
        ``RELOAD_SECONDS`` apart: a miss waits for the next one rather than
        taking an older answer (a version published within the second would
        be refused), and misses waiting together share it."""
        found = self._by_key.get(key)
        if found is not None or not key:
            return found
        asked = time.monotonic()
        await self._read_since(asked, lambda: key in self._by_key, spaced=True)
        return self._by_key.get(key)

    async def published(self, *, fresh: bool = True) -> list[Ruleset]:
        """``all``; with ``fresh``, the database read again first (off the
        event loop; lists asked together share one reading): another replica
        may have published a version since, and admission's catalog must
        see it before a rollout may name it."""
        if fresh:
            await self._read_since(time.monotonic(), lambda: False, spaced=False)
        return self.all()

    async def _read_since(
        self, asked: float, answered: Callable[[], bool], *, spaced: bool
    ) -> None:
        """The table read again, unless a reading began after ``asked`` or
        the one before answered the question (``answered``): what was
        published before the question is then known here. ``spaced``: not
        within ``RELOAD_SECONDS`` of the reading before (the wait is the
        question's)."""
        async with self._reloading:
            if self._reloaded_at > asked or answered():
                return
            wait = self._reloaded_at + RELOAD_SECONDS - time.monotonic()
            if spaced and wait > 0:
                await asyncio.sleep(wait)
            self._reloaded_at = time.monotonic()
            await asyncio.to_thread(self.reload)

    def all(self) -> list[Ruleset]:
        return sorted(self._by_key.values(), key=lambda r: (r.name, int_or_text(r.version)))


def int_or_text(version: str) -> tuple[int, str]:
    return (int(version), "") if version.isdigit() else (0, version)
