"""The job gate: one JetStream key-value entry per job that decides, once,
between "signing has started" and "the client cancelled".

Both sides *create* the job's key; JetStream accepts only the first create, so
exactly one wins even when the cancel and the signer arrive at the same
instant. A job whose key says ``CANCELLED`` is ended by whichever stage next
touches it; a job whose key says ``SIGNING`` can no longer be cancelled and
the caller is told the state it reached.

Every entry is signed by the service that claimed it, for that job and that
state (``quire.wire``), and only the services whose step it is may claim a
state: the signer ``SIGNING``, admission ``CANCELLED``, a stage or audit's
dead-letter office ``REJECTED``/``FAILED``. An entry that does not verify was
written by someone else: it counts as absent and is replaced (conditionally on
its revision, so a genuine claim racing with us still wins once).
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
from quire.pipeline import State
from quire.wire import SIGNATURE_HEADER, ForgedMessage, WireSigner, WireVerifier

__all__ = ["JobGate", "SIGNING", "CANCELLED", "ENDED", "GATE_BUCKET"]

GATE_BUCKET = "QUIRE_JOB_GATES"
SIGNING = State.SIGNING
CANCELLED = State.CANCELLED
ENDED = frozenset({State.REJECTED, State.FAILED})
"""Endings a stage records here; no later step of the same generation may run."""
CLAIMANTS: dict[str, frozenset[str]] = {
    SIGNING: frozenset({"signer"}),
    CANCELLED: frozenset({"admission"}),
    State.REJECTED: frozenset({"validator", "assembler", "signer"}),
    State.FAILED: frozenset({"validator", "assembler", "signer", "audit"}),
}
_SEPARATOR = "|"


class JobGate:
    def __init__(self, kv: KeyValue, signer: WireSigner, verifier: WireVerifier) -> None:
        self._kv = kv
        self._signer = signer
        self._verifier = verifier

    @classmethod
    async def open(
        cls, js: JetStreamContext, signer: WireSigner, verifier: WireVerifier
    ) -> JobGate:
        """Bind the bucket, which the topology's provisioning created."""
        return cls(await js.key_value(GATE_BUCKET), signer, verifier)

    @staticmethod
    def _subject(key: str) -> str:
        return f"$KV.{GATE_BUCKET}.{key}"

    def _sealed(self, key: str, state: str) -> bytes:
        signature = self._signer.header(self._subject(key), state.encode())
        return f"{state}{_SEPARATOR}{signature}".encode()

    def _opened(self, key: str, value: bytes | None) -> tuple[str, str]:
        """(state, claimant) of an entry, or ("", "") when no one entitled to it signed it."""
        state, _, signature = (value or b"").decode(errors="replace").partition(_SEPARATOR)
        try:
            claimant = self._verifier.producer(
                self._subject(key),
                state.encode(),
                {SIGNATURE_HEADER: signature},
                allowed=CLAIMANTS.get(state, frozenset()),
            )
        except ForgedMessage:
            return "", ""
        return state, claimant

    async def _held(self, key: str) -> tuple[str, str, int] | None:
        """The genuine (state, claimant) at ``key`` and the entry's revision; None if empty."""
        try:
            entry = await self._kv.get(key)
        except (KeyNotFoundError, KeyDeletedError):
            return None
        state, claimant = self._opened(key, entry.value)
        return state, claimant, entry.revision or 0

    async def _claim(self, job: str, outcome: str) -> str:
        key = job_id(job)
        try:
            await self._kv.create(key, self._sealed(key, outcome))
            return outcome
        except KeyWrongLastSequenceError:
            held = await self._held(key)
            if held is None:
                return await self._claim(job, outcome)  # reopened meanwhile
            state, _, revision = held
            if state:
                return state
        try:  # a forged entry: replace it, unless someone else does first
            await self._kv.update(key, self._sealed(key, outcome), last=revision)
            return outcome
        except KeyWrongLastSequenceError:
            return await self._claim(job, outcome)

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
        revision, so a cancel that lands meanwhile is kept. A forged entry is
        cleared too.
        """
        key = job_id(job)
        held = await self._held(key)
        if held is None:
            return ""
        state, _, revision = held
        if state in (State.FAILED, State.REJECTED, ""):
            try:
                await self._kv.delete(key, last=revision)
            except KeyWrongLastSequenceError:
                return await self.reopen(job)
        return state

    async def is_cancelled(self, job: str) -> bool:
        return (await self.claim_of(job))[0] == CANCELLED

    async def claim_of(self, job: str) -> tuple[str, str]:
        """(state, the service that claimed it) the gate genuinely holds, or ("", "")."""
        held = await self._held(job_id(job))
        return ("", "") if held is None else (held[0], held[1])
