"""Completion: the only way a job becomes COMPLETED.

Audit takes the commit task, hashes the signed artifact that the signer
reported, and then, in one transaction, appends the signer's events the task
carries (judged as the events consumer judges any), checks that the ledger
holds the job's whole history (ACCEPTED through COMMITTING) with the same
output digest, takes the delivery's lease token and appends the COMPLETED
entry.
Missing history is not an error: the events are late, so the task is retried
with backoff and the job stays COMMITTING. A missing or different artifact
ends the job FAILED.

The token is taken in the transaction that decides, so no other delivery's
can come between them; a delivery that finds the job ended (another one
completed it) appends nothing. The entry appended is handed to the job's
watches as it is (``HistoryWatch.appended``), so they need not read it back.
"""

from __future__ import annotations

import asyncio
import logging
from enum import Enum

from nats.aio.msg import Msg
from opentelemetry import trace
from sqlalchemy import Connection, bindparam, select

from quire.audit import ledger, tables
from quire.audit.history import HistoryWatch, grew
from quire.audit.measures import AuditMeasures
from quire.audit.recorder import EventRecorder
from quire.audit.writes import AuditWrites
from quire.blobstore import BlobStore
from quire.database import Database
from quire.driversql import DriverStatement
from quire.errors import PermanentError
from quire.faults import fault_point
from quire.jobs import HISTORY_BEFORE_COMPLETION, TERMINAL_STATES
from quire.leases import Lease, LeaseStore, lease_key
from quire.pipeline import State
from quire.reasons import ReasonCode
from quire.settings import QueueSettings
from quire.taskbinding import read_task
from quire.telemetry import extract_context
from quire.transitions import EventFactory
from quire.type import queue_pb2
from quire.wire import ForgedMessage
from quire.workqueue.settle import ACK, LEAVE, TERM, Settlement, retry, settle

__all__ = ["CompletionDesk", "Verdict"]

_Entry = tuple[int | None, tuple[int, bytes]]
"""An appended entry (sequence, bytes), with the sequence of the job's entry before it."""

log = logging.getLogger(__name__)


# Built once: every completion runs them.
_STATE = DriverStatement(select(tables.jobs.c.state).where(tables.jobs.c.job == bindparam("job")))
_HISTORY = DriverStatement(
    select(tables.ledger.c.to_state, tables.ledger.c.event)
    .where(tables.ledger.c.job == bindparam("job"))
    .order_by(tables.ledger.c.sequence)
)
"""The job's entries: which states it passed, and the signer's report (the
last COMMITTING entry), in one read."""


class Verdict(Enum):
    """What one delivery of a commit task came to, which decides how it is settled:
    COMPLETED and ALREADY_DONE are acked, HISTORY_INCOMPLETE retried, STALE left
    to the newer delivery, FAILED (the job ended FAILED) terminated."""

    COMPLETED = "completed"
    STALE = "stale"
    ALREADY_DONE = "already_done"
    HISTORY_INCOMPLETE = "history_incomplete"
    FAILED = "failed"


