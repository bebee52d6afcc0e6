"""Where each signed artifact came from: only a completed job's assembled
packet is ever signed, and no artifact exists beyond the completions.

These catch what a forged queue message leaves behind (a sign task for a
rejected or parked job, or naming another blob than the job's packet), which
the per-job evidence checks of ``quire.invariants_jobs`` do not see because
audit never completed such a job.

- ``artifact_not_completed``: an artifact of an accepted job that audit's
  view (or, without a view row, its ledger) does not show COMPLETED. One
  case is tolerated: a job that FAILED in its signing stage, whose signer
  may have written the artifact before it died (it never commits, so audit
  never completes it).
- ``artifact_input_mismatch``: the job's assembled packet (the assembler's
  record of its packet) is not what was signed: there is none, the signer's
  committed sign task names another packet, the assembler's own committed
  hand-off disagrees with its record, or the artifact's signed revision (its
  first bytes, as many as the packet has) does not hash to the packet.
- ``artifacts_exceed_completions``: more artifacts in the blob store than
  COMPLETED jobs in audit's view (tolerated failed signings aside), reported
  once beside any per-job finding.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from quire.invariants_blobs import Artifact
from quire.invariants_findings import Finding
from quire.invariants_jobs import generations, outcome, transitions
from quire.invariants_snapshot import LedgerEntry, Snapshot
from quire.jobs import TERMINAL_STATES
from quire.pipeline import State

__all__ = ["provenance_findings", "left_by_failed_signing", "packet_sizes"]

NOT_IN_AUDIT = "not in audit"


def left_by_failed_signing(entries: list[LedgerEntry]) -> bool:
    """Whether the job's last generation ended FAILED out of SIGNING."""
    ended = [e for e in generations(entries)[-1] if e.to_state in TERMINAL_STATES]
    return bool(ended) and (ended[0].from_state, ended[0].to_state) == (State.SIGNING, State.FAILED)


def _audit_state(snapshot: Snapshot, job: str, entries: list[LedgerEntry]) -> str:
    view = snapshot.views.get(job)
    if view is not None:
        return view.state
    return outcome(entries) if entries else ""


def _input_findings(job: str, snapshot: Snapshot, artifacts: list[Artifact]) -> Iterable[Finding]:
    signed = snapshot.signer_inputs.get(job, [])
    if not artifacts and not signed:
        return
    packet = snapshot.assemblies.get(job)
    if packet is None:
        yield Finding("artifact_input_mismatch", job, detail="no assembly recorded")
        return
    if any(not packet.same_packet(ref) for ref in snapshot.assembler_handed.get(job, [])):
        yield Finding("artifact_input_mismatch", job, detail="assembler hand-off differs")
    if any(not packet.same_packet(ref) for ref in signed):
        yield Finding("artifact_input_mismatch", job, detail="signer input differs")
    if any(a.revision_sha256 != packet.sha256 and not a.shredded for a in artifacts):
        yield Finding("artifact_input_mismatch", job, detail="signed revision differs")


def _count_finding(snapshot: Snapshot, artifacts: list[Artifact], tolerated: int) -> list[Finding]:
    completed = sum(1 for view in snapshot.views.values() if view.state == State.COMPLETED)
    if len(artifacts) - tolerated <= completed:
        return []
    detail = f"{len(artifacts)} artifacts, {completed} completed"
    if tolerated:
        detail += f", {tolerated} left by a failed signing"
    return [Finding("artifacts_exceed_completions", detail=detail)]


def provenance_findings(snapshot: Snapshot, artifacts: list[Artifact]) -> list[Finding]:
    """The findings listed in this module's docstring. Artifacts of jobs that
    admission never accepted are ``artifact_without_job`` elsewhere and are
    only counted here."""
    entries_of: dict[str, list[LedgerEntry]] = defaultdict(list)
    for entry in transitions(snapshot.ledger):
        entries_of[entry.job].append(entry)
    artifacts_of: dict[str, list[Artifact]] = defaultdict(list)
    for artifact in artifacts:
        artifacts_of[artifact.job].append(artifact)
    findings: list[Finding] = []
    tolerated = 0
    for job in sorted(set(artifacts_of) | set(snapshot.signer_inputs)):
        if job not in snapshot.accepted:
            continue
        found = artifacts_of.get(job, [])
        entries = entries_of.get(job, [])
        state = _audit_state(snapshot, job, entries)
        if found and state != State.COMPLETED:
            if state == State.FAILED and left_by_failed_signing(entries):
                tolerated += len(found)
            else:
                findings.append(
                    Finding("artifact_not_completed", job, detail=state or NOT_IN_AUDIT)
                )
        findings.extend(_input_findings(job, snapshot, found))
    return findings + _count_finding(snapshot, artifacts, tolerated)


def packet_sizes(snapshot: Snapshot) -> dict[str, int]:
    """Each job's assembled packet size, for hashing its artifact's signed revision."""
    return {job: packet.size_bytes for job, packet in snapshot.assemblies.items()}
