"""A dead-letter retry's new budget (``quire dlq retry JOB --budget 30s``).

A job's deadline travels in its task (``JobTask.deadline``), set by
admission at acceptance, and every ledger entry of the job carries it. A job
dead-lettered past its deadline fails again at once when retried as it was
(the validator refuses to fetch for a job whose deadline passed), so an
operator may give the retry a new budget: the retried task's deadline becomes
the retry entry's time plus the budget. The ledger records it on the retry's
own entry (``DEAD_LETTER_RETRIED``): its ``deadline`` is that new deadline
and its ``reason_detail`` is ``NEW_BUDGET``, so the budget is the entry's
deadline minus its ``occur_time``, read from the hashed bytes.

A budget must be positive and at most the longest budget a job may ask for
at admission (``QUIRE_MAX_JOB_BUDGET_SECONDS``, 3600 s by default).
"""

from __future__ import annotations

from datetime import timedelta

from google.protobuf import duration_pb2, timestamp_pb2
from google.protobuf.message import DecodeError
from sqlalchemy import Connection, desc, select

from quire.audit import tables
from quire.audit.tenantlog import DAMAGED
from quire.errors import DataLoss, FieldViolation, InvalidInput
from quire.reasons import ReasonCode
from quire.type import queue_pb2

__all__ = [
    "NEW_BUDGET",
    "DEFAULT_MAX_BUDGET_SECONDS",
    "checked_budget",
    "with_budget",
    "retry_entry",
    "hold_to_retry_entry",
]

NEW_BUDGET = "NEW_BUDGET"
"""``reason_detail`` of a retry entry that gave the job a new deadline."""
DEFAULT_MAX_BUDGET_SECONDS = 3600.0
FIELD = "budget"


def checked_budget(budget: duration_pb2.Duration, max_seconds: float) -> timedelta:
    """``budget`` as a timedelta; INVALID_ARGUMENT when it is not a valid
    duration or not positive (``BUDGET_TOO_SHORT``), or longer than
    ``max_seconds`` (``BUDGET_TOO_LONG``)."""
    nanos, seconds = budget.nanos, budget.seconds
    valid = -999_999_999 <= nanos <= 999_999_999 and not (
        (seconds > 0 and nanos < 0) or (seconds < 0 and nanos > 0)
    )
    total = seconds + nanos / 1e9
    if not valid or total <= 0:
        raise InvalidInput(
            ReasonCode.BUDGET_TOO_SHORT,
            "the budget must be a positive duration",
            (FieldViolation(FIELD, "must be more than 0s", ReasonCode.BUDGET_TOO_SHORT),),
        )
    if total > max_seconds:
        raise InvalidInput(
            ReasonCode.BUDGET_TOO_LONG,
            f"the budget must be at most {max_seconds:g}s",
            (FieldViolation(FIELD, f"at most {max_seconds:g}s", ReasonCode.BUDGET_TOO_LONG),),
        )
    return timedelta(seconds=seconds, microseconds=nanos // 1000)


def with_budget(event: queue_pb2.TransitionEvent, budget: timedelta) -> None:
    """Give the retry entry ``event`` its new deadline: its own time plus ``budget``."""
    micros = budget // timedelta(microseconds=1)
    deadline = timestamp_pb2.Timestamp()
    deadline.FromNanoseconds(event.occur_time.ToNanoseconds() + micros * 1000)
    event.deadline.CopyFrom(deadline)
    event.reason_detail = NEW_BUDGET


def retry_entry(
    connection: Connection, job: str, generation: int
) -> queue_pb2.TransitionEvent | None:
    """The ledger entry of the retry that started ``generation`` of ``job``
    (decoded from its hashed bytes), or None when none is recorded."""
    table = tables.ledger
    rows = connection.execute(
        select(table.c.event)
        .where(table.c.job == job, table.c.reason_code == ReasonCode.DEAD_LETTER_RETRIED)
        .order_by(desc(table.c.sequence))
    )
    for row in rows:
        try:
            event = queue_pb2.TransitionEvent.FromString(bytes(row.event))
        except (DecodeError, TypeError):
            raise DataLoss(ReasonCode.LEDGER_DAMAGED, DAMAGED) from None
        if event.generation == generation:
            return event
    return None


def hold_to_retry_entry(connection: Connection, task: queue_pb2.JobTask) -> None:
    """Give ``task`` (of a retried generation) the deadline its retry's ledger
    entry recorded: a new budget's, or the one the job had. Unchanged when no
    such entry is recorded (the retry's mark and entry are one transaction)."""
    entry = retry_entry(connection, task.job, task.generation)
    if entry is None:
        return
    task.ClearField("deadline")
    if entry.HasField("deadline"):
        task.deadline.CopyFrom(entry.deadline)
