"""The checker's verdicts as markdown: a table of every property (holds, or
violated and by whom), then each violation, for a run's report (``make
partitions`` embeds it) or a failing test's output."""

from __future__ import annotations

from collections.abc import Iterable

from quire.testing.history.verdicts import Verdict, Verdicts

__all__ = ["verdicts_markdown"]

LISTED = 50
"""Violations listed per property; the rest are counted."""


def verdicts_markdown(verdicts: Verdicts, *, heading: str = "History check", level: int = 2) -> str:
    """The verdicts under ``heading`` (a markdown heading of ``level``)."""
    held = sum(v.holds for v in verdicts)
    total = len(verdicts.verdicts)
    said = "every property holds" if verdicts.ok else f"{total - held} of {total} violated"
    lines = [f"{'#' * level} {heading}: {said}", ""]
    lines += [
        "| property | promise | verdict | checked | offending |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [_row(verdict) for verdict in verdicts]
    for verdict in verdicts.violated():
        lines += ["", f"{'#' * (level + 1)} `{verdict.prop.name}` violated", ""]
        lines += _violations(verdict)
    return "\n".join(lines) + "\n"


def _row(verdict: Verdict) -> str:
    prop = verdict.prop
    mark = "holds" if verdict.holds else "**violated**"
    subjects = verdict.subjects
    offending = ", ".join(f"`{s}`" for s in subjects[:5])
    if len(subjects) > 5:
        offending += f" and {len(subjects) - 5} more"
    return (
        f"| `{prop.name}` | {prop.promise} | {mark} | {verdict.checked} {prop.counts} "
        f"| {offending} |"
    )


def _violations(verdict: Verdict) -> Iterable[str]:
    shown = verdict.violations[:LISTED]
    yield from (f"- `{v.subject}`: {v.detail}" for v in shown)
    rest = len(verdict.violations) - len(shown)
    if rest:
        yield f"- and {rest} more"
