"""What the invariant checker reports: one finding per broken promise.

A finding names a stable ``kind``, and where it applies the job and the
ledger sequence; ``detail`` holds only states, reason codes, services and
counts. Never document content, tenant file names or blob paths.

Kinds, by invariant:

- (a) every accepted job ends or parks: ``job_not_in_ledger`` (admission
  accepted it, audit never recorded it), ``job_not_finished`` (its state is
  neither terminal nor NEEDS_REVIEW), ``job_not_accepted`` (audit knows a
  job admission never accepted), ``view_missing`` (ledger entries but no
  row in audit's job view), ``view_state_mismatch`` (the view disagrees with
  the ledger's outcome);
- (b) a completion has its evidence: ``duplicate_completion``,
  ``history_incomplete``, ``completed_before_history``,
  ``output_digest_mismatch`` (COMMITTING and COMPLETED disagree),
  ``artifact_missing`` (gone, and the ledger records no retirement of it
  under the retention policy), ``artifact_digest_mismatch`` (the artifact's bytes
  do not hash to the ledger's output digest), ``signature_record_missing``,
  ``signature_record_mismatch`` (the signer's record disagrees);
- (c) one artifact per accepted job: ``artifact_without_job``,
  ``duplicate_artifacts``, ``artifact_tenant_mismatch``,
  ``unrecognized_blob`` (a file under ``signed/`` not named by Quire);
- (g) only a completed job's assembled packet is signed
  (``quire.invariants_provenance``): ``artifact_not_completed`` (audit does
  not show the artifact's job COMPLETED), ``artifact_input_mismatch`` (what
  was signed is not the packet the assembler committed for the job),
  ``artifacts_exceed_completions`` (more artifacts than COMPLETED jobs);
- (d) no leftover temporary space: ``temp_leftover`` (owner process gone),
  ``temp_not_empty`` (the stack is stopped, yet entries remain);
- (e) the ledger verifies: ``ledger_edited``, ``ledger_deleted``,
  ``ledger_inserted``, ``ledger_reordered``, ``ledger_checkpoint``,
  ``ledger_checkpoint_file`` (a checkpoint file audit's key does not vouch
  for as it stands), ``ledger_checkpoint_missing`` (a checkpoint a later one
  names as its predecessor is gone), ``ledger_checkpoint_time`` (a
  checkpoint dated before a shorter one of its tenant's) (from audit's own verification), ``ledger_row_mismatch`` (a row's columns
  disagree with the hashed event), ``ledger_undecodable``,
  ``job_view_mismatch`` (audit's job index disagrees with what the job's
  events fold to; the detail names the field);
- (f) one outcome per generation: ``multiple_terminal_entries``,
  ``retry_not_after_failure`` (a DEAD_LETTER_RETRIED entry that does not
  follow a FAILED one);
- (h) the ledger holds only steps that fit their job's history:
  ``ledger_event_refused`` (audit's recorder kept a validly signed event out
  of the ledger, ``quire.audit.succession``: its kind — UNKNOWN_JOB,
  OTHER_TENANT, OUT_OF_TURN, AFTER_END — and producer are the detail; a LATE
  step after a cancellation is expected now and then and is only counted);
- and ``database_missing`` when a service's database cannot be found.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Finding", "KINDS"]

KINDS = frozenset(
    {
        "job_not_in_ledger",
        "job_not_finished",
        "job_not_accepted",
        "view_missing",
        "view_state_mismatch",
        "duplicate_completion",
        "history_incomplete",
        "completed_before_history",
        "output_digest_mismatch",
        "artifact_missing",
        "artifact_digest_mismatch",
        "signature_record_missing",
        "signature_record_mismatch",
        "artifact_without_job",
        "duplicate_artifacts",
        "artifact_tenant_mismatch",
        "unrecognized_blob",
        "artifact_not_completed",
        "artifact_input_mismatch",
        "artifacts_exceed_completions",
        "temp_leftover",
        "temp_not_empty",
        "ledger_edited",
        "ledger_deleted",
        "ledger_inserted",
        "ledger_reordered",
        "ledger_checkpoint",
        "ledger_checkpoint_file",
        "ledger_checkpoint_missing",
        "ledger_checkpoint_time",
        "ledger_row_mismatch",
        "ledger_undecodable",
        "job_view_mismatch",
        "multiple_terminal_entries",
        "retry_not_after_failure",
        "ledger_event_refused",
        "database_missing",
    }
)


@dataclass(frozen=True, order=True)
class Finding:
    kind: str
    job: str = ""
    """``jobs/{job}`` when the finding is about one job."""
    sequence: int = 0
    """The ledger sequence the finding points at, when there is one."""
    detail: str = ""
    """States, reason codes, services or counts; never content or names."""

    def __str__(self) -> str:
        parts = [self.kind]
        if self.job:
            parts.append(self.job)
        if self.sequence:
            parts.append(f"sequence {self.sequence}")
        if self.detail:
            parts.append(self.detail)
        return "  ".join(parts)
