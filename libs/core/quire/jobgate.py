"""The job gate: signed, create-only JetStream key-value entries that decide,
once, between "signing has started", "the client cancelled" and "a stage
ended the job".

Each service writes only under its own name (``<job>.<service>.<claim>``;
``quire.natsauth`` lets no login publish under another's), and every entry
is written once: the bucket's stream keeps one message a subject and refuses
a second, rollups and deletes (``gate_config``), so no login can overwrite,
delete or purge an entry — its own or anyone's. Entries age out with the
bucket's ``max_age``.

- ``<job>.signer.s<n>``: ``SIGNING``, claimed while generation ``n`` was current;
- ``<job>.admission.c<n>``: ``CANCELLED``, asked while generation ``n`` was current;
- ``<job>.<service>.g<n>``: ``REJECTED`` or ``FAILED``, ending generation ``n``;
- ``<job>.audit.r<n>``: audit's dead-letter office starts generation ``n`` (a retry).

**The first recorded wins.** Of a job's genuine entries, in stream order,
the first ``SIGNING`` or cancel that no ending of its own generation
preceded, or the first ending of the generation asked about, is what the
gate holds. Every reader sees the same stream order, so a cancel and the
signer arriving at the same instant agree on the winner without a shared
key. A claim that lost stays void for good; a retry (a new generation)
clears the earlier generation's endings but never a cancel or a signing
claim that won.

Every entry is signed by its service, for its subject, state and
generation (``quire.wire``); an entry that does not verify — or names
another service than its key, or a state that service may not claim — was
not written by that service's code and counts as absent. A stolen login
without the identity key can therefore block only its own service's keys.
"""

from __future__ import annotations

import re
import time
from collections import OrderedDict
from dataclasses import dataclass

import nats.js.errors
from nats.js import JetStreamContext, api

from quire.jobs import job_id
from quire.pipeline import ADMISSION, AUDIT, WORKER_SERVICES, State, stage
from quire.streamsafety import create_entry_at, create_only_stream
from quire.wire import SIGNATURE_HEADER, ForgedMessage, WireSigner, WireVerifier

__all__ = [
    "CANCELLED",
    "ENDED",
    "GATE_BUCKET",
    "JobGate",
    "SIGNING",
    "gate_config",
]

GATE_BUCKET = "QUIRE_JOB_GATES"
_STREAM = f"KV_{GATE_BUCKET}"
_PREFIX = f"$KV.{GATE_BUCKET}."
GATE_MAX_AGE_SECONDS = 90 * 24 * 3600.0
"""How long an entry is kept: far past any job's deadline or review."""
SIGNING = State.SIGNING
CANCELLED = State.CANCELLED
ENDED = frozenset({State.REJECTED, State.FAILED})
"""Endings a stage records here; no later step of the same generation may run."""
RETRY = "RETRY"
CLAIMANTS: dict[str, frozenset[str]] = {
    SIGNING: frozenset({stage("sign").service}),
    CANCELLED: frozenset({ADMISSION}),
    State.REJECTED: frozenset(WORKER_SERVICES),
    State.FAILED: frozenset({*WORKER_SERVICES, AUDIT}),
    RETRY: frozenset({AUDIT}),
}
_SEPARATOR = "|"
_GENERATION = re.compile(r"[0-9]{1,9}")
_CLAIMS = 3
"""Claims one call makes at most, each for a retry begun while the one
before was written (a job is retried only after an operator asks)."""
_REMEMBERED_JOBS = 1024
_REMEMBERED_SECONDS = 30.0
"""How old a read a claim starts from at most (a stage claims within its
delivery); an older one is read again."""
"""Jobs whose last read a gate keeps for a claim that follows (``_claim``)."""


def gate_config(replicas: int) -> api.StreamConfig:
    """The bucket's stream: one message a subject, never replaced, rolled up,
    deleted or purged; entries leave only by age."""
    return create_only_stream(
        _STREAM,
        [f"{_PREFIX}>"],
        replicas,
        max_age=GATE_MAX_AGE_SECONDS,
        deny_delete=True,
        deny_purge=True,
    )


