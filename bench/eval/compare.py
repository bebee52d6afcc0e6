"""What changed between the approved figures and this run's, and where."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.eval.measure import Grid, tile_box

__all__ = ["Change", "compare"]


@dataclass(frozen=True)
class Change:
    document: str
    profile: str
    page: int | None
    """1-based; None for the whole rendering (its page count, its totals)."""
    what: str
    where: str = ""

    def line(self) -> str:
        page = f" page {self.page}" if self.page is not None else ""
        where = f" at {self.where}" if self.where else ""
        return f"{self.document}/{self.profile}{page}: {self.what}{where}"


def compare(
    document: str,
    profile: str,
    expected: dict[str, Any] | None,
    measured: dict[str, Any],
    grid: Grid,
) -> list[Change]:
    changes = []
    if measured["totals"] != measured["source_totals"]:
        changes.append(
            Change(document, profile, None, "rendered totals disagree with the source's")
        )
    if expected is None:
        return [*changes, Change(document, profile, None, "new: nothing approved yet")]
    if expected["pages"] != measured["pages"]:
        changes.append(
            Change(document, profile, None, f"pages {expected['pages']} -> {measured['pages']}")
        )
    was, now = expected["text"], measured["text"]
    for index in range(max(len(was), len(now))):
        before = was[index] if index < len(was) else None
        after = now[index] if index < len(now) else None
        if before != after:
            what = "text changed" if before and after else ("page added" if after else "page gone")
            changes.append(Change(document, profile, index + 1, what))
    for page, tiles in measured["tiles"].items():
        approved = expected["tiles"].get(page)
        if approved is None:
            continue  # a page selected now that was not before: its text is compared
        moved = [i for i, (a, b) in enumerate(zip(approved, tiles, strict=True)) if a != b]
        if moved:
            changes.append(
                Change(document, profile, int(page), "image changed", _where(moved, grid))
            )
    for key in sorted(set(expected["totals"]) | set(measured["totals"])):
        before, after = expected["totals"].get(key), measured["totals"].get(key)
        if before != after:
            changes.append(Change(document, profile, None, f"total {key}: {before} -> {after}"))
    return changes


def _where(tiles: list[int], grid: Grid) -> str:
    """The changed tiles' bounding box, in points from the page's top left."""
    boxes = [tile_box(i, grid) for i in tiles]
    left, top = min(b[0] for b in boxes), min(b[1] for b in boxes)
    right, bottom = max(b[2] for b in boxes), max(b[3] for b in boxes)
    return (
        f"x {left:.0f}-{right:.0f} pt, y {top:.0f}-{bottom:.0f} pt from the top"
        f" ({len(tiles)} of {grid.rows * grid.columns} tiles)"
    )