class CompletionDesk:
    """Audit's consumer of commit tasks: appends COMPLETED (or FAILED) to a job's
    ledger once its whole history is there, fenced by the delivery's lease."""

    def __init__(
        self,
        *,
        database: Database,
        blobs: BlobStore,
        events: EventFactory,
        queue: QueueSettings,
        history: HistoryWatch | None = None,
        history_wait_seconds: float = 5.0,
        measures: AuditMeasures | None = None,
        writes: AuditWrites | None = None,
        recorder: EventRecorder | None = None,
    ) -> None:
        """``recorder`` records the events a commit task carries (the
        signer's, riding on it); without one they are not read."""
        self._recorder = recorder
        self._measures = measures
        self._db = database
        self._writes = writes or AuditWrites(database)
        """Shared with the events recorder: completions, their leases and
        recorded events commit together."""
        self._history = history or HistoryWatch()
        self._history_wait = history_wait_seconds
        self.leases = LeaseStore(database, tables.leases, writes=self._writes)
        self._blobs = blobs
        self._events = events
        self._backoff = queue.backoff
        self._tracer = trace.get_tracer("quire.audit")

    async def handle(self, msg: Msg) -> None:
        await settle(msg, await self._deliver(msg))

    async def _deliver(self, msg: Msg) -> Settlement:
        try:
            task, ident = read_task(msg.data)
        except ForgedMessage as refused:
            log.warning("commit task refused: %s", refused.message)
            return TERM
        attempt = msg.metadata.num_delivered
        with self._tracer.start_as_current_span(
            "audit.complete",
            context=extract_context(msg.headers),
            attributes={"quire.job": ident, "quire.attempt": attempt},
        ) as span:
            try:
                refusal = await self._refusal(task)
                verdict = await self._complete_when_evident(task, attempt, refusal, msg)
            except Exception as error:  # noqa: BLE001 - database or storage trouble: retry
                log.warning("job %s: completion check failed (%s)", task.job, type(error).__name__)
                return retry(self._backoff, attempt, error)
            span.set_attribute("quire.verdict", verdict.value)
            if verdict is Verdict.COMPLETED:
                log.info("job completed", extra={"job": ident, "tenant": task.tenant})
                if self._measures is not None:
                    self._measures.completed(task.priority)
        if verdict is Verdict.HISTORY_INCOMPLETE:
            return retry(self._backoff, attempt)
        if verdict is Verdict.STALE:
            return LEAVE  # a newer delivery of this task owns it
        if verdict is Verdict.FAILED:
            return TERM
        fault_point("audit.after_commit")
        return ACK

    async def _complete_when_evident(
        self,
        task: queue_pb2.JobTask,
        attempt: int,
        refusal: ReasonCode | None,
        carried: Msg | None = None,
    ) -> Verdict:
        """Complete, waiting (bounded) for late events of this job's history;
        each try takes its own lease token in the transaction that decides.
        ``carried``: the delivery of ``task``, whose events (the signer's,
        riding on it) each try appends first, in the transaction that decides."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._history_wait
        # Watched from before the first read: events another replica records
        # while this one reads are heard, not waited out.
        with self._history.watching(task.job) as grown:
            verdict = await self._judged(task, attempt, None, refusal, carried)
            while verdict is Verdict.HISTORY_INCOMPLETE:
                remaining = deadline - loop.time()
                if remaining <= 0 or not await grew(grown, remaining):
                    return verdict
                # The artifact was checked above; only the history can have changed.
                verdict = await self._judged(task, attempt, None, None, carried)
        return verdict

    async def complete(self, task: queue_pb2.JobTask, attempt: int, lease: Lease) -> Verdict:
        """Complete the job if the evidence is all there, fenced by ``lease``
        (taken earlier: STALE if another delivery has taken a token since)."""
        return await self._judged(task, attempt, lease, await self._refusal(task))

    async def _refusal(self, task: queue_pb2.JobTask) -> ReasonCode | None:
        """Why the reported artifact cannot complete the job, or None when its
        bytes are there and hash to the reported digest."""
        if not task.signed.blob_key:
            return ReasonCode.ARTIFACT_MISSING
        try:
            # The artifact is sealed at rest: decrypted (and authenticated) to hash it.
            digest, _size = await asyncio.to_thread(self._blobs.digest, task.signed.blob_key)
        except (IsADirectoryError, PermanentError) as error:
            if isinstance(error, PermanentError) and error.reason is ReasonCode.DIGEST_MISMATCH:
                return ReasonCode.ARTIFACT_DIGEST_MISMATCH
            return ReasonCode.ARTIFACT_MISSING
        if digest != task.signed.sha256:
            return ReasonCode.ARTIFACT_DIGEST_MISMATCH
        return None

    async def _judged(
        self,
        task: queue_pb2.JobTask,
        attempt: int,
        lease: Lease | None,
        refusal: ReasonCode | None,
        carried: Msg | None = None,
    ) -> Verdict:
        """One try, in one transaction: with ``lease`` None, the token is taken
        in it, once the job is found still open and (unless refused) its
        history whole. A try that decides nothing (the job ended, or its last
        events are still on the way) takes no token. With ``carried`` (the
        task's delivery), the events the
        task carries are judged and appended first, in the same transaction
        (``EventRecorder.record_carried``); when one is not its producer's to
        make, none of them is, and the try goes on without them."""
        if refusal is not None:
            log.warning("job %s: completion refused (%s)", task.job, refusal)
        else:
            fault_point("audit.before_commit")

        def decide(connection: Connection) -> tuple[Verdict, list[_Entry]]:
            row = _STATE.first(connection, {"job": task.job})
            if row is not None and row.state in TERMINAL_STATES:
                return Verdict.ALREADY_DONE, []
            reported = None if refusal is not None else self._reported(connection, task)
            if refusal is None and reported is None:
                log.info("job %s: history incomplete, completion deferred", task.job)
                return Verdict.HISTORY_INCOMPLETE, []
            held = lease or self.leases.acquire_in(connection, lease_key(task.job, task.generation))
            if reported is not None and reported.output_digest != task.signed.sha256:
                refused: str = ReasonCode.ARTIFACT_DIGEST_MISMATCH
            else:
                refused = refusal or ""
            return self._end(connection, task, attempt, held, refused)

        if carried is not None and task.events and self._recorder is not None:
            decided = await self._recorder.record_carried(
                list(task.events), carried, decide, tenant=task.tenant
            )
            if decided is None:
                # An event its producer may not make, refused before the ledger
                # was asked (and logged), as the events consumer refuses one: the
                # task goes on without it, as it would had it never come.
                verdict, entries = await self._writes.run(decide, tenant=task.tenant)
            else:
                verdict, entries = decided
        else:
            verdict, entries = await self._writes.run(decide, tenant=task.tenant)
        if entries:
            self._history.appended(task.job, entries)
        return verdict

    @staticmethod
    def _reported(
        connection: Connection, task: queue_pb2.JobTask
    ) -> queue_pb2.TransitionEvent | None:
        """The signer's COMMITTING event, once the ledger holds the job's whole
        history before completion; None while any of it is missing."""
        history = _HISTORY.rows(connection, {"job": task.job})
        if not set(HISTORY_BEFORE_COMPLETION) <= {row.to_state for row in history}:
            return None
        reported = next(row.event for row in reversed(history) if row.to_state == State.COMMITTING)
        return queue_pb2.TransitionEvent.FromString(reported)

    def _end(
        self,
        connection: Connection,
        task: queue_pb2.JobTask,
        attempt: int,
        lease: Lease,
        reason: str,
    ) -> tuple[Verdict, list[_Entry]]:
        """Append COMPLETED (no reason) or FAILED, fenced by this delivery's
        lease; the entry appended, with the sequence of the job's one before."""
        if not self.leases.complete_in(connection, lease, queue_pb2.StageOutcome()):
            return Verdict.STALE, []
        state = State.FAILED if reason else State.COMPLETED
        ending = self._ending(task, attempt, lease, state, reason)
        (outcome,) = ledger.record_many(
            connection, [ledger.Arrival(ending, producer="audit", judged=False)]
        )
        entries = [] if outcome.entry is None else [(outcome.previous, outcome.entry)]
        return (Verdict.FAILED if reason else Verdict.COMPLETED), entries

    def _ending(
        self, task: queue_pb2.JobTask, attempt: int, lease: Lease, state: str, reason: str
    ) -> queue_pb2.TransitionEvent:
        return self._events.transition(
            task,
            State.COMMITTING,
            state,
            attempt=attempt,
            lease_token=lease.token,
            reason_code=reason,
            output_digest=task.signed.sha256,
            key_version=task.signing.key_version,
            certificate_sha256=task.signing.certificate_sha256,
            signer_identity=task.signing.signer_identity,
            signature_level=task.signing.level,
        )
