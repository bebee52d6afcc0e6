"""Which of its stage's queues a worker pulls, by its stage's rollout.

Routing by track is the queues', not the workers' politeness: a
candidate-track job's task waits on its stage's candidate subject
(``topology.task_subject``), which only the ``<stage>-candidate`` consumer
holds, and that consumer's ``max_ack_pending`` is the rollout's concurrency
cap. What a worker binds follows its stage's rollout (``quire.rolloutboard``)
and its own deployable version:

==================  ==========================  ==========================
stage's rollout     the candidate's version     every other version
==================  ==========================  ==========================
none                (no candidate)              baseline only
canary              candidate only              baseline only
canary, ruleset     (no candidate version)      baseline + candidate
  only
rolled back         nothing: no new leases      baseline + candidate
promoted            baseline + candidate        baseline + candidate
==================  ==========================  ==========================

So on rollback the candidate's workers stop pulling at once (their in-flight
work finishes, or its lease expires and lease fencing discards a late
result), and the candidate subjects' messages, redeliveries included, go to
the baseline's workers, which bind the candidate consumer again. The
candidate consumer shares a worker's interactive slots, so binding it never
raises a process's concurrency.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from quire.pipeline import Stage
from quire.rolloutboard import CANARY, ROLLED_BACK, RolloutBoard, StageRollout
from quire.tracks import BASELINE, CANDIDATE
from quire.workqueue.topology import PRIORITIES, candidate_consumer_name, consumer_name
from quire.workqueue.worker import WorkQueueWorker

__all__ = ["Binding", "baseline_only", "binding", "TrackBinder"]

log = logging.getLogger(__name__)
POLL_SECONDS = 1.0


@dataclass(frozen=True)
class Binding:
    consumers: frozenset[str]
    """The durable consumers the worker pulls."""
    track: str
    """What it serves, for its announcement: ``candidate`` or ``baseline``."""


def baseline_only(stage: str) -> Binding:
    """The baseline's queues alone: with no rollout, or until it can be read."""
    return Binding(frozenset(consumer_name(stage, p) for p in PRIORITIES), BASELINE)


def binding(stage: str, version: str, rollout: StageRollout | None) -> Binding:
    """What a worker of ``version`` pulls while ``rollout`` is its stage's latest."""
    baseline = baseline_only(stage).consumers
    both = baseline | {candidate_consumer_name(stage)}
    if rollout is None:  # no rollout ever: nothing waits on a candidate subject
        return baseline_only(stage)
    if not rollout.candidate_version:
        return Binding(both, BASELINE)
    if version != rollout.candidate_version:
        return Binding(baseline if rollout.state == CANARY else both, BASELINE)
    if rollout.state == CANARY:
        return Binding(frozenset({candidate_consumer_name(stage)}), CANDIDATE)
    if rollout.state == ROLLED_BACK:
        return Binding(frozenset(), CANDIDATE)
    return Binding(both, BASELINE)  # promoted: the candidate is the baseline now


class TrackBinder:
    """Keeps a stage worker bound by its stage's rollout, read every second."""

    def __init__(
        self,
        board: RolloutBoard,
        worker: WorkQueueWorker,
        *,
        stage: Stage,
        version: str,
        on_track: Callable[[str], None] | None = None,
        on_rollout: Callable[[StageRollout | None], None] | None = None,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self._board = board
        self._worker = worker
        self._stage = stage
        self._version = version
        self._on_track = on_track
        self._on_rollout = on_rollout
        self._poll_seconds = poll_seconds
        self._current: Binding | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def current(self) -> Binding | None:
        return self._current

    async def refresh(self) -> Binding:
        """Read the rollout and bind by it; on a failed read keep the binding
        in force (the first read falls back to the baseline's queues only)."""
        try:
            rollout = await self._board.read()
        except Exception:  # noqa: BLE001 - NATS away: keep what is bound
            log.warning("rollout entry of %s not read; binding kept", self._stage.name)
            if self._current is not None:
                return self._current
            wanted = baseline_only(self._stage.name)
        else:
            wanted = binding(self._stage.name, self._version, rollout)
            if self._on_rollout is not None:
                self._on_rollout(rollout)
        if wanted != self._current:
            self._worker.bind(wanted.consumers)
            if self._current is not None:
                log.info(
                    "%s worker now serves the %s track (%d consumers)",
                    self._stage.name,
                    wanted.track,
                    len(wanted.consumers),
                )
            self._current = wanted
            if self._on_track is not None:
                self._on_track(wanted.track)
        return wanted

    def start(self) -> None:
        self._task = asyncio.create_task(self._every_poll(), name="track-binder")

    async def _every_poll(self) -> None:
        while True:
            await asyncio.sleep(self._poll_seconds)
            await self.refresh()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
