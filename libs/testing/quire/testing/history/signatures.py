"""One signature per completed job (DESIGN.md invariant 5), checked from
every side that can see one: the ledger's output digests, the signer's
records and its answer, the artifact admission serves and the digests the
clients fetched. A job that ended otherwise has no signature at all.
"""

from __future__ import annotations

from collections.abc import Iterator

from quire.invariants_jobs import outcome, transitions
from quire.jobs import TERMINAL_STATES
from quire.pipeline import State
from quire.testing.history.facts import JobRecord, SystemFacts
from quire.testing.history.ops import History, Kind
from quire.testing.history.verdicts import ONE_SIGNATURE, Verdict, Violation

__all__ = ["completed", "one_signature"]


def completed(facts: SystemFacts) -> list[JobRecord]:
    """The jobs the ledger records a completion of, by name."""
    return [
        record
        for _, record in sorted(facts.jobs.items())
        if any(e.to_state == State.COMPLETED for e in record.entries)
    ]


def one_signature(history: History, facts: SystemFacts) -> Verdict:
    """Each completed job: one signed digest everywhere, one signature
    record, a verifying artifact; every other ended job: no signature."""
    fetched: dict[str, set[str]] = {}
    for op in history.of(Kind.FETCHED):
        fetched.setdefault(op.job, set()).add(op.digest or f"none ({op.reason})")
    jobs = completed(facts)
    found = [
        Violation(record.job, detail)
        for record in jobs
        for detail in _signature_problems(record, fetched.get(record.job, set()))
    ]
    for job, record in sorted(facts.jobs.items()):
        state = outcome(transitions(list(record.entries)))
        # A record without a digest is the signer's intent, written before it
        # signs (a job that then failed storing its artifact, on a full disk
        # say, keeps it): no signature exists.
        signed = [digest for digest in record.signature_records if digest]
        if signed and state in TERMINAL_STATES - {State.COMPLETED}:
            found.append(Violation(job, f"ended {state}, yet the signer keeps a signature of it"))
    return Verdict(ONE_SIGNATURE, len(jobs), tuple(found))


def _signature_problems(record: JobRecord, fetched: set[str]) -> Iterator[str]:
    completion = next(e for e in record.entries if e.to_state == State.COMPLETED)
    digest = completion.output_digest
    signed = {e.output_digest for e in record.entries if e.output_digest}
    if len(signed) > 1:
        yield f"the ledger records {len(signed)} signed digests"
    records = record.signature_records
    if len(records) != 1:
        yield f"{len(records)} signature records"
    if any(sha256 != digest for sha256 in records):
        yield "a signature record of another digest than the ledger's"
    if record.signature is None:
        yield "GetSignature finds none"
    elif record.signature.sha256 != digest:
        yield "GetSignature answers another digest than the ledger's"
    yield from _artifact_problems(record, digest)
    if fetched - {digest}:
        yield "a client fetched other bytes than the ledger's digest"


def _artifact_problems(record: JobRecord, digest: str) -> Iterator[str]:
    artifact = record.artifact
    if artifact is None or artifact.problem:
        yield f"artifact not had: {artifact.problem if artifact else 'not downloaded'}"
        return
    if artifact.sha256 != digest:
        yield "the artifact's bytes are not the ledger's digest"
    if artifact.signature_count != 1:
        yield f"{artifact.signature_count} signatures in the artifact"
        return
    if not artifact.verified:
        yield "the artifact's signature does not verify against the signer's keys"
    signature = record.signature
    if signature is not None and artifact.certificate_sha256 != signature.certificate_sha256:
        yield "signed with another certificate than the signer records"
