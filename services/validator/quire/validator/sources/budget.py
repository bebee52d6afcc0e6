"""A job's fetch budget: what is left of it for fetching sources.

A job may carry a deadline (``JobTask.deadline``, set by admission from its
budget). Fetching must be over by ``deadline - reserve``, the reserve being
the slice kept for render, signing and storage
(``QUIRE_JOB_BUDGET_RESERVE_SECONDS``), so that a job that cannot get its
sources ends, with its reason, inside its deadline. Without a deadline each
call is bounded by its system's timeout alone, and retries by the tries and
deliveries allowed.

Deadlines are instants on the wall clock (they cross processes); the budget
reads ``time.time`` unless given another clock.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from quire.type import queue_pb2

__all__ = ["FetchBudget"]


@dataclass(frozen=True)
class FetchBudget:
    """What is left of one job's budget for fetching: nothing after
    ``deadline - reserve_seconds``; no bound at all without a deadline."""

    deadline: float | None
    """The job's deadline (seconds since the epoch); None: no budget."""
    reserve_seconds: float
    clock: Callable[[], float] = field(default=time.time, repr=False)

    @classmethod
    def of(
        cls,
        task: queue_pb2.JobTask,
        reserve_seconds: float,
        clock: Callable[[], float] = time.time,
    ) -> FetchBudget:
        deadline = None
        if task.HasField("deadline"):
            deadline = task.deadline.seconds + task.deadline.nanos / 1e9
        return cls(deadline, reserve_seconds, clock)

    @property
    def limited(self) -> bool:
        return self.deadline is not None

    @property
    def fetch_deadline(self) -> float:
        """When fetching must be over (infinite without a deadline)."""
        return math.inf if self.deadline is None else self.deadline - self.reserve_seconds

    def passed(self) -> bool:
        """The job's deadline itself has passed."""
        return self.deadline is not None and self.clock() >= self.deadline

    def remaining(self) -> float:
        """Seconds left for fetching (infinite without a deadline; may be negative)."""
        return self.fetch_deadline - self.clock()

    def call_timeout(self, system_timeout: float) -> float:
        """One call's bound: the system's timeout, or what is left if less."""
        return min(system_timeout, self.remaining())
