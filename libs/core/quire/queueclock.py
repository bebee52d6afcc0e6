"""JetStream's clock, as a stage can bound it from the tasks it receives
(issue 42: a job's deadline is not judged on one host's wrong clock).

JetStream stamps every message it stores with its own clock. A stage that
receives a task reads its own clock: the gap between the two is the task's
wait on the queue (never negative) plus how far the stage's clock runs from
JetStream's. The least gap over the last tasks is therefore an upper bound
of that skew, and

    now() = this host's clock - the least gap seen

is never later than JetStream's clock reads now, and earlier by no more
than the shortest wait among those tasks (on a queue that empties now and
then, milliseconds). A deadline judged on ``now()`` is never judged passed
early, whichever way and however far this host's clock is off; it may be
judged late by that shortest wait. The task being judged is observed before
it is judged, so there is always a gap to go by.

A clock that is set (stepped) while tasks are remembered shifts every
gap by as much; each gap is kept with the clock's difference from the
monotonic clock at the time, so it is counted as the clock reads now.

A least gap beyond ``TOLERATED_SKEW_SECONDS`` either way says this host's
clock is off (ahead by at most the gap, or behind by at least it): logged
at most once a minute.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable

__all__ = ["QueueClock", "TOLERATED_SKEW_SECONDS"]

log = logging.getLogger(__name__)

TOLERATED_SKEW_SECONDS = 60.0
"""The skew Quire tolerates between two hosts' clocks (as ``quire.callers``)."""
WINDOW = 64
"""Tasks whose gaps are kept."""
LOG_SECONDS = 60.0


class QueueClock:
    """JetStream's clock as bounded from below by this stage's tasks."""

    def __init__(
        self,
        *,
        window: int = WINDOW,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._gaps: deque[tuple[float, float]] = deque(maxlen=window)
        """(gap, this host's clock less its monotonic clock) at each task."""
        self._clock = clock
        self._monotonic = monotonic
        self._logged = -math.inf

    def _epoch(self) -> float:
        """This host's clock less its monotonic clock: it moves only when
        the clock is set (a step), never as time passes."""
        return self._clock() - self._monotonic()

    def observe(self, stored_at: float) -> None:
        """A task JetStream stored at ``stored_at`` (its clock, seconds since
        the epoch) is received now."""
        self._gaps.append((self._clock() - stored_at, self._epoch()))
        self._report()

    def gap(self) -> float | None:
        """The least gap seen, as this host's clock reads now: a gap seen
        before the clock was set (stepped) counts by how far it was set, so
        one clock stepping mid-window misleads nothing. None before the
        first task."""
        if not self._gaps:
            return None
        epoch = self._epoch()
        return min(gap + (epoch - then) for gap, then in self._gaps)

    def now(self) -> float:
        """JetStream's clock now, never later than it reads (this host's
        clock before the first task)."""
        return self._clock() - (self.gap() or 0.0)

    def _report(self) -> None:
        gap = self.gap()
        if gap is None or abs(gap) <= TOLERATED_SKEW_SECONDS:
            return
        at = self._monotonic()
        if at - self._logged < LOG_SECONDS:
            return
        self._logged = at
        if gap > 0:
            log.warning(
                "every task arrived at least %.0f s after JetStream stored it: this host's"
                " clock may run ahead; deadlines are judged on JetStream's clock",
                gap,
            )
        else:
            log.warning(
                "tasks arrive %.0f s before JetStream stored them: this host's clock runs"
                " behind; deadlines are judged on JetStream's clock",
                -gap,
            )
