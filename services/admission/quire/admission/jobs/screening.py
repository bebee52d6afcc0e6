"""A SubmitJob request's checks before anything is written, for a caller to
read beside its own look-ups.

``Intake.screening`` builds them; the inline sources read them in the same
transaction as what the tenant already has (``InlineSources.keep``), so a
packet with its sources inside costs one read, not two. ``Intake.submit``
then raises the refusal (and counts it) or goes on from what they found.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from sqlalchemy import Connection

from quire.errors import QuireError

__all__ = ["Screening", "Screened"]

Job = TypeVar("Job")
"""What a live key answers with (the intake's accepted job)."""


@dataclass(frozen=True)
class Screening(Generic[Job]):
    """A request's checks before anything is written: whether its key made a
    job already (then that job is the answer), and else its manifest against
    the tenant's sources, systems and the known rulesets (``Intake.screening``)."""

    rulesets: frozenset[str]
    manifest_digest: str
    request_sha: str
    checks: Callable[[Connection], tuple[Job | None, bool]]
    """(the job a live key made, or None; whether the key was absent), or
    the refusal raised."""

    def read(self, connection: Connection) -> Screened[Job]:
        """The checks, in the caller's read transaction; a refusal is kept
        for ``Intake.submit`` to raise (and count), not raised here."""
        try:
            return Screened(self, self.checks(connection))
        except QuireError as refused:
            return Screened(self, refused)


@dataclass(frozen=True)
class Screened(Generic[Job]):
    """A screening and what its read found: the job a live key made (or
    None) and whether the key was absent, or the request's refusal."""

    screening: Screening[Job]
    found: tuple[Job | None, bool] | QuireError
