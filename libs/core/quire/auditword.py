"""Audit's word on a job, pushed to the stage that will ask for it.

Before acting on a task, the assembler and the signer must know that audit
recorded the job at their stage (``quire.authority``). Asking costs a signed
gRPC call and a ledger read per task, and the answer is usually already
decided: audit recorded the hand-off a moment before the task arrived. So
audit, as it records a job reaching such a stage, tells that stage's service
what a ``GetJob`` would have answered then (name, tenant, manifest digest,
state): a ``Job`` signed with audit's identity key, on a core NATS subject in
that service's own inbox, which only that service may read and only audit may
publish to (``quire.natsauth``). Every replica of the service hears every
word and keeps it a short while.

A word is only ever a *yes*: a task whose job audit's fresh, genuine word
shows at the stage, for the task's tenant and manifest, is confirmed without
asking. Anything else — no word (it is best effort: lost, late, or audit
away), a stale one, one that does not verify (checked only when used, so
replicas that never use a word never pay for it), or one that does not match
— sends the stage to ask audit as before, and only an answer to that asking
refuses a task. A word costs audit one signature and one publish per stage
reached.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Mapping

from google.protobuf.message import DecodeError
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from quire.jobs import TERMINAL_STATES, state_name, state_rank
from quire.natsauth import audit_word_subject as word_subject
from quire.pipeline import QUEUED_STAGES, Stage
from quire.type import job_pb2, queue_pb2
from quire.wire import SIGNATURE_HEADER, ForgedMessage, WireSigner, WireVerifier

__all__ = [
    "ASKING_STAGES",
    "AuditWord",
    "WordTeller",
    "WORD_WAIT_SECONDS",
    "word_for",
    "word_subject",
]

log = logging.getLogger(__name__)

ASKING_STAGES: tuple[Stage, ...] = QUEUED_STAGES[1:]
"""The stages that ask audit before acting: every queued stage after validation."""
_WAITING: Mapping[str, Stage] = {s.waiting.value: s for s in ASKING_STAGES}
FRESH_SECONDS = 60.0
"""How long a word stands: tasks are worked within seconds of their hand-off."""
KEPT_WORDS = 4096
"""Words one process keeps at most (the oldest go first)."""
WORD_WAIT_SECONDS = 0.25
"""How long a task's confirmation waits for a word not heard yet before asking."""
_AUDIT = frozenset({"audit"})


def word_for(
    job: str, tenant: str, manifest_digest: str, state: str, signer: WireSigner
) -> tuple[str, bytes, dict[str, str]] | None:
    """(subject, payload, headers) of audit's word that ``job`` is now in
    ``state``, for the stage that waits in it; None when no stage asks then."""
    stage = _WAITING.get(state)
    if stage is None:
        return None
    subject = word_subject(stage.service)
    payload = job_pb2.Job(
        name=job, tenant=tenant, manifest_digest=manifest_digest, state=f"JOB_STATE_{state}"
    ).SerializeToString()
    return subject, payload, {SIGNATURE_HEADER: signer.header(subject, payload)}


class WordTeller:
    """Audit's side: says the word for each job that reached an asking stage."""

    def __init__(self, nc: NatsClient, signer: WireSigner) -> None:
        self._nc = nc
        self._signer = signer
        self._sending: set[asyncio.Task[None]] = set()

    def tell(self, job: str, tenant: str, manifest_digest: str, state: str) -> None:
        """Publish the word if a stage waits in ``state`` (without waiting:
        it is best effort, and the stage asks without it)."""
        word = word_for(job, tenant, manifest_digest, state, self._signer)
        if word is None:
            return
        task = asyncio.create_task(self._send(*word))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, subject: str, payload: bytes, headers: dict[str, str]) -> None:
        try:
            await self._nc.publish(subject, payload, headers=headers)
        except Exception as error:  # noqa: BLE001 - the stage asks audit instead
            log.warning("audit's word not sent (%s)", type(error).__name__)


class _Heard:
    __slots__ = ("at", "headers", "payload")

    def __init__(self, payload: bytes, headers: dict[str, str], at: float) -> None:
        self.payload = payload
        self.headers = headers
        self.at = at


class AuditWord:
    """What audit said of jobs reaching this service's stage, kept briefly."""

    def __init__(self, nc: NatsClient, stage: Stage, verifier: WireVerifier) -> None:
        self._nc = nc
        self._stage = stage
        self._verifier = verifier
        self._subject = word_subject(stage.service)
        self._heard: OrderedDict[str, _Heard] = OrderedDict()
        self._waiting: dict[str, list[asyncio.Future[None]]] = {}

    async def start(self) -> None:
        await self._nc.subscribe(self._subject, cb=self._receive)

    def __len__(self) -> int:
        """Words kept now."""
        return len(self._heard)

    async def _receive(self, msg: Msg) -> None:
        try:
            job = job_pb2.Job.FromString(msg.data).name
        except DecodeError:
            return
        self.hear(job, msg.data, dict(msg.headers or {}))

    def hear(self, job: str, payload: bytes, headers: dict[str, str]) -> None:
        """Keep a word as it came (it is verified only if it is used)."""
        self._heard[job] = _Heard(payload, headers, time.monotonic())
        self._heard.move_to_end(job)
        while len(self._heard) > KEPT_WORDS:
            self._heard.popitem(last=False)
        for waiter in self._waiting.pop(job, ()):
            if not waiter.done():
                waiter.set_result(None)

    async def confirms(self, task: queue_pb2.JobTask, *, wait_seconds: float) -> bool:
        """Whether audit's word confirms ``task`` (waiting up to ``wait_seconds``
        for a word not heard yet). False means: ask audit."""
        if task.job not in self._heard and wait_seconds > 0:
            waiter = asyncio.get_running_loop().create_future()
            self._waiting.setdefault(task.job, []).append(waiter)
            try:
                await asyncio.wait_for(waiter, wait_seconds)
            except TimeoutError:
                pass
            finally:
                waiters = self._waiting.get(task.job)
                if waiters is not None and waiter in waiters:
                    waiters.remove(waiter)
                    if not waiters:
                        del self._waiting[task.job]
        heard = self._heard.pop(task.job, None)
        if heard is None or time.monotonic() - heard.at > FRESH_SECONDS:
            return False
        return self._believed(task, heard)

    def _believed(self, task: queue_pb2.JobTask, heard: _Heard) -> bool:
        try:
            self._verifier.producer(self._subject, heard.payload, heard.headers, allowed=_AUDIT)
            job = job_pb2.Job.FromString(heard.payload)
        except (ForgedMessage, DecodeError):
            return False
        state = state_name(job.state)
        return (
            job.name == task.job
            and job.tenant == task.tenant
            and job.manifest_digest == task.manifest_digest
            and state not in TERMINAL_STATES
            and state_rank(state) >= state_rank(self._stage.waiting)
        )
