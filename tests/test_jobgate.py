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


class _ReadCounter:
    """Counts the gate's reads of the bucket (``get_msg``) from now on."""

    def __init__(self, jetstream: JetStreamContext, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        get_msg = jetstream.get_msg

        async def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
            self.count += 1
            return await get_msg(*args, **kwargs)

        monkeypatch.setattr(jetstream, "get_msg", counted)


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


async def test_a_cancel_that_lands_between_the_signers_reads_still_wins(
    jetstream: JetStreamContext, direct: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After writing its claim the signer reads on only from where its first
    read ended, up to its own entry: a cancel written in between is found
    there, and wins."""
    gate = _gates(jetstream, direct)
    signer = gate["signer"]
    record = signer._record  # noqa: SLF001 - the moment between read and write

    async def cancel_first(job: str, state: str, generation: int):  # type: ignore[no-untyped-def]
        assert await gate["admission"].cancel(job) == State.CANCELLED
        return await record(job, state, generation)

    monkeypatch.setattr(signer, "_record", cancel_first)
    assert await signer.claim_signing(JOB) == State.CANCELLED
    assert await gate["validator"].claim_of(JOB) == (State.CANCELLED, "admission")


async def test_a_fresh_claim_reads_the_bucket_twice(
    jetstream: JetStreamContext, direct: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once to find the generation (nothing there), once after writing (its
    own entry, which ends the read); a redelivered claim reads it all."""
    gate = _gates(jetstream, direct)
    reads = _ReadCounter(jetstream, monkeypatch)
    assert await gate["signer"].claim_signing(JOB) == State.SIGNING
    assert reads.count == 2
    reads.count = 0
    assert await gate["signer"].claim_signing(JOB) == State.SIGNING  # a redelivery
    assert reads.count == 2 + 2  # the first read finds the entry; written already: all again


async def test_a_claim_after_the_lease_time_read_reads_the_bucket_once(
    jetstream: JetStreamContext, direct: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stage reads the gate as it takes the lease; its claim then starts
    from that read and reads on only up to its own entry."""
    gate = _gates(jetstream, direct)
    reads = _ReadCounter(jetstream, monkeypatch)
    assert await gate["signer"].claim_of(JOB) == ("", "")
    assert reads.count == 1
    reads.count = 0
    assert await gate["signer"].claim_signing(JOB) == State.SIGNING
    assert reads.count == 1, "only the read on to its own entry"


async def test_a_cancel_after_the_lease_time_read_still_wins(
    jetstream: JetStreamContext, direct: bool
) -> None:
    gate = _gates(jetstream, direct)
    assert await gate["signer"].claim_of(JOB) == ("", "")
    assert await gate["admission"].cancel(JOB) == State.CANCELLED
    assert await gate["signer"].claim_signing(JOB) == State.CANCELLED


async def test_a_claim_is_for_the_generation_a_retry_began_after_the_earlier_read(
    jetstream: JetStreamContext, direct: bool
) -> None:
    """Read at generation 0; before the claim, audit ends it and an operator's
    retry begins generation 1: the claim is decided in generation 1, as a
    claim that read the gate afresh would be."""
    gate = _gates(jetstream, direct)
    assert await gate["signer"].claim_of(JOB) == ("", "")
    assert await gate["audit"].end(JOB, State.FAILED, 0) == State.FAILED
    assert await gate["audit"].reopen(JOB, 1) == ""
    assert await gate["signer"].claim_signing(JOB) == State.SIGNING
    assert await gate["admission"].cancel(JOB) == State.SIGNING, "the claim won generation 1"
    assert await gate["validator"].claim_of(JOB, 1) == (State.SIGNING, "signer")


async def test_a_claim_already_written_in_an_earlier_generation_is_made_again_in_the_retry(
    jetstream: JetStreamContext, direct: bool
) -> None:
    """The validator's read remembers generation 0, in which its own ending is
    already written; a retry begins and the client cancels generation 1. The
    validator's ending then (a reviewer's rejection, say) is decided in
    generation 1, where the cancel came first."""
    gate = _gates(jetstream, direct)
    assert await gate["validator"].end(JOB, State.REJECTED, 0) == State.REJECTED
    assert await gate["validator"].claim_of(JOB) == (State.REJECTED, "validator")
    assert await gate["audit"].reopen(JOB, 1) == ""
    assert await gate["admission"].cancel(JOB) == State.CANCELLED
    assert await gate["validator"].end(JOB, State.REJECTED) == State.CANCELLED


async def test_an_old_read_is_not_started_from(
    jetstream: JetStreamContext, direct: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = _gates(jetstream, direct)
    assert await gate["signer"].claim_of(JOB) == ("", "")
    monkeypatch.setattr("quire.jobgate._REMEMBERED_SECONDS", -1.0)
    reads = _ReadCounter(jetstream, monkeypatch)
    assert await gate["signer"].claim_signing(JOB) == State.SIGNING
    assert reads.count == 2, "read afresh, then on to its own entry"
