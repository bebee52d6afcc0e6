"""News between audit replicas: which jobs' histories grew.

A replica's own appends wake its watches and its waiting completions at
once (``LedgerNotices``). With several replicas sharing one ledger, another
replica's appends would wake them only at the next poll (``WatchJob``,
``QUIRE_WATCH_POLL_SECONDS``) or when a completion's wait runs out, and a
client watching would see ``COMPLETED`` that much later. So each replica
tells the others, on a core NATS subject under audit's own inbox prefix
(only audit may publish or listen there), the jobs whose history it grew:
one message per turn of its event loop, whatever it appended in that turn.

It is a hint, never evidence: a replica that hears it reads the ledger
again. A lost message costs a poll's delay; nothing is kept.

A replica tells only when another is listening: each says it is there (a
message without jobs) when it starts and every ``presence_seconds``, and
one that has heard no other for three of those keeps its news to itself.
A lone replica, the common case, so sends nothing per append; a replica
that starts is heard by the others, and hears them, within a message each.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from quire.natsauth import inbox_prefix

__all__ = ["ReplicaNews", "NEWS_SUBJECT"]

log = logging.getLogger(__name__)

NEWS_SUBJECT = f"{inbox_prefix('audit')}.ledger"
PRESENCE_SECONDS = 5.0


class ReplicaNews:
    """Publishes this replica's grown histories; hands others' to ``heard``."""

    def __init__(
        self,
        nc: NatsClient,
        instance: str,
        heard: Callable[[str], None],
        *,
        presence_seconds: float = PRESENCE_SECONDS,
    ) -> None:
        self._nc = nc
        self._instance = instance
        self._heard = heard
        self._presence_seconds = presence_seconds
        self._pending: set[str] = set()
        self._flushing = False
        self._others_until = 0.0
        """Until when (monotonic) another replica counts as listening."""
        self._announcing: asyncio.Task[None] | None = None

    @property
    def alone(self) -> bool:
        """No other replica has been heard of late: news would reach no one."""
        return time.monotonic() >= self._others_until

    async def start(self) -> None:
        await self._nc.subscribe(NEWS_SUBJECT, cb=self._receive)
        self._announcing = asyncio.create_task(self._announce_forever())

    def close(self) -> None:
        if self._announcing is not None:
            self._announcing.cancel()

    async def _announce_forever(self) -> None:
        while True:
            await self._send(self._instance.encode())
            await asyncio.sleep(self._presence_seconds)

    def grew(self, job: str) -> None:
        """``job``'s history grew here: tell the others (with this turn's others)."""
        if self.alone:
            return
        self._pending.add(job)
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flushing = False
        jobs, self._pending = self._pending, set()
        payload = "\n".join([self._instance, *sorted(jobs)]).encode()
        asyncio.ensure_future(self._send(payload))

    async def _send(self, payload: bytes) -> None:
        try:
            await self._nc.publish(NEWS_SUBJECT, payload)
        except Exception as error:  # noqa: BLE001 - a hint: the others poll anyway
            log.warning("ledger news not sent (%s)", type(error).__name__)

    async def _receive(self, msg: Msg) -> None:
        sender, *jobs = msg.data.decode(errors="replace").split("\n")
        if sender == self._instance:
            return
        if self.alone and not jobs:  # a replica new to this one: say so back at once
            asyncio.ensure_future(self._send(self._instance.encode()))
        self._others_until = time.monotonic() + 3 * self._presence_seconds
        for job in jobs:
            if job.startswith("jobs/"):
                self._heard(job)
