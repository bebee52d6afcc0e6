"""The rollout records, made true on the queues.

For every stage that has had a rollout, admission keeps two things in step
with that stage's newest rollout record:

- the stage's candidate consumer's ``max_ack_pending`` is the rollout's
  concurrency cap, so no more candidate-track deliveries are ever in flight
  at once, whatever the candidate's workers do; it is set *before* the
  workers are told, so a raised cap never shows before its rollout;
- the stage's entry in the ``quire_rollouts`` bucket (``quire.rolloutboard``),
  which the stage's workers bind their queues by (``quire.workqueue.routing``).

``sync`` runs right after an operator starts, promotes or rolls back a
rollout, and again every few seconds, so a crash between the database's
commit and the queues' update is made good by any admission replica.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from nats.js import JetStreamContext
from sqlalchemy import Connection

from quire.admission.rollouts import records as rollouts
from quire.rolloutboard import CANARY, PROMOTED, ROLLED_BACK, RolloutBoardWriter, StageRollout
from quire.settings import QueueSettings
from quire.workqueue import WORK_STREAM
from quire.workqueue.topology import candidate_consumer_config, candidate_consumer_name

__all__ = ["RolloutSync", "stage_rollout"]

log = logging.getLogger(__name__)
SYNC_SECONDS = 5.0
_BOARD_STATES = {
    rollouts.CANARY: CANARY,
    rollouts.PROMOTED: PROMOTED,
    rollouts.ROLLED_BACK: ROLLED_BACK,
}


def stage_rollout(record: rollouts.RolloutRecord) -> StageRollout:
    return StageRollout(
        stage=record.stage,
        rollout=record.name,
        state=_BOARD_STATES[record.state],
        candidate_version=record.candidate_version,
        candidate_ruleset=record.candidate_ruleset,
        concurrency_cap=record.concurrency_cap,
    )


class RolloutSync:
    """Puts each stage's newest rollout on the queues: its candidate consumer's cap,
    then its ``quire_rollouts`` entry. Safe to run again at any time."""

    def __init__(
        self,
        js: JetStreamContext,
        board: RolloutBoardWriter,
        transaction: Callable[[Callable[[Connection], Any]], Any],
        queue: QueueSettings,
    ) -> None:
        self._js = js
        self._board = board
        self._transaction = transaction
        self._queue = queue
        self._lock = asyncio.Lock()

    async def sync(self) -> int:
        """Bring every stage's cap and entry in step with its newest rollout;
        how many entries changed."""
        async with self._lock:
            latest: tuple[rollouts.RolloutRecord, ...] = await asyncio.to_thread(
                self._transaction, rollouts.latest_per_stage
            )
            changed = 0
            for record in latest:
                wanted = stage_rollout(record)
                await self._cap(wanted)
                if await self._board.current(wanted.stage) != wanted.to_json():
                    await self._board.put(wanted)
                    changed += 1
                    log.info(
                        "rollout entry written",
                        extra={"stage": wanted.stage, "rollout": wanted.rollout},
                    )
            return changed

    async def _cap(self, rollout: StageRollout) -> None:
        info = await self._js.consumer_info(WORK_STREAM, candidate_consumer_name(rollout.stage))
        if info.config.max_ack_pending == rollout.concurrency_cap:
            return
        await self._js.add_consumer(
            WORK_STREAM,
            candidate_consumer_config(self._queue, rollout.stage, rollout.concurrency_cap),
        )

    async def run_forever(self, every: float = SYNC_SECONDS) -> None:
        while True:
            try:
                await self.sync()
            except Exception as error:  # noqa: BLE001 - NATS or the database away: next time
                log.warning("rollouts not synced (%s); trying again", type(error).__name__)
            await asyncio.sleep(every)
