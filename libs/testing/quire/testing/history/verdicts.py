"""The checker's answer: for each property of issue 42, whether it holds,
and if not, which jobs (or requests, or ledger entries) break it and how.

A violation names its subject and says what is wrong in states, sequences,
codes and reason codes; never document content.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

__all__ = [
    "Property",
    "Violation",
    "Verdict",
    "Verdicts",
    "PROPERTIES",
    "ENDED",
    "HISTORY_WHOLE",
    "ONE_SIGNATURE",
    "LEDGER_VERIFIES",
    "NO_CONTRADICTION",
    "REFUSALS_TYPED",
    "ONE_JOB_PER_REQUEST",
]


@dataclass(frozen=True)
class Property:
    """One promise the checker proves over a history."""

    name: str
    """A stable id (``ended``), for reports and tests."""
    promise: str
    """The promise, in a line."""
    counts: str
    """What a verdict's ``checked`` counts (``jobs``, ``refusals``)."""


ENDED = Property(
    "ended",
    "every acknowledged job reached exactly one terminal state, or NEEDS_REVIEW",
    "acknowledged jobs",
)
HISTORY_WHOLE = Property(
    "history_whole",
    "no job completed without its whole ledger history, in order",
    "completed jobs",
)
ONE_SIGNATURE = Property(
    "one_signature",
    "each completed job has exactly one signature, and its artifact verifies",
    "completed jobs",
)
LEDGER_VERIFIES = Property(
    "ledger_verifies",
    "every ledger chain and checkpoint verifies, and each job's evidence with them",
    "jobs evidenced",
)
NO_CONTRADICTION = Property(
    "no_contradiction",
    "no state a client saw was later contradicted",
    "observed states",
)
REFUSALS_TYPED = Property(
    "refusals_typed",
    "every refusal was typed, and retryable where the fault was transient",
    "refusals",
)
ONE_JOB_PER_REQUEST = Property(
    "one_job_per_request",
    "submits with one request id map to one job, and no job was accepted twice",
    "request ids",
)
PROPERTIES = (
    ENDED,
    HISTORY_WHOLE,
    ONE_SIGNATURE,
    LEDGER_VERIFIES,
    NO_CONTRADICTION,
    REFUSALS_TYPED,
    ONE_JOB_PER_REQUEST,
)


@dataclass(frozen=True, order=True)
class Violation:
    """One subject that breaks a property, and how."""

    subject: str
    """``jobs/{job}``, ``request {id}`` or ``sequence {n}``."""
    detail: str


@dataclass(frozen=True)
class Verdict:
    """One property's verdict over one history."""

    prop: Property
    checked: int
    """How many subjects were checked (``prop.counts``)."""
    violations: tuple[Violation, ...] = ()

    @property
    def holds(self) -> bool:
        return not self.violations

    @property
    def subjects(self) -> list[str]:
        """The offending subjects, each once, in order."""
        return sorted({v.subject for v in self.violations})


@dataclass(frozen=True)
class Verdicts:
    """Every property's verdict, in ``PROPERTIES`` order."""

    verdicts: tuple[Verdict, ...]

    @property
    def ok(self) -> bool:
        return all(v.holds for v in self.verdicts)

    def __iter__(self) -> Iterator[Verdict]:
        return iter(self.verdicts)

    def __getitem__(self, name: str) -> Verdict:
        """The verdict of the property named ``name``."""
        return next(v for v in self.verdicts if v.prop.name == name)

    def violated(self) -> list[Verdict]:
        return [v for v in self.verdicts if not v.holds]

    def summary(self) -> str:
        """One line per violated property with its subjects, for an assertion's message."""
        if self.ok:
            return "every property holds"
        return "\n".join(
            f"{v.prop.name}: " + "; ".join(f"{x.subject} {x.detail}" for x in v.violations)
            for v in self.violated()
        )
