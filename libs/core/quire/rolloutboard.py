"""Each stage's current rollout, as its workers see it.

Admission keeps the rollout records (``quire.admission.rollouts.records``); its
``RolloutSync`` writes, for every stage that has had a rollout, the latest
one into the key-value bucket ``quire_rollouts`` (key: the stage's name),
signed by admission like a job-gate entry, so a worker acts only on what
admission wrote. A stage process reads its own stage's entry with a
``RolloutBoard`` and binds its queues by it (``quire.workqueue.routing``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass

from nats.js import JetStreamContext
from nats.js.errors import KeyDeletedError, KeyNotFoundError
from nats.js.kv import KeyValue

from quire.wire import SIGNATURE_HEADER, ForgedMessage, WireSigner, WireVerifier

__all__ = [
    "ROLLOUTS_BUCKET",
    "CANARY",
    "PROMOTED",
    "ROLLED_BACK",
    "StageRollout",
    "RolloutBoard",
    "RolloutBoardWriter",
]

log = logging.getLogger(__name__)

ROLLOUTS_BUCKET = "quire_rollouts"
CANARY = "canary"
PROMOTED = "promoted"
ROLLED_BACK = "rolled_back"
_SEPARATOR = "\n"
_WRITERS = frozenset({"admission"})


@dataclass(frozen=True)
class StageRollout:
    """A stage's latest rollout, open or closed."""

    stage: str
    rollout: str
    """``rollouts/{rollout}``."""
    state: str
    """``canary``, ``promoted`` or ``rolled_back``."""
    candidate_version: str = ""
    candidate_ruleset: str = ""
    concurrency_cap: int = 1

    @property
    def open(self) -> bool:
        return self.state == CANARY

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> StageRollout:
        body = json.loads(text)
        return cls(
            stage=str(body["stage"]),
            rollout=str(body["rollout"]),
            state=str(body["state"]),
            candidate_version=str(body.get("candidate_version", "")),
            candidate_ruleset=str(body.get("candidate_ruleset", "")),
            concurrency_cap=int(body.get("concurrency_cap", 1)),
        )


def _subject(stage: str) -> str:
    return f"$KV.{ROLLOUTS_BUCKET}.{stage}"


class RolloutBoardWriter:
    """Admission's side: put a stage's latest rollout, signed."""

    def __init__(self, kv: KeyValue, signer: WireSigner) -> None:
        self._kv = kv
        self._signer = signer

    @classmethod
    async def open(cls, js: JetStreamContext, signer: WireSigner) -> RolloutBoardWriter:
        return cls(await js.key_value(ROLLOUTS_BUCKET), signer)

    async def current(self, stage: str) -> str | None:
        """The entry's JSON as written (unverified; only to skip an unchanged put)."""
        try:
            entry = await self._kv.get(stage)
        except (KeyNotFoundError, KeyDeletedError):
            return None
        return (entry.value or b"").decode(errors="replace").partition(_SEPARATOR)[0]

    async def put(self, rollout: StageRollout) -> None:
        body = rollout.to_json()
        signature = self._signer.header(_subject(rollout.stage), body.encode())
        await self._kv.put(rollout.stage, f"{body}{_SEPARATOR}{signature}".encode())


class RolloutBoard:
    """A stage process's reader of its stage's entry. An entry admission did
    not sign is ignored (logged), as if there were none."""

    def __init__(self, kv: KeyValue, stage: str, verifier: WireVerifier) -> None:
        self._kv = kv
        self._stage = stage
        self._verifier = verifier

    @classmethod
    async def open(cls, js: JetStreamContext, stage: str, verifier: WireVerifier) -> RolloutBoard:
        return cls(await js.key_value(ROLLOUTS_BUCKET), stage, verifier)

    async def read(self) -> StageRollout | None:
        try:
            entry = await self._kv.get(self._stage)
        except (KeyNotFoundError, KeyDeletedError):
            return None
        body, _, signature = (entry.value or b"").decode(errors="replace").partition(_SEPARATOR)
        try:
            self._verifier.producer(
                _subject(self._stage),
                body.encode(),
                {SIGNATURE_HEADER: signature},
                allowed=_WRITERS,
            )
            return StageRollout.from_json(body)
        except (ForgedMessage, ValueError, KeyError):
            log.warning("the %s rollout entry is not admission's; ignored", self._stage)
            return None
