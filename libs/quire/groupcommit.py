"""Group commit: many small write transactions committed as one.

SQLite has one writer and each commit is an fsync, so concurrent writers
queue behind each other. Here, writes that arrive while a commit is in
progress wait and then go together, under one transaction and one fsync. A
group is first tried as it is; if any item raises, the whole transaction is
rolled back and the group is tried again with each item in its own savepoint,
so one failing item rolls back only itself (savepoints cost two statements
per item, so only groups that need them pay for them). A lone writer still
commits at once; no timer delays anything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from sqlalchemy.orm import Session

from quire.database import Database

__all__ = ["GroupCommit"]

T = TypeVar("T")
_Item = tuple[Callable[[Session], Any], "asyncio.Future[Any]"]


class GroupCommit:
    def __init__(self, database: Database, *, max_batch: int = 64) -> None:
        self._db = database
        self._max_batch = max_batch
        self._waiting: list[_Item] = []
        self._committing = False

    async def run(self, work: Callable[[Session], T]) -> T:
        """Run ``work`` in a savepoint of the next group's transaction."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._waiting.append((work, future))
        if not self._committing:
            self._committing = True
            asyncio.create_task(self._commit_groups())
        return await future

    async def _commit_groups(self) -> None:
        try:
            while self._waiting:
                group = self._waiting[: self._max_batch]
                del self._waiting[: self._max_batch]
                try:
                    outcomes = await self._db.run(partial(_all_or_nothing, group=group))
                except _ItemFailed:
                    outcomes = await self._isolated(group)
                except Exception as error:  # noqa: BLE001 - the commit itself failed: all fail
                    outcomes = [(False, error)] * len(group)
                for (_work, future), (ok, value) in zip(group, outcomes, strict=True):
                    if future.done():
                        continue
                    if ok:
                        future.set_result(value)
                    else:
                        future.set_exception(value)
        finally:
            self._committing = False

    async def _isolated(self, group: list[_Item]) -> list[tuple[bool, Any]]:
        try:
            return await self._db.run(partial(_attempt_all, group=group))
        except Exception as error:  # noqa: BLE001 - the commit itself failed: all fail
            return [(False, error)] * len(group)


class _ItemFailed(Exception):
    """One item of a group raised: the group's transaction is rolled back."""


def _all_or_nothing(session: Session, *, group: list[_Item]) -> list[tuple[bool, Any]]:
    try:
        return [(True, work(session)) for work, _future in group]
    except Exception as error:  # noqa: BLE001 - retried item by item, in savepoints
        raise _ItemFailed() from error


def _attempt_all(session: Session, *, group: list[_Item]) -> list[tuple[bool, Any]]:
    return [_attempt(session, work) for work, _future in group]


def _attempt(session: Session, work: Callable[[Session], Any]) -> tuple[bool, Any]:
    try:
        with session.begin_nested():
            return True, work(session)
    except Exception as error:  # noqa: BLE001 - handed to this item's caller
        return False, error
