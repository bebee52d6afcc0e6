"""The per-job invariants: every accepted job ended (or is parked) with one
outcome per generation, and every completion has its evidence.

A job's ledger entries split into generations at each ``DEAD_LETTER_RETRIED``
entry (an operator's retry, ``FAILED -> <stage>``). A generation holds at most
one terminal entry; every generation but the last ended FAILED. The job's
outcome is the last generation's terminal entry, or, while it has none, the
furthest state it reached. Non-terminal entries recorded after the terminal
one are tolerated: a stage that was working when the client cancelled still
publishes its transitions, and audit's view rightly stays CANCELLED.

Retirement entries (bytes deleted under the retention policy) are not
transitions and take no part in any of this; a completed job whose artifact
the ledger records as retired is not ``artifact_missing``, while one whose
artifact is gone with no such record still is.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from quire.invariants_blobs import Artifact
from quire.invariants_findings import Finding
from quire.invariants_snapshot import LedgerEntry, Snapshot
from quire.jobs import HISTORY_BEFORE_COMPLETION, PARKED_STATES, TERMINAL_STATES, state_rank
from quire.pipeline import State
from quire.reasons import ReasonCode

__all__ = [
    "generations",
    "outcome",
    "transitions",
    "retired_kinds",
    "job_findings",
    "artifact_findings",
    "ledger_row_findings",
]


def transitions(entries: list[LedgerEntry]) -> list[LedgerEntry]:
    """The entries that are transitions: all but retirement and ruleset-change entries."""
    return [entry for entry in entries if not (entry.retired_kind or entry.ruleset_change)]


def retired_kinds(entries: list[LedgerEntry]) -> dict[str, set[str]]:
    """For each job, the kinds of bytes the ledger records as retired."""
    kinds: dict[str, set[str]] = defaultdict(set)
    for entry in entries:
        if entry.retired_kind and entry.job:
            kinds[entry.job].add(entry.retired_kind)
    return kinds


def generations(entries: list[LedgerEntry]) -> list[list[LedgerEntry]]:
    """A job's entries (in sequence order), split at each dead-letter retry."""
    split: list[list[LedgerEntry]] = [[]]
    for entry in entries:
        if entry.reason_code == ReasonCode.DEAD_LETTER_RETRIED:
            split.append([])
        split[-1].append(entry)
    return split


def _terminals(generation: list[LedgerEntry]) -> list[LedgerEntry]:
    return [e for e in generation if e.to_state in TERMINAL_STATES]


def outcome(entries: list[LedgerEntry]) -> str:
    """The state the ledger says the job is in."""
    last = generations(entries)[-1]
    ended = _terminals(last)
    if ended:
        return ended[0].to_state
    return max((e.to_state for e in last), key=state_rank, default="")


def _generation_findings(job: str, entries: list[LedgerEntry]) -> Iterable[Finding]:
    split = generations(entries)
    for index, generation in enumerate(split):
        ended = _terminals(generation)
        if len(ended) > 1:
            yield Finding(
                "multiple_terminal_entries",
                job,
                ended[1].sequence,
                f"generation {index}: " + ", ".join(e.to_state for e in ended),
            )
        if index + 1 < len(split):
            retry = split[index + 1][0]
            failed_first = [e.to_state for e in ended[:1]] == [State.FAILED]
            if not failed_first or retry.from_state != State.FAILED:
                yield Finding("retry_not_after_failure", job, retry.sequence)


