"""What the system holds after a run, as its APIs answer an operator: the
facts a history is checked against (``quire.testing.history.checker``).

Plain values only, so that a test of the checker builds them by hand;
``quire.testing.history.gather`` asks a running system for them. A ledger
entry is ``quire.invariants_snapshot.LedgerEntry``, the type ``quire
check`` reads the ledger into, so that the checker folds generations and
outcomes with ``quire.invariants_jobs``' rules rather than its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from quire.invariants_snapshot import LedgerEntry

__all__ = [
    "LedgerEntry",
    "Signed",
    "Artifact",
    "Evidence",
    "JobRecord",
    "LedgerFinding",
    "LedgerVerification",
    "SystemFacts",
]


@dataclass(frozen=True)
class Signed:
    """The signer's answer for a job (``GetSignature``)."""

    sha256: str
    """The signed artifact's digest."""
    certificate_sha256: str
    key_version: str


@dataclass(frozen=True)
class Artifact:
    """The artifact, downloaded from admission and verified against every
    certificate the signer lists (``ListKeys``, ``quire.pdfsignature``)."""

    sha256: str = ""
    """The downloaded bytes' digest (admission checks them against its own)."""
    signature_count: int = 0
    verified: bool = False
    """One signature, intact, valid, covering the whole file, by a trusted key."""
    certificate_sha256: str = ""
    problem: str = ""
    """Why it could not be had: the refusal's code and reason, or the
    verifier's ``unreadable`` phrase."""


@dataclass(frozen=True)
class Evidence:
    """The job's evidence (``ExportEvidence``), verified offline against the
    pinned checkpoint key (``quire.evidenceverify``)."""

    problems: tuple[str, ...]
    """What the verifier refused; empty when it holds."""
    states: tuple[str, ...]
    """The ``to_state`` of each entry it proves, in order."""


@dataclass(frozen=True)
class JobRecord:
    """One job as the system holds it."""

    job: str
    tenant: str = ""
    state: str = ""
    """The job's state as admission answers its tenant (``GetJob``); empty
    when admission does not know the job."""
    entries: tuple[LedgerEntry, ...] = ()
    """Its ledger entries (audit's ``ListJobEvents``), in sequence order."""
    views: tuple[str, ...] = ()
    """The job's state after each entry, folded by the ledger's rule
    (``quire.jobview``): what a watch shows at that entry's sequence."""
    signature_records: tuple[str, ...] = ()
    """The digest of each signature record the signer keeps for the job
    (its export, ``COLLECTION_SIGNATURES``): one for a completed job; ""
    for a record of the signer's intent alone (it had not signed yet)."""
    signature: Signed | None = None
    artifact: Artifact | None = None
    """None when the job is not completed (nothing was downloaded)."""
    evidence: Evidence | None = None
    """None when the ledger holds nothing of the job."""

    def view_at(self, sequence: int) -> str | None:
        """The job's state after the entry at ``sequence``; None when it has none there."""
        for entry, view in zip(self.entries, self.views, strict=True):
            if entry.sequence == sequence:
                return view
        return None


@dataclass(frozen=True)
class LedgerFinding:
    """One disagreement audit's ``VerifyLedger`` found."""

    kind: str
    """``edited``, ``deleted``, ``inserted``, ``reordered``, ``checkpoint``, ``column``, ..."""
    sequence: int = 0
    tenant: str = ""
    job: str = ""


@dataclass(frozen=True)
class LedgerVerification:
    """Audit's verification of every tenant's chain and signed checkpoint."""

    ok: bool
    entries: int = 0
    chains: int = 0
    checkpoints_checked: int = 0
    findings: tuple[LedgerFinding, ...] = ()


@dataclass(frozen=True)
class SystemFacts:
    """Everything the checker holds a history against."""

    jobs: Mapping[str, JobRecord]
    """Every job the history names, by ``jobs/{job}``."""
    ledger: LedgerVerification
    unclaimed: tuple[str, ...] = ()
    """Jobs admission accepted for the history's tenants that no client was
    acknowledged with (a submit whose answer was lost, or a duplicate)."""
    grace_seconds: float = 0.0
    """How long jobs still running at the end were given to finish."""
    tenants: tuple[str, ...] = ()
    """The tenants whose accepted jobs were compared (``unclaimed``)."""
