"""Deferred deliveries: a task that must wait is stored as a scheduled copy and
acknowledged, so the wait holds none of its consumer's ``max_ack_pending``.

JetStream keeps a message that was negatively acknowledged with a delay in
its consumer's pending set until it is delivered again, and a stage's limit
*is* that consumer's ``max_ack_pending`` (``quire.workqueue.topology``). A
job that waits ten seconds for its tenant's source system would hold one of
the stage's slots all that time, and a handful of them would stall every
other tenant's jobs. A deferred task is instead published again as a
JetStream scheduled message (nats-server 2.12+, the work stream allows
them):

    quire.work.deferred.<stage>.<priority>.<key>
        Nats-Schedule: @at <due, whole seconds, UTC>
        Nats-Schedule-Target: <the subject it came on>
        Quire-Prior-Deliveries: <deliveries so far>
        ... and every header it came with (its producer's signature, its
        trace context), except its ``Nats-Msg-Id``

and only once the stream has stored that copy is the delivery acknowledged.
At the due time the server publishes the copy on the original subject, with
the original headers: the same signed bytes on the same subject, so the
consumer verifies it as it verified the first, and the trace goes on.

- **Nothing lost.** The copy is stored before the ack; if storing it fails,
  the delivery is nak'ed with the same delay instead (the slot is held, the
  task is kept). A crash between the store and the ack delivers the task
  again after its ack wait and a second copy may fire: a duplicate, which the
  stage's lease and committed outcome absorb like any redelivery.
- **Attempts carry over.** The copy is a new message whose delivery count
  starts at one; ``Quire-Prior-Deliveries`` carries the deliveries before it,
  so ``attempt`` (and every limit on it) counts the job's deliveries to the
  stage, not the copy's. The header is not signed: a publisher with rights
  on the work stream (only Quire's services hold them) could change it.
  Lowered, it lets a job wait once more, within its deadline; raised, it
  ends the job sooner (RETRY_LIMIT_REACHED or SOURCE_UNAVAILABLE). Neither
  forges a step: the task's bytes and signature are the producer's.
- **One schedule per task.** ``<key>`` is a digest of the task's bytes, so
  every copy of one task is one schedule subject; the copy's own
  ``Nats-Msg-Id`` names the delivery count, so a publish retried within one
  delivery is stored once.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.errors import Error as JetStreamError

__all__ = [
    "DEFERRED_PREFIX",
    "PRIOR_DELIVERIES_HEADER",
    "Deferrals",
    "deferred_subject",
    "prior_deliveries",
]

log = logging.getLogger(__name__)

DEFERRED_PREFIX = "quire.work.deferred"
PRIOR_DELIVERIES_HEADER = "Quire-Prior-Deliveries"
_DROPPED_HEADERS = frozenset(
    {"Nats-Msg-Id", "Nats-Schedule", "Nats-Schedule-Target", "Nats-Scheduler", "Nats-Schedule-Next"}
)


def deferred_subject(subject: str, payload: bytes) -> str:
    """The schedule subject of a task delivered on ``subject`` (``quire.work.
    <stage>.<priority>[.candidate]``): under the stage and class it came from,
    named by a digest of its bytes."""
    parts = subject.split(".")
    stage, priority = (parts[2], parts[3]) if len(parts) >= 4 else ("unknown", "unknown")
    key = hashlib.sha256(subject.encode() + b"\0" + payload).hexdigest()[:32]
    return f"{DEFERRED_PREFIX}.{stage}.{priority}.{key}"


def prior_deliveries(headers: Mapping[str, str] | None) -> int:
    """Deliveries of this task before the message that carries ``headers``."""
    if not headers:
        return 0
    try:
        return max(0, int(headers.get(PRIOR_DELIVERIES_HEADER, "0")))
    except ValueError:
        return 0


class Deferrals:
    """Stores deferred copies on the stream the deliveries come from."""

    def __init__(self, js: JetStreamContext, *, timeout: float = 10.0) -> None:
        self._js = js
        self._timeout = timeout

    async def defer(self, msg: Msg, delay_seconds: float) -> bool:
        """Store a copy of ``msg`` due in ``delay_seconds`` (rounded up to the
        next whole second); whether it was stored."""
        deliveries = prior_deliveries(msg.headers) + msg.metadata.num_delivered
        due = datetime.now(UTC) + timedelta(seconds=max(0.0, delay_seconds))
        due = due.replace(microsecond=0) + timedelta(seconds=1 if due.microsecond else 0)
        subject = deferred_subject(msg.subject, msg.data)
        headers = {k: v for k, v in (msg.headers or {}).items() if k not in _DROPPED_HEADERS}
        headers.update(
            {
                "Nats-Msg-Id": f"{subject.rsplit('.', 1)[1]}.d{deliveries}",
                "Nats-Schedule": f"@at {due.strftime('%Y-%m-%dT%H:%M:%SZ')}",
                "Nats-Schedule-Target": msg.subject,
                PRIOR_DELIVERIES_HEADER: str(deliveries),
            }
        )
        try:
            await self._js.publish(subject, msg.data, timeout=self._timeout, headers=headers)
        except (NatsError, JetStreamError, TimeoutError) as error:
            log.warning("deferred copy not stored (%s); nak'ed instead", type(error).__name__)
            return False
        return True