def _claim_token(state: str, generation: int) -> str:
    if state == SIGNING:
        return f"s{generation}"
    if state == CANCELLED:
        return f"c{generation}"
    if state == RETRY:
        return f"r{generation}"
    return f"g{generation}"


@dataclass(frozen=True)
class _Entry:
    sequence: int
    service: str
    state: str
    generation: int


class JobGate:
    def __init__(
        self,
        js: JetStreamContext,
        service: str,
        signer: WireSigner,
        verifier: WireVerifier,
        *,
        direct: bool = False,
    ) -> None:
        """``direct``: read entries with direct gets, which any of the
        bucket's servers may answer; only where it has one (a lone server
        is its leader, so a direct get sees every acknowledged entry)."""
        self._js = js
        self._service = service
        self._signer = signer
        self._verifier = verifier
        self._direct = direct
        self._read_before: OrderedDict[str, tuple[list[_Entry], int, float]] = OrderedDict()
        """By job: the entries this gate last read of it, the stream sequence
        to read on from, and when (monotonic): a claim that follows soon
        starts from them."""

    @classmethod
    async def open(
        cls, js: JetStreamContext, signer: WireSigner, verifier: WireVerifier
    ) -> JobGate:
        """Bind the bucket, which the topology's provisioning created."""
        info = await js.stream_info(_STREAM)
        # Replicated, a follower may not have the newest entry yet: read the leader.
        lone = (info.config.num_replicas or 1) == 1
        return cls(js, signer.service, signer, verifier, direct=lone)

    def _subject(self, job: str, service: str, state: str, generation: int) -> str:
        return f"{_PREFIX}{job_id(job)}.{service}.{_claim_token(state, generation)}"

    @staticmethod
    def _signed(state: str, generation: int) -> bytes:
        return f"{state}{_SEPARATOR}{generation}".encode()

    async def _record(self, job: str, state: str, generation: int) -> _Entry | None:
        """Write this service's entry, and return it; one already there (a
        redelivery, or a forgery under this service's own login) is left as
        it is, and None returned."""
        subject = self._subject(job, self._service, state, generation)
        signed = self._signed(state, generation)
        value = signed + f"{_SEPARATOR}{self._signer.header(subject, signed)}".encode()
        sequence = await create_entry_at(self._js, subject, value)
        return None if sequence is None else _Entry(sequence, self._service, state, generation)

    def _opened(self, subject: str, sequence: int, value: bytes) -> _Entry | None:
        """The entry at ``subject`` if its own service signed it, for its key."""
        parts = subject.removeprefix(_PREFIX).split(".")
        if len(parts) != 3:
            return None
        _, service, token = parts
        state, _, rest = value.decode(errors="replace").partition(_SEPARATOR)
        number, _, signature = rest.partition(_SEPARATOR)
        if not _GENERATION.fullmatch(number) or _claim_token(state, int(number)) != token:
            return None
        try:
            claimant = self._verifier.producer(
                subject,
                self._signed(state, int(number)),
                {SIGNATURE_HEADER: signature},
                allowed=CLAIMANTS.get(state, frozenset()),
            )
        except ForgedMessage:
            return None
        if claimant != service:
            return None
        return _Entry(sequence, service, state, int(number))

    async def _entries(self, job: str) -> list[_Entry]:
        """The job's genuine entries, in stream order (one read of the leader
        each); kept for a claim of the same job that follows."""
        entries, upto = await self._read(job, 1, None)
        self._read_before[job] = (entries, upto, time.monotonic())
        self._read_before.move_to_end(job)
        while len(self._read_before) > _REMEMBERED_JOBS:
            self._read_before.popitem(last=False)
        return entries

    async def _read(self, job: str, sequence: int, mine: _Entry | None) -> tuple[list[_Entry], int]:
        """The job's genuine entries from stream sequence ``sequence`` on, in
        stream order, and the sequence to read on from; up to and including
        ``mine`` (this service's own entry, just written: taken as it is) if
        given, else to the end."""
        pattern = f"{_PREFIX}{job_id(job)}.>"
        found: list[_Entry] = []
        while True:
            try:
                msg = await self._js.get_msg(
                    _STREAM, seq=sequence, subject=pattern, next=True, direct=self._direct
                )
            except nats.js.errors.NotFoundError:
                return found, sequence
            sequence = (msg.seq or 0) + 1
            if mine is not None and msg.seq == mine.sequence:
                found.append(mine)
                return found, sequence
            entry = self._opened(msg.subject or "", msg.seq or 0, msg.data or b"")
            if entry is not None:
                found.append(entry)

    @staticmethod
    def _current(entries: list[_Entry]) -> int:
        """The generation the job is in: the last retry audit started, or 0."""
        return max((e.generation for e in entries if e.state == RETRY), default=0)

    @staticmethod
    def _held(entries: list[_Entry], generation: int) -> tuple[str, str]:
        """(state, claimant) the gate holds for ``generation``: the first recorded wins."""
        ended: set[int] = set()
        for entry in entries:
            # A claim (signing, or a cancel) that an ending of its own
            # generation preceded lost, and stays void; one that won holds
            # for every later generation too.
            if entry.state == SIGNING and entry.generation not in ended:
                return SIGNING, entry.service
            if entry.state in ENDED:
                ended.add(entry.generation)
                if entry.generation == generation:
                    return entry.state, entry.service
            if entry.state == CANCELLED and entry.generation not in ended:
                return CANCELLED, entry.service
        return "", ""

    async def _claim(self, job: str, state: str, generation: int | None) -> str:
        """What the gate holds once this service's claim is recorded. Nothing
        genuine held means this service's own key holds a forgery (its login
        was used without its identity key): the claim counts as made.

        The claim starts from this gate's last read of the job when there is
        a recent one (a stage reads the gate as it takes a job's lease, then
        claims), else from a read of its own. Once the claim is written, the entries
        are read on from where that read ended, only up to the claim itself:
        whatever the gate holds is decided at or before it (``_held`` stops at
        the first entry that decides, and the claim decides if nothing before
        it did). The claim is for the generation the job is in as it is
        written: should the entries up to it (or all of them, when it was
        written before) show a retry begun since the earlier read, the claim
        is made again for the retry's generation (the first one, of a
        generation a retry follows, ended before it and is void)."""
        known = self._read_before.pop(job, None)
        if known is not None and time.monotonic() - known[2] <= _REMEMBERED_SECONDS:
            entries, upto = list(known[0]), known[1]
        else:
            entries, upto = await self._read(job, 1, None)
        claimed = self._current(entries) if generation is None else generation
        for _ in range(_CLAIMS):
            mine = await self._record(job, state, claimed)
            if mine is None:  # written before (a redelivery, or a forgery): read it all
                entries, upto = await self._read(job, 1, None)
            else:
                more, upto = await self._read(job, upto, mine)
                entries += more
            if generation is not None or self._current(entries) == claimed:
                break
            claimed = self._current(entries)  # a retry began meanwhile: claim in it
        return self._held(entries, claimed)[0] or state

    async def claim_signing(self, job: str) -> str:
        """SIGNING if the signer may go ahead, CANCELLED if the client was first
        (or the ending a stage recorded first)."""
        return await self._claim(job, SIGNING, None)

    async def end(self, job: str, state: str, generation: int | None = None) -> str:
        """Record that this service ended the job's ``generation`` (default: the
        current one) REJECTED or FAILED; CANCELLED if the client was first."""
        return await self._claim(job, state, generation)

    async def cancel(self, job: str) -> str:
        """CANCELLED if the cancel won; else SIGNING, or the ending recorded first."""
        return await self._claim(job, CANCELLED, None)

    async def reopen(self, job: str, generation: int) -> str:
        """Start ``generation`` for a dead-letter retry; returns what the gate
        holds for it: ``SIGNING`` stays (cancel still cannot win), a won
        ``CANCELLED`` is never cleared, and the earlier generation's endings
        no longer count."""
        await self._record(job, RETRY, generation)
        return self._held(await self._entries(job), generation)[0]

    async def is_cancelled(self, job: str) -> bool:
        return (await self.claim_of(job))[0] == CANCELLED

    async def claim_of(self, job: str, generation: int | None = None) -> tuple[str, str]:
        """(state, the service that claimed it) the gate genuinely holds for
        ``generation`` (default: the current one), or ("", "")."""
        entries = await self._entries(job)
        if generation is None:
            generation = self._current(entries)
        return self._held(entries, generation)
