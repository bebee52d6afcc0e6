"""The job gate's decisions on a real JetStream bucket (``quire.jobgate``):
the first genuine entry in stream order wins, a claim that lost to an ending
of its own generation stays void (so a retry is not blocked by it), a claim
that won holds across retries, and an entry no reader can parse or verify
counts as absent without breaking anyone's reads."""

from __future__ import annotations

import pytest
from nats.js import JetStreamContext

from quire.identity import ServiceIdentity, TrustStore
from quire.jobgate import GATE_BUCKET, JobGate
from quire.pipeline import State
from quire.wire import WireSigner, WireVerifier

JOB = "jobs/0123456789abcdef0123456789ab"
SERVICES = ("admission", "validator", "assembler", "signer", "audit")


@pytest.fixture(params=[False, True], ids=["leader-reads", "direct-gets"])
def direct(request: pytest.FixtureRequest) -> bool:
    """Every gate test reads entries both ways (a lone server answers direct gets)."""
    return bool(request.param)


def _gates(js: JetStreamContext, direct: bool) -> dict[str, JobGate]:
    identities = [ServiceIdentity.generate(s) for s in SERVICES]
    verifier = WireVerifier(TrustStore.of(identities))
    return {
        i.service: JobGate(js, i.service, WireSigner(i), verifier, direct=direct)
        for i in identities
    }


async def test_the_first_genuine_claim_wins_and_the_other_side_is_told(
    jetstream: JetStreamContext,
    direct: bool,
) -> None:
    gate = _gates(jetstream, direct)
    assert await gate["signer"].claim_signing(JOB) == State.SIGNING
    assert await gate["admission"].cancel(JOB) == State.SIGNING, "the cancel lost"
    assert await gate["validator"].claim_of(JOB) == (State.SIGNING, "signer")


async def test_a_signing_claim_after_a_failure_is_void_and_a_retry_can_be_cancelled(
    jetstream: JetStreamContext,
    direct: bool,
) -> None:
    gate = _gates(jetstream, direct)
    assert await gate["audit"].end(JOB, State.FAILED, 0) == State.FAILED
    # A late signer claims signing after the dead-letter office ended generation 0.
    assert await gate["signer"].claim_signing(JOB) == State.FAILED
    assert await gate["audit"].reopen(JOB, 1) == "", "the retry starts clear"
    assert await gate["admission"].cancel(JOB) == State.CANCELLED
    assert await gate["validator"].claim_of(JOB, 1) == (State.CANCELLED, "admission")


async def test_a_won_signing_claim_holds_after_a_retry(
    jetstream: JetStreamContext, direct: bool
) -> None:
    gate = _gates(jetstream, direct)
    assert await gate["signer"].claim_signing(JOB) == State.SIGNING
    assert await gate["signer"].end(JOB, State.FAILED, 0) == State.SIGNING
    assert await gate["audit"].reopen(JOB, 1) == State.SIGNING
    assert await gate["admission"].cancel(JOB) == State.SIGNING


async def test_an_unparsable_or_unsigned_entry_counts_as_absent(
    jetstream: JetStreamContext,
    direct: bool,
) -> None:
    gate = _gates(jetstream, direct)
    prefix = f"$KV.{GATE_BUCKET}.{JOB.removeprefix('jobs/')}"
    # Under the admission's own name, as its stolen login could write them.
    await jetstream.publish(f"{prefix}.admission.c0", "CANCELLED|²|x".encode())
    await jetstream.publish(f"{prefix}.signer.s0", b"SIGNING|0|signer.Zm9yZ2Vk")
    assert await gate["validator"].claim_of(JOB) == ("", "")
    assert await gate["validator"].end(JOB, State.REJECTED, 0) == State.REJECTED
