"""A parked job's sources as the validator found them, for the review's
reader (``Review.sources``): each source's sniffed type, its pages, and, when
it was repaired, the rewrite's digest and the damage codes.

Read from what the validator already keeps: the validation's findings (one
per source, in manifest order, written with the review) hold every field;
the review's task holds where each source and its rewrite are stored.
Digests, counts and codes only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from quire.database import Database
from quire.validator import tables

__all__ = ["SourceSeen", "sources_seen", "sources_of"]


@dataclass(frozen=True)
class SourceSeen:
    """One source of a reviewed job, as inspection found it."""

    position: int
    sha256: str
    detected_type: str
    page_count: int
    rewrite_sha256: str
    """The clean rewrite's digest; "" when the source was not repaired."""
    damage_codes: tuple[str, ...]
    differing_pages: tuple[int, ...]
    """Pages the second reader read otherwise (``faithfulness``)."""

    @property
    def repaired(self) -> bool:
        return bool(self.rewrite_sha256)


def _seen(finding: Mapping[str, Any]) -> SourceSeen:
    return SourceSeen(
        position=int(finding.get("position", -1)),
        sha256=str(finding.get("sha256", "")),
        detected_type=str(finding.get("detected_type", "")),
        page_count=int(finding.get("page_count") or 0),
        rewrite_sha256=str(finding.get("normalized_sha256") or ""),
        damage_codes=tuple(str(code) for code in finding.get("warnings") or ()),
        differing_pages=tuple(int(page) for page in finding.get("differing_pages") or ()),
    )


def sources_seen(findings: Sequence[Mapping[str, Any]]) -> list[SourceSeen]:
    """The sources of a validation's stored findings, in manifest order."""
    return sorted((_seen(finding) for finding in findings), key=lambda s: s.position)


async def sources_of(database: Database, jobs: Sequence[str]) -> dict[str, list[SourceSeen]]:
    """Each job's sources, from its validation (a job without one has none)."""
    if not jobs:
        return {}
    table = tables.validations
    rows = await database.read(
        lambda s: s.execute(
            select(table.c.job, table.c.findings).where(table.c.job.in_(list(jobs)))
        ).all()
    )
    return {row.job: sources_seen(row.findings or []) for row in rows}