def _completion_findings(
    job: str,
    entries: list[LedgerEntry],
    artifacts: list[Artifact],
    snapshot: Snapshot,
    retired: set[str],
) -> Iterable[Finding]:
    completions = [e for e in entries if e.to_state == State.COMPLETED]
    if not completions:
        return
    completed = completions[0]
    if len(completions) > 1:
        yield Finding("duplicate_completion", job, completions[1].sequence, str(len(completions)))
    before = {e.to_state for e in entries if e.sequence < completed.sequence}
    missing = [s for s in HISTORY_BEFORE_COMPLETION if s not in before]
    if missing:
        recorded = {e.to_state for e in entries}
        kind = "history_incomplete" if set(missing) - recorded else "completed_before_history"
        yield Finding(kind, job, completed.sequence, "missing " + ", ".join(missing))
    digest = completed.output_digest
    committing = [e for e in entries if e.to_state == State.COMMITTING]
    if committing and committing[-1].output_digest != digest:
        yield Finding("output_digest_mismatch", job, committing[-1].sequence)
    if not artifacts and "artifact" not in retired:
        yield Finding("artifact_missing", job, completed.sequence)
    for artifact in artifacts:
        if artifact.sha256 != digest and not artifact.shredded:
            yield Finding("artifact_digest_mismatch", job, completed.sequence)
    record = snapshot.signatures.get(job)
    if record is None:
        yield Finding("signature_record_missing", job)
    elif record.sha256 != digest or (
        artifacts and record.blob_key not in {a.key for a in artifacts}
    ):
        yield Finding("signature_record_mismatch", job)


def job_findings(snapshot: Snapshot, artifacts: list[Artifact]) -> list[Finding]:
    """Invariants (a), (b) and (f) for every job any service knows."""
    by_job: dict[str, list[LedgerEntry]] = defaultdict(list)
    for entry in transitions(snapshot.ledger):
        by_job[entry.job].append(entry)
    retired = retired_kinds(snapshot.ledger)
    artifacts_of: dict[str, list[Artifact]] = defaultdict(list)
    for artifact in artifacts:
        artifacts_of[artifact.job].append(artifact)
    findings: list[Finding] = []
    for job in sorted(set(snapshot.accepted) | set(by_job) | set(snapshot.views)):
        entries = by_job.get(job, [])
        if job not in snapshot.accepted:
            findings.append(Finding("job_not_accepted", job))
        if not entries:
            findings.append(Finding("job_not_in_ledger", job))
            continue
        state = outcome(entries)
        if state not in TERMINAL_STATES | PARKED_STATES:
            findings.append(Finding("job_not_finished", job, detail=state))
        view = snapshot.views.get(job)
        if view is None:
            findings.append(Finding("view_missing", job))
        elif view.state != state:
            findings.append(
                Finding("view_state_mismatch", job, detail=f"view {view.state}, ledger {state}")
            )
        findings.extend(_generation_findings(job, entries))
        findings.extend(
            _completion_findings(
                job, entries, artifacts_of.get(job, []), snapshot, retired.get(job, set())
            )
        )
    return findings


def artifact_findings(snapshot: Snapshot, artifacts: list[Artifact]) -> list[Finding]:
    """Invariant (c): every artifact belongs to an accepted job, one per job."""
    findings: list[Finding] = []
    artifacts_of: dict[str, list[Artifact]] = defaultdict(list)
    for artifact in artifacts:
        artifacts_of[artifact.job].append(artifact)
    for job, found in sorted(artifacts_of.items()):
        accepted = snapshot.accepted.get(job)
        if accepted is None:
            findings.append(Finding("artifact_without_job", job))
        elif any(a.tenant != accepted.tenant for a in found):
            findings.append(Finding("artifact_tenant_mismatch", job))
        if len(found) > 1:
            findings.append(Finding("duplicate_artifacts", job, detail=str(len(found))))
    return findings


def ledger_row_findings(entries: list[LedgerEntry]) -> list[Finding]:
    """Rows whose columns were changed apart from the hashed event, or whose
    event is not one at all."""
    findings = []
    for entry in entries:
        if not entry.decodes:
            findings.append(Finding("ledger_undecodable", entry.job, entry.sequence))
        elif not entry.columns_match:
            findings.append(Finding("ledger_row_mismatch", entry.job, entry.sequence))
    return findings
