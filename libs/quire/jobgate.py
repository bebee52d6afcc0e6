"""The job gate: one JetStream key-value entry per job that decides, once,
between "signing has started" and "the client cancelled".

Both sides *create* the job's key; JetStream accepts only the first create, so
exactly one wins even when the cancel and the signer arrive at the same
instant. A job whose key says ``CANCELLED`` is ended by whichever stage next
touches it; a job whose key says ``SIGNING`` can no longer be cancelled and
the caller is told the state it reached.
"""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.errors import (
    KeyDeletedError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
)
from nats.js.kv import KeyValue

from quire.jobs import job_id

__all__ = ["JobGate", "SIGNING", "CANCELLED", "GATE_BUCKET"]

GATE_BUCKET = "QUIRE_JOB_GATES"
SIGNING = "SIGNING"
CANCELLED = "CANCELLED"


class JobGate:
    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

    @classmethod
    async def open(cls, js: JetStreamContext) -> JobGate:
        """Bind the bucket, which the topology's provisioning created."""
        return cls(await js.key_value(GATE_BUCKET))

    async def _claim(self, job: str, outcome: str) -> str:
        key = job_id(job)
        try:
            await self._kv.create(key, outcome.encode())
            return outcome
        except KeyWrongLastSequenceError:
            try:
                entry = await self._kv.get(key)
            except (KeyNotFoundError, KeyDeletedError):
                return await self._claim(job, outcome)  # reopened meanwhile
            return (entry.value or b"").decode()

    async def claim_signing(self, job: str) -> str:
        """SIGNING if the signer may go ahead, CANCELLED if the client was first."""
        return await self._claim(job, SIGNING)

    async def end(self, job: str, state: str) -> str:
        """Record that a stage ended the job (REJECTED, FAILED); CANCELLED if the client was first."""
        return await self._claim(job, state)

    async def cancel(self, job: str) -> str:
        """CANCELLED if the cancel won, SIGNING if signing had already started."""
        return await self._claim(job, CANCELLED)

    async def reopen(self, job: str) -> str:
        """Clear a FAILED ending for a dead-letter retry; returns what the gate held.

        ``SIGNING`` stays (signing had begun; cancel still cannot win), and a
        ``CANCELLED`` is never cleared. The delete is conditional on the entry's
        revision, so a cancel that lands meanwhile is kept.
        """
        try:
            entry = await self._kv.get(job_id(job))
        except (KeyNotFoundError, KeyDeletedError):
            return ""
        held = (entry.value or b"").decode()
        if held in ("FAILED", "REJECTED"):
            try:
                await self._kv.delete(job_id(job), last=entry.revision)
            except KeyWrongLastSequenceError:
                return await self.reopen(job)
        return held

    async def is_cancelled(self, job: str) -> bool:
        try:
            entry = await self._kv.get(job_id(job))
        except (KeyNotFoundError, KeyDeletedError):
            return False
        return (entry.value or b"").decode() == CANCELLED
