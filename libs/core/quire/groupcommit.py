"""Group commit: many small write transactions committed as one.

SQLite has one writer and each commit is an fsync, so concurrent writers
queue behind each other. Here, writes that arrive while a commit is in
progress wait and then go together, under one transaction and one fsync. A
group is first written as it is; if that raises, the whole transaction is
rolled back and the group is written again with each item in its own
savepoint, so one failing item rolls back only itself (savepoints cost two
statements per item, so only groups that need them pay for them). A lone
writer still commits at once; no timer delays anything.

``BatchCommit`` hands a group's items to one function, which can write them
in fewer statements than one at a time (the ledger appends a group of events
with one look-up, one insert and one chain-head update per tenant);
``GroupCommit`` is the same for independent pieces of work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

from sqlalchemy import Connection

from quire.database import Database, savepoint
from quire.faults import fault_point

__all__ = ["BatchCommit", "GroupCommit", "Writes"]

T = TypeVar("T")
I = TypeVar("I")  # noqa: E741 - an item
R = TypeVar("R")
Outcome = tuple[bool, Any]
"""(True, result) or (False, the exception for that item's caller)."""


class BatchCommit(Generic[I, R]):
    """Items written together by ``write(connection, items)``, which returns one
    result per item, in order."""

    def __init__(
        self,
        database: Database,
        write: Callable[[Connection, list[I]], Sequence[R]],
        *,
        max_batch: int = 64,
        name: str = "",
    ) -> None:
        """``name`` names the fault points of a group of several items
        (``<name>.group_written``, inside its transaction, and
        ``<name>.group_committed``, just after): inert unless a fault test arms them."""
        self._db = database
        self._write = write
        self._name = name
        self._max_batch = max_batch
        self._waiting: list[list[tuple[I, asyncio.Future[R]]]] = []
        """Units of items that go in the same group, in arrival order."""
        self._committing = False

    async def run(self, item: I) -> R:
        """Write ``item`` with the next group; its result, or its own exception."""
        (result,) = await self.run_all([item])
        return result

    async def run_all(self, items: Sequence[I]) -> list[R]:
        """Write ``items`` together, in order, in one group (the group may hold
        others' items too); their results, or the first item's exception.
        Should the group fail and be written again item by item, each of them
        commits or fails on its own: a caller that gets an exception may find
        some of its items written (callers write what can be written again)."""
        if not items:
            return []
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[R]] = [loop.create_future() for _ in items]
        self._waiting.append(list(zip(items, futures, strict=True)))
        if not self._committing:
            self._committing = True
            asyncio.create_task(self._commit_groups())
        return list(await asyncio.gather(*futures))

    async def _commit_groups(self) -> None:
        try:
            while self._waiting:
                group = self._next_group()
                items = [item for item, _future in group]
                try:
                    outcomes = await self._db.run(partial(self._together, items=items))
                    if self._name and len(items) > 1:
                        fault_point(f"{self._name}.group_committed")
                except _GroupFailed:
                    outcomes = await self._one_by_one(items)
                except Exception as error:  # noqa: BLE001 - the commit itself failed: all fail
                    outcomes = [(False, error)] * len(group)
                if len(outcomes) != len(group):  # a write that lost count: none is trusted
                    failure = RuntimeError("a group's write returned the wrong number of results")
                    outcomes = [(False, failure)] * len(group)
                for (_item, future), (ok, value) in zip(group, outcomes, strict=True):
                    if future.done():
                        continue
                    if ok:
                        future.set_result(value)
                    else:
                        future.set_exception(value)
        finally:
            self._committing = False

    def _next_group(self) -> list[tuple[I, asyncio.Future[R]]]:
        """Whole units from the front, up to ``max_batch`` items (a larger
        unit goes alone)."""
        group = self._waiting.pop(0)
        while self._waiting and len(group) + len(self._waiting[0]) <= self._max_batch:
            group += self._waiting.pop(0)
        return group

    def _together(self, connection: Connection, *, items: list[I]) -> list[Outcome]:
        try:
            results = self._write(connection, items)
        except Exception as error:  # noqa: BLE001 - written again, item by item
            raise _GroupFailed() from error
        if self._name and len(items) > 1:
            fault_point(f"{self._name}.group_written")
        return [(True, result) for result in results]

    async def _one_by_one(self, items: list[I]) -> list[Outcome]:
        try:
            return await self._db.run(partial(self._isolated, items=items))
        except Exception as error:  # noqa: BLE001 - the commit itself failed: all fail
            return [(False, error)] * len(items)

    def _isolated(self, connection: Connection, *, items: list[I]) -> list[Outcome]:
        outcomes: list[Outcome] = []
        for item in items:
            try:
                with savepoint(connection):
                    outcomes.append((True, self._write(connection, [item])[0]))
            except Exception as error:  # noqa: BLE001 - handed to this item's caller
                outcomes.append((False, error))
        return outcomes


class _GroupFailed(Exception):
    """The group's write raised: its transaction is rolled back."""


def _each(connection: Connection, works: list[Callable[[Connection], Any]]) -> list[Any]:
    return [work(connection) for work in works]


class Writes(Protocol):
    """Anything that runs a piece of work in a group's transaction."""

    async def run(self, work: Callable[[Connection], T]) -> T: ...


class GroupCommit:
    """Independent pieces of work, each ``work(connection)``, committed in groups."""

    def __init__(self, database: Database, *, max_batch: int = 64, name: str = "") -> None:
        self._batches: BatchCommit[Callable[[Connection], Any], Any] = BatchCommit(
            database, _each, max_batch=max_batch, name=name
        )

    async def run(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in the next group's transaction."""
        result: T = await self._batches.run(work)
        return result
