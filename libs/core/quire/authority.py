"""The stages after validation ask audit before they act.

A task's signature says which service sent it, not that the job is where the
task says. A taken-over validator or assembler can sign tasks for a job that
was rejected, cancelled or never accepted, or for another tenant's job. So
the assembler and the signer ask audit (``GetJob``, a signed call) for the
job's recorded history before any work, and act only when:

- audit knows the job, and its tenant and manifest digest are the task's
  (the tenant comes from audit's answer, never from the task alone);
- the job has reached the stage: the validator handed it to assembly, or the
  assembler to signing;
- the job has not ended: no rejection, cancellation, failure or completion
  is recorded.

Audit also pushes its word as it records a job reaching the stage
(``quire.auditword``); a fresh, genuine word that shows the job at the stage
for the task's tenant and manifest confirms the task without the call. The
word only ever confirms: without one, or with one that does not, the stage
asks as below.

A job audit does not know yet, or one not yet at the stage, may be a step
whose events audit has still to record, and audit may be restarting: the
delivery asks again, with backoff, for up to ``patience_seconds`` (the
worker keeps the message's lease meanwhile), then the task is delivered
again later (``AuthorityNotYet``, transient). A task that contradicts the record, or a
job that ended, is refused with no step recorded (``ForgedMessage``,
``JobEnded``): the refusal changes nothing about the victim's job.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

import grpc

from quire.audit.v1 import audit_service_pb2
from quire.auditword import WORD_WAIT_SECONDS, AuditWord
from quire.errors import TransientError
from quire.jobs import TERMINAL_STATES, state_name, state_rank
from quire.pipeline import Stage
from quire.reasons import ReasonCode
from quire.type import job_pb2, queue_pb2
from quire.wire import ForgedMessage

__all__ = ["JobAuthority", "JobEnded", "AuthorityNotYet", "ASK_TIMEOUT_SECONDS", "NOT_YET_SECONDS"]

ASK_TIMEOUT_SECONDS = 5.0
NOT_YET_SECONDS = 1.0
"""When a task still ahead of audit's record after the patience is delivered again."""
FIRST_PAUSE_SECONDS = 0.05
LONGEST_PAUSE_SECONDS = 1.0


class JobEnded(Exception):
    """Audit records the job ended: no step may follow."""

    def __init__(self, state: str) -> None:
        super().__init__(state)
        self.state = state


class AuthorityNotYet(TransientError):
    """Audit has not recorded the job, or its arrival at this stage, yet."""

    def __init__(self, message: str) -> None:
        super().__init__(ReasonCode.DEPENDENCY_UNAVAILABLE, message, retry_after=NOT_YET_SECONDS)


class AuditJobs(Protocol):
    async def GetJob(  # noqa: N802 - gRPC method name
        self, request: audit_service_pb2.GetJobRequest, *, timeout: float, wait_for_ready: bool
    ) -> job_pb2.Job: ...


class JobAuthority:
    """Audit's word on a job, asked once per delivery."""

    def __init__(
        self,
        audit: AuditJobs,
        stage: Stage,
        *,
        patience_seconds: float = 30.0,
        word: AuditWord | None = None,
        word_wait_seconds: float = WORD_WAIT_SECONDS,
        confirmed: Callable[[str], None] | None = None,
    ) -> None:
        """``confirmed`` hears how each task was confirmed: ``word`` or ``asked``."""
        self._audit = audit
        self._stage = stage
        self._patience = patience_seconds
        self._word = word
        self._word_wait = word_wait_seconds
        self._confirmed = confirmed or (lambda _by: None)

    async def confirm(self, task: queue_pb2.JobTask) -> None:
        """Return when ``task`` may be worked on now: audit's word says so, or
        audit answers so, asked again with backoff while it is behind or away."""
        if self._word is not None and await self._word.confirms(task, wait_seconds=self._word_wait):
            self._confirmed("word")
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._patience
        pause = FIRST_PAUSE_SECONDS
        while True:
            try:
                await self._ask(task)
                self._confirmed("asked")
                return
            except TransientError:
                if loop.time() + pause > deadline:
                    raise
            await asyncio.sleep(pause)
            pause = min(pause * 2, LONGEST_PAUSE_SECONDS)

    async def _ask(self, task: queue_pb2.JobTask) -> job_pb2.Job:
        try:
            job = await self._audit.GetJob(
                audit_service_pb2.GetJobRequest(name=task.job),
                timeout=ASK_TIMEOUT_SECONDS,
                wait_for_ready=True,
            )
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.NOT_FOUND:
                raise AuthorityNotYet("audit has not recorded the job") from None
            raise TransientError(ReasonCode.DEPENDENCY_UNAVAILABLE, "audit unavailable") from None
        if job.tenant != task.tenant or job.manifest_digest != task.manifest_digest:
            raise ForgedMessage("task does not match the job audit recorded")
        state = state_name(job.state)
        if state in TERMINAL_STATES:
            raise JobEnded(state)
        if state_rank(state) < state_rank(self._stage.waiting):
            raise AuthorityNotYet("audit has not recorded the job at this stage")
        return job
