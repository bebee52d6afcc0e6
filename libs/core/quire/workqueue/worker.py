"""The pull loop shared by every stage: bounded concurrency, heartbeats, drain.

An idle loop waits in a long-poll pull request for one message (a lingering
request for a batch could deliver more than there are slots), so no message
waits unleased in a local buffer. When a delivery says more messages wait
behind it, the loop takes them as a group: one pull request for as many as
wait and there are free slots, answered at once with what is there, each
message still its own delivery, handled and settled on its own. While a handler runs, the
message's lease is extended with ``in_progress()`` at a third of the ack wait.
The handler owns the outcome (a ``Settlement``, applied by
``quire.workqueue.settle``); the loop only guarantees that a handler crash
leaves the message to be redelivered.

With a ``verifier``, every message must carry a valid signature of a service
allowed to produce on its subject (``quire.wire``); a forged one is
terminated and counted before any handler sees it. JetStream's own advisories
(``$JS.EVENT.>``, which no Quire credential may publish) are exempt.

An optional pull gate (a stage's temporary-space budget, say) is awaited
before every pull: while it is closed nothing new is taken, and the work
already in hand goes on to finish.

A handler about to wait a long time on work that is not the stage's ordinary
kind (a hostile source in the validator's quarantine lane) may call
``step_aside()``: its slot goes back to the loop, which pulls the next
message, so ordinary work never queues behind it. The message stays leased
and heartbeated until the handler settles it; what bounds such handlers is the
caller's own (the quarantine lane's slots).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext

from quire.wire import ForgedMessage, WireVerifier
from quire.workqueue.settle import TERM, Action, Settlement, settle

__all__ = ["WorkQueueWorker", "Handler", "PullGate", "step_aside"]

log = logging.getLogger(__name__)

Handler = Callable[[Msg], Awaitable[None]]
ERROR_PAUSE_SECONDS = 0.5
GROUP_FETCH_SECONDS = 0.1
"""How long a pull for messages known to be waiting may take (another
replica may have taken them meanwhile)."""
MAX_GROUP = 16
"""Messages one group pull asks for at most."""


def _waiting_behind(message: Msg) -> int:
    """How many messages the consumer held for delivery behind this one."""
    try:
        return int(message.metadata.num_pending or 0)
    except Exception:  # noqa: BLE001 - not a JetStream delivery: nothing known
        return 0


class _Slot:
    """One pull slot held by one handler; given back once, whoever does it first."""

    def __init__(self, slots: asyncio.Semaphore) -> None:
        self._slots = slots
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._slots.release()


_current_slot: contextvars.ContextVar[_Slot | None] = contextvars.ContextVar(
    "quire_pull_slot", default=None
)


def step_aside() -> bool:
    """Give the calling handler's pull slot back to its loop (see the module
    docstring). True if a slot was held; a no-op outside a handler."""
    slot = _current_slot.get()
    if slot is None:
        return False
    slot.release()
    return True


class PullGate(Protocol):
    """Decides whether the worker may take new messages."""

    async def wait_open(self) -> None:
        """Return once new work may be pulled; must be cheap when open."""

    def is_open(self) -> bool:
        """Whether new work may be pulled now (a group pull asks, never waits)."""


class WorkQueueWorker:
    """Pulls from durable consumers, each with its own reserved capacity, or
    sharing another's (``shared``: consumer -> the consumer whose slots it
    takes). ``bind`` changes which of them are pulled while it runs."""

    def __init__(
        self,
        js: JetStreamContext,
        *,
        stream: str,
        consumers: dict[str, int],
        handler: Handler,
        ack_wait_seconds: float,
        fetch_timeout_seconds: float = 5.0,
        pull_gate: PullGate | None = None,
        verifier: WireVerifier | None = None,
        shared: Mapping[str, str] | None = None,
    ) -> None:
        self._js = js
        self._stream = stream
        self._slots = {name: asyncio.Semaphore(capacity) for name, capacity in consumers.items()}
        for name, owner in (shared or {}).items():
            self._slots[name] = self._slots[owner]
        self._bound: set[str] = set(self._slots)
        self._started = False
        self._handler = handler
        self._heartbeat_seconds = max(ack_wait_seconds / 3.0, 0.2)
        self._fetch_timeout = fetch_timeout_seconds
        self._pull_gate = pull_gate
        self._verifier = verifier
        self._stopping = asyncio.Event()
        self._loops: dict[str, asyncio.Task[None]] = {}
        self._inflight: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._started = True
        self._pull_bound()

    def bind(self, consumers: Iterable[str]) -> None:
        """Pull exactly ``consumers`` (each one of this worker's) from now on:
        a consumer no longer bound stops pulling at once; its messages in
        hand go on to be settled."""
        wanted = set(consumers)
        unknown = wanted - set(self._slots)
        if unknown:
            raise ValueError(f"not this worker's consumers: {sorted(unknown)}")
        self._bound = wanted
        if self._started and not self._stopping.is_set():
            self._pull_bound()

    def _pull_bound(self) -> None:
        for consumer in list(self._loops):
            if consumer not in self._bound:
                self._loops.pop(consumer).cancel()
        for consumer in sorted(self._bound - set(self._loops)):
            slots = self._slots[consumer]
            self._loops[consumer] = asyncio.create_task(
                self._pull_loop(consumer, slots), name=consumer
            )

    @property
    def bound(self) -> frozenset[str]:
        return frozenset(self._bound)

    async def drain(self) -> None:
        """Stop pulling, then wait for in-flight handlers to finish."""
        self._stopping.set()
        loops = list(self._loops.values())
        for loop in loops:
            loop.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        if self._inflight:
            await asyncio.gather(*self._inflight, return_exceptions=True)

    async def halt(self) -> None:
        """Stop pulling at once and cancel the handlers still running, their
        deliveries left to be redelivered: for a drain that ran out of time
        (or never reached ``drain``), so the process still ends."""
        self._stopping.set()
        tasks = [*self._loops.values(), *self._inflight]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _pull_loop(self, consumer: str, slots: asyncio.Semaphore) -> None:
        subscription = await self._js.pull_subscribe_bind(durable=consumer, stream=self._stream)
        try:
            await self._pull(consumer, slots, subscription)
        finally:
            try:
                await subscription.unsubscribe()
            except Exception:  # noqa: BLE001 - disconnected, or already gone
                pass

    async def _pull(self, consumer: str, slots: asyncio.Semaphore, subscription: Any) -> None:
        while not self._stopping.is_set():
            await slots.acquire()
            try:
                if self._pull_gate is not None:
                    await self._pull_gate.wait_open()
                (message,) = await subscription.fetch(batch=1, timeout=self._fetch_timeout)
            except (NatsTimeoutError, TimeoutError):
                slots.release()
                continue
            except asyncio.CancelledError:
                slots.release()
                raise
            except Exception:  # noqa: BLE001 - disconnected; the client reconnects
                log.warning("pull from %s failed; retrying", consumer)
                slots.release()
                await asyncio.sleep(ERROR_PAUSE_SECONDS)
                continue
            self._start(message, slots)
            await self._pull_group(consumer, slots, subscription, _waiting_behind(message))

    async def _pull_group(
        self, consumer: str, slots: asyncio.Semaphore, subscription: Any, waiting: int
    ) -> None:
        """Take the ``waiting`` messages as groups: one pull for as many as
        there are free slots, until none wait or no slot is free."""
        while waiting > 0 and not self._stopping.is_set():
            if self._pull_gate is not None and not self._pull_gate.is_open():
                return
            taken = 0
            while taken < min(waiting, MAX_GROUP) and not slots.locked():
                await slots.acquire()  # free: returns at once
                taken += 1
            if taken == 0:
                return  # every slot busy: the long poll takes the next one
            try:
                messages = await subscription.fetch(batch=taken, timeout=GROUP_FETCH_SECONDS)
            except asyncio.CancelledError:
                for _ in range(taken):
                    slots.release()
                raise
            except Exception:  # noqa: BLE001 - none after all (another replica took them)
                messages = []
            for message in messages:
                self._start(message, slots)
            for _ in range(taken - len(messages)):
                slots.release()
            if not messages:
                return
            waiting = _waiting_behind(messages[-1])

    def _start(self, message: Msg, slots: asyncio.Semaphore) -> None:
        """Handle ``message`` in its own task, holding one of ``slots``."""
        task = asyncio.create_task(self._run(message, slots))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def _run(self, message: Msg, slots: asyncio.Semaphore) -> None:
        heartbeat = asyncio.create_task(self._heartbeat(message))
        slot = _Slot(slots)
        _current_slot.set(slot)  # this task's own context
        try:
            if self._pull_gate is not None and not await self._gate_opened():
                # Draining: not started, so let another worker have it now.
                await settle(message, Settlement(Action.RETRY))
                return
            if not self._genuine(message):
                await settle(message, TERM)
                return
            await self._handler(message)
        except Exception as error:  # noqa: BLE001 - the message is redelivered after ack wait
            # The type only: exception text may carry document content.
            log.error("handler failed (%s); message left for redelivery", type(error).__name__)
        finally:
            heartbeat.cancel()
            slot.release()

    def _genuine(self, message: Msg) -> bool:
        if self._verifier is None or message.subject.startswith("$JS.EVENT."):
            return True
        try:
            self._verifier.producer(message.subject, message.data, message.headers)
        except ForgedMessage:
            return False
        return True

    async def _gate_opened(self) -> bool:
        """Wait until the pull gate opens; False if the worker drains first.

        A long-poll pull placed while the gate was open can deliver after it
        closed: that message is held (leased, heartbeated, not started).
        """
        assert self._pull_gate is not None
        if self._pull_gate.is_open():
            return True  # the common case, without the two tasks a wait costs
        opened = asyncio.create_task(self._pull_gate.wait_open())
        stopping = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait({opened, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            opened.cancel()
            stopping.cancel()
        return opened.done() and not opened.cancelled()

    async def _heartbeat(self, message: Msg) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_seconds)
            try:
                await message.in_progress()
            except Exception:  # noqa: BLE001 - lost connection; the lease may lapse
                log.warning("heartbeat failed")
