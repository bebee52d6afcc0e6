"""WatchJob: each change of a job's state, pushed as audit records it.

A watch reads the job's ledger entries after its position, folds them into
the job view by the ledger's own rule (``quire.jobview``), yields the
view after every entry that changed the state, and then sleeps until the
job's history grows. It is woken

- at once by this process's own appends: the events recorder's and the
  completion desk's notice (:class:`LedgerNotices`, audit's ``HistoryWatch``);
- within ``poll_seconds`` by another audit replica's appends (a shared
  PostgreSQL ledger): one query per process per interval asks, for every
  watched job together, for its newest sequence.

Watches woken together (one commit appends several jobs' events) read
together: their reads made in the same turn of the event loop are one query
(``EntryReads``). Most of the time they need not read at all: the events
recorder hands over the entries it appended (``offer``), each naming the
job's entry before it (read under the tenant's head lock, so nothing of
another replica's can fall between), and a watch that has read up to that
one takes them as they are. Any other notice — the completion desk's,
another replica's, the poll's — makes the next wake read the ledger.

Within one job, ledger sequence is commit order (a tenant's appends hold its
chain head's lock), so resuming after a sequence misses nothing and repeats
nothing. A watch ends after a terminal state. Open watches are bounded per
process (RESOURCE_EXHAUSTED, ``WATCHES_EXCEEDED``) and end UNAVAILABLE
(``SERVICE_DRAINING``) when the service drains, so a client watches again.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any

from sqlalchemy import Connection, bindparam, func, select

from quire.audit import tables
from quire.audit.history import HistoryWatch
from quire.database import Database
from quire.driversql import DriverStatement
from quire.errors import Overloaded, QuotaViolation, TransientError
from quire.jobs import SETTLED_STATES, TERMINAL_STATES
from quire.jobview import JobFacts, apply, is_retirement
from quire.reasons import ReasonCode
from quire.settings import WatchSettings
from quire.type import queue_pb2

__all__ = ["EntryReads", "JobWatches", "LedgerNotices"]

log = logging.getLogger(__name__)


class _Watcher:
    __slots__ = ("job", "position", "woken", "unoffered")

    def __init__(self, job: str) -> None:
        self.job = job
        self.position = 0
        """The last ledger sequence of this job the watch has read."""
        self.woken = asyncio.Event()
        self.unoffered = True
        """Some entry may have come that was not offered (``JobWatches.offer``):
        the next wake reads the ledger."""


# Built once, run through the driver: every watch runs them on each wake and each poll.
_ENTRIES_AFTER = DriverStatement(
    select(tables.ledger.c.sequence, tables.ledger.c.event)
    .where(tables.ledger.c.job == bindparam("job"), tables.ledger.c.sequence > bindparam("after"))
    .order_by(tables.ledger.c.sequence)
)
_HEADS = DriverStatement(
    select(tables.ledger.c.job, func.max(tables.ledger.c.sequence).label("head"))
    .where(tables.ledger.c.job.in_(bindparam("jobs", expanding=True)))
    .group_by(tables.ledger.c.job)
)


_ENTRIES_OF_JOBS = DriverStatement(
    select(tables.ledger.c.job, tables.ledger.c.sequence, tables.ledger.c.event)
    .where(
        tables.ledger.c.job.in_(bindparam("jobs", expanding=True)),
        tables.ledger.c.sequence > bindparam("after"),
    )
    .order_by(tables.ledger.c.sequence)
)


def _entries_after(connection: Connection, *, job: str, after: int) -> list[Any]:
    return _ENTRIES_AFTER.rows(connection, {"job": job, "after": after})


def _entries_of(
    connection: Connection, *, wanted: dict[str, int]
) -> dict[str, list[tuple[int, bytes]]]:
    """Each job's entries after its own position, in sequence order."""
    if len(wanted) == 1:
        ((job, after),) = wanted.items()
        return {
            job: [
                (row.sequence, row.event)
                for row in _entries_after(connection, job=job, after=after)
            ]
        }
    found: dict[str, list[tuple[int, bytes]]] = {job: [] for job in wanted}
    rows = _ENTRIES_OF_JOBS.rows(
        connection, {"jobs": sorted(wanted), "after": min(wanted.values())}
    )
    for row in rows:
        if row.sequence > wanted[row.job]:
            found[row.job].append((row.sequence, row.event))
    return found


