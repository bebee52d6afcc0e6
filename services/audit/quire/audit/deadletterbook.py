"""The dead-letter book: every ``quire.dead.<stage>`` message recorded once, so
operators can list, retry and discard failed jobs.

One row per job holds the generation that failed last; a redelivered or
republished letter of the same (or an older) generation changes nothing.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from google.protobuf.message import DecodeError
from nats.aio.msg import Msg
from sqlalchemy import Connection, select, update

from quire.audit import tables
from quire.backoff import Backoff
from quire.database import Database, insert_if_absent
from quire.errors import QuireError
from quire.jobs import job_id
from quire.type import queue_pb2
from quire.workqueue.settle import ACK, TERM, Settlement, retry, settle

__all__ = ["DeadLetterBook", "record_letter"]

log = logging.getLogger(__name__)


def record_letter(connection: Connection, letter: queue_pb2.DeadLetter) -> bool:
    """Record ``letter``; True if it is new (a job's first, or a later generation)."""
    table = tables.dead_letters
    task = letter.task
    values = {
        "tenant": task.tenant,
        "stage": letter.stage,
        "reason_code": letter.reason_code,
        "deliveries": letter.deliveries,
        "generation": task.generation,
        "task": task.SerializeToString(deterministic=True),
        "status": "dead",
        "dead_at": datetime.now(UTC),
        "resolved_at": None,
        "resolved_by": "",
    }
    if insert_if_absent(connection, table, {"job": task.job, **values}):
        return True
    renewed = connection.execute(
        update(table)
        .where(table.c.job == task.job, table.c.generation < task.generation)
        .values(**values)
        .returning(table.c.job)
    ).first()
    return renewed is not None


class DeadLetterBook:
    """Audit's consumer of ``quire.dead.<stage>``: records each letter once, its
    job's row keeping the latest generation that failed."""

    def __init__(self, database: Database, backoff: Backoff) -> None:
        self._db = database
        self._backoff = backoff

    async def handle(self, msg: Msg) -> None:
        await settle(msg, await self._record(msg))

    async def _record(self, msg: Msg) -> Settlement:
        try:
            letter = queue_pb2.DeadLetter.FromString(msg.data)
            job_id(letter.task.job)
        except (DecodeError, QuireError):
            log.warning("undecodable dead letter on %s terminated", msg.subject)
            return TERM
        try:
            new = await self._db.run(lambda s: record_letter(s, letter))
        except Exception as error:  # noqa: BLE001 - database trouble: retry
            log.warning("dead letter not recorded (%s)", type(error).__name__)
            return retry(self._backoff, msg.metadata.num_delivered, error)
        if new:
            log.info(
                "job %s dead-lettered from %s (%s)",
                letter.task.job,
                letter.stage,
                letter.reason_code,
            )
        return ACK


def letter_row(connection: Connection, job: str) -> object | None:
    table = tables.dead_letters
    return connection.execute(select(table).where(table.c.job == job)).first()
