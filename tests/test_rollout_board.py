"""The rollout board (each stage's current rollout, which workers bind their
queues by) believes only admission: an entry another service signed, an
unsigned one, or one whose body was changed after signing reads as no
rollout at all. Real JetStream key-value bucket, real Ed25519 identities."""

from __future__ import annotations

from nats.js import JetStreamContext

from quire.identity import ServiceIdentity, TrustStore
from quire.rolloutboard import (
    CANARY,
    ROLLOUTS_BUCKET,
    RolloutBoard,
    RolloutBoardWriter,
    StageRollout,
)
from quire.settings import QueueSettings
from quire.wire import WireSigner, WireVerifier
from quire.workqueue import ensure_topology

ROLLOUT = StageRollout(
    "validate", "rollouts/r1", CANARY, candidate_version="2.0", concurrency_cap=2
)


async def test_workers_read_only_what_admission_signed(jetstream: JetStreamContext) -> None:
    await ensure_topology(jetstream, QueueSettings())
    admission = ServiceIdentity.generate("admission")
    validator = ServiceIdentity.generate("validator")
    verifier = WireVerifier(TrustStore.of([admission, validator]))
    board = await RolloutBoard.open(jetstream, "validate", verifier)
    kv = await jetstream.key_value(ROLLOUTS_BUCKET)

    assert await board.read() is None  # no rollout yet
    await (await RolloutBoardWriter.open(jetstream, WireSigner(admission))).put(ROLLOUT)
    assert await board.read() == ROLLOUT

    forged = StageRollout("validate", "rollouts/r1", CANARY, candidate_version="evil")
    await (await RolloutBoardWriter.open(jetstream, WireSigner(validator))).put(forged)
    assert await board.read() is None, "another service's entry is not believed"

    await kv.put("validate", forged.to_json().encode())
    assert await board.read() is None, "an unsigned entry is not believed"

    await (await RolloutBoardWriter.open(jetstream, WireSigner(admission))).put(ROLLOUT)
    body, _, signature = (await kv.get("validate")).value.decode().partition("\n")
    await kv.put("validate", f"{forged.to_json()}\n{signature}".encode())
    assert await board.read() is None, "a changed body does not verify"