class EntryReads:
    """Watches' reads of their jobs' new entries: those asked in the same turn
    of the event loop go as one query."""

    def __init__(self, database: Database) -> None:
        self._db = database
        self._wanted: dict[str, list[tuple[int, asyncio.Future[list[tuple[int, bytes]]]]]] = {}

    async def after(self, job: str, after: int) -> list[tuple[int, bytes]]:
        """``job``'s entries past sequence ``after``, in order."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[list[tuple[int, bytes]]] = loop.create_future()
        if not self._wanted:
            loop.call_soon(self._read_all)
        self._wanted.setdefault(job, []).append((after, waiter))
        return await waiter

    def _read_all(self) -> None:
        wanted, self._wanted = self._wanted, {}
        task = asyncio.ensure_future(self._read(wanted))
        task.add_done_callback(lambda done: done.exception() if not done.cancelled() else None)

    async def _read(
        self, wanted: dict[str, list[tuple[int, asyncio.Future[list[tuple[int, bytes]]]]]]
    ) -> None:
        lowest = {job: min(after for after, _waiter in asks) for job, asks in wanted.items()}
        try:
            found = await self._db.read(partial(_entries_of, wanted=lowest))
        except Exception as error:  # noqa: BLE001 - each watch sees its read fail
            for asks in wanted.values():
                for _after, waiter in asks:
                    if not waiter.done():
                        waiter.set_exception(error)
            return
        for job, asks in wanted.items():
            for after, waiter in asks:
                if not waiter.done():
                    waiter.set_result([entry for entry in found[job] if entry[0] > after])


def _heads(connection: Connection, *, jobs: list[str]) -> dict[str, int]:
    return {row.job: int(row.head) for row in _HEADS.rows(connection, {"jobs": list(jobs)})}


class JobWatches:
    """This process's open watches, their bound, and what wakes them."""

    def __init__(self, database: Database, settings: WatchSettings | None = None) -> None:
        self._db = database
        self._reads = EntryReads(database)
        self._settings = settings or WatchSettings()
        self._watchers: dict[str, set[_Watcher]] = defaultdict(set)
        self._tails: dict[str, dict[int, tuple[int, bytes]]] = {}
        """Per watched job, entries this process appended, by the sequence of
        the job's entry before each."""
        self._open = 0
        self._closed = False
        self._poller: asyncio.Task[None] | None = None

    @property
    def open(self) -> int:
        return self._open

    def notify(self, job: str) -> None:
        """The job's ledger history grew (committed): wake its watches, which
        read the ledger."""
        for watcher in self._watchers.get(job, ()):
            watcher.unoffered = True
            watcher.woken.set()

    def offer(self, job: str, entries: list[tuple[int | None, tuple[int, bytes]]]) -> None:
        """The job's history grew by ``entries`` (committed), each with the
        sequence of the job's entry before it (None: not known): wake its
        watches, which take them as they are when they have read up to the
        one before, instead of reading the ledger."""
        watchers = self._watchers.get(job)
        if not watchers:
            return
        if any(previous is None for previous, _entry in entries):
            self.notify(job)
            return
        tail = self._tails.setdefault(job, {})
        for previous, entry in entries:
            assert previous is not None
            tail[previous] = entry
        while len(tail) > _TAIL:
            del tail[min(tail)]
        for watcher in watchers:
            watcher.woken.set()

    def _offered(self, watcher: _Watcher) -> list[tuple[int, bytes]]:
        """The offered entries that follow the watcher's position, in order."""
        tail = self._tails.get(watcher.job)
        rows: list[tuple[int, bytes]] = []
        position = watcher.position
        while tail and position in tail:
            rows.append(tail[position])
            position = rows[-1][0]
        return rows

    def close(self) -> None:
        """End every open watch (UNAVAILABLE) and refuse new ones: draining."""
        self._closed = True
        for watchers in self._watchers.values():
            for watcher in watchers:
                watcher.woken.set()
        if self._poller is not None:
            self._poller.cancel()

    def _refuse_if_closed(self) -> None:
        if self._closed:
            raise TransientError(ReasonCode.SERVICE_DRAINING, "audit is shutting down; watch again")

    async def changes(
        self, job: str, after: int, *, settled_only: bool = False
    ) -> AsyncIterator[tuple[JobFacts, int]]:
        """The job's view after each entry past ``after`` that changed its
        state, with the entry's sequence; ends after a terminal state.
        ``settled_only``: only the changes into a terminal or parked state."""
        self._refuse_if_closed()
        limit = self._settings.max_watches
        if self._open >= limit:
            raise Overloaded(
                ReasonCode.WATCHES_EXCEEDED,
                "too many open watches; try again shortly",
                retry_after=1.0,
                quota=(QuotaViolation("watches", f"at most {limit} open watches per process"),),
            )
        watcher = _Watcher(job)
        self._open += 1
        self._watchers[job].add(watcher)
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll())
        try:
            facts: JobFacts | None = None
            while True:
                watcher.woken.clear()  # before the read: a notice during it is kept
                rows = [] if watcher.unoffered else self._offered(watcher)
                if not rows:
                    watcher.unoffered = False
                    rows = await self._reads.after(job, watcher.position)
                for sequence, data in rows:
                    watcher.position = sequence
                    event = queue_pb2.TransitionEvent.FromString(data)
                    if is_retirement(event):
                        continue
                    before = facts
                    facts = apply(facts, event)
                    changed = before is None or before.state != facts.state
                    if (
                        changed
                        and sequence > after
                        and (not settled_only or facts.state in SETTLED_STATES)
                    ):
                        yield facts, sequence
                        if facts.state in TERMINAL_STATES:
                            return
                if facts is not None and facts.state in TERMINAL_STATES:
                    return  # ended at or before ``after``: nothing more to say
                await watcher.woken.wait()
                self._refuse_if_closed()
        finally:
            self._open -= 1
            watchers = self._watchers.get(job)
            if watchers is not None:
                watchers.discard(watcher)
                if not watchers:
                    del self._watchers[job]
                    self._tails.pop(job, None)

    async def _poll(self) -> None:
        """While any watch is open: wake those whose job another replica extended."""
        while self._watchers and not self._closed:
            await asyncio.sleep(self._settings.poll_seconds)
            behind = {
                job: min(w.position for w in watchers)
                for job, watchers in self._watchers.items()
                if watchers
            }
            if not behind:
                continue
            try:
                heads = await self._db.read(partial(_heads, jobs=list(behind)))
            except Exception as error:  # noqa: BLE001 - the next interval tries again
                log.warning("watch poll failed (%s)", type(error).__name__)
                continue
            for job, head in heads.items():
                for watcher in self._watchers.get(job, ()):
                    if head > watcher.position:
                        watcher.unoffered = True
                        watcher.woken.set()


_TAIL = 32
"""Offered entries kept per watched job at most."""


class LedgerNotices(HistoryWatch):
    """Audit's history notice (the events recorder's and the completion
    desk's) that also wakes watches, and tells the other replicas
    (``replicanews``) once ``tell`` is set."""

    def __init__(self, watches: JobWatches) -> None:
        super().__init__()
        self._watches = watches
        self.tell: Callable[[str], None] | None = None

    def notify(self, job: str) -> None:
        self.heard(job)
        if self.tell is not None:
            self.tell(job)

    def appended(self, job: str, entries: list[tuple[int | None, tuple[int, bytes]]]) -> None:
        """``notify``, by the entries this process appended to ``job``'s
        history (``JobWatches.offer``)."""
        HistoryWatch.notify(self, job)
        self._watches.offer(job, entries)
        if self.tell is not None:
            self.tell(job)

    def heard(self, job: str) -> None:
        """Another replica grew ``job``'s history: wake what waits here."""
        super().notify(job)
        self._watches.notify(job)
