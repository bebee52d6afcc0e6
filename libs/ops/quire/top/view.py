"""Drawing one frame of ``quire top`` with ``rich``: a row per stage, then
the pipeline's totals and the services that did not answer.

A figure no answering process exports shows as ``-`` (a rate needs two
scrapes, so the first frame has none); a queue older than its budget is red,
a stage working at its limit yellow, a stage with no process answering says
``down``. While a rollout's candidate track has work waiting, a column shows
each stage's candidate backlog and its oldest message.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.filesize import decimal
from rich.table import Table
from rich.text import Text

from quire.top.model import CLASSES, STAGE_NAMES, StageFigures, Top

__all__ = ["render"]

_MISSING = "-"


def _number(value: int | None) -> str:
    return _MISSING if value is None else str(value)


def _rate(value: float | None) -> str:
    return _MISSING if value is None else f"{value:.2f}"


def _age(value: float | None) -> str:
    return _MISSING if value is None else f"{value:.1f}s"


def _pending(stage: StageFigures) -> str:
    return " / ".join(_number(stage.pending.get(c)) for c in CLASSES)


def _oldest(stage: StageFigures) -> Text:
    text = Text()
    for n, priority in enumerate(CLASSES):
        if n:
            text.append(" / ")
        style = "bold red" if stage.over_budget(priority) else ""
        text.append(_age(stage.oldest_ready_age_seconds.get(priority)), style=style)
    return text


def _budgets(top: Top) -> str:
    """The queue-age budget, once when every stage and class shares it."""
    budgets = {s.age_budget_seconds.get(c) for s in top.stages for c in CLASSES} - {None}
    if not budgets:
        return _MISSING
    if len(budgets) == 1:
        return _age(budgets.pop())
    return "varies"


def _in_flight(stage: StageFigures) -> Text:
    shown = f"{_number(stage.in_flight)} / {_number(stage.limit)}"
    full = stage.in_flight is not None and stage.limit and stage.in_flight >= stage.limit
    return Text(shown, style="yellow" if full else "")


def _temp(stage: StageFigures) -> str:
    if stage.temp_used_bytes is None and stage.temp_budget_bytes is None:
        return _MISSING
    used = _MISSING if stage.temp_used_bytes is None else decimal(stage.temp_used_bytes)
    budget = _MISSING if stage.temp_budget_bytes is None else decimal(stage.temp_budget_bytes)
    return f"{used} / {budget}"


def _rolling_out(top: Top) -> bool:
    """Whether any stage's candidate track has work waiting: its column is
    shown then, and the table keeps its width otherwise."""
    return any(
        (s.candidate_pending or 0) > 0
        or any(a for a in (s.candidate_oldest_ready_age_seconds or {}).values())
        for s in top.stages
    )


def _candidate(stage: StageFigures) -> str:
    """The candidate track's backlog and its oldest message, either class."""
    ages = [a for a in (stage.candidate_oldest_ready_age_seconds or {}).values() if a is not None]
    if stage.candidate_pending is None and not ages:
        return _MISSING
    return f"{_number(stage.candidate_pending)} ({_age(max(ages) if ages else None)})"


def _dead(stage: StageFigures) -> Text:
    return Text(_number(stage.dead_letters), style="bold red" if stage.dead_letters else "")


_COLUMNS = (
    "stage",
    "procs",
    "pending int/batch",
    "oldest ready int/batch",
    "in flight / limit",
    "done/s",
    "retries/s",
    "retries",
    "dead letters",
    "temp used / budget",
)
_CANDIDATE_COLUMN = "candidate (oldest)"


def _table(top: Top) -> Table:
    every = _MISSING if top.interval_seconds is None else f"{top.interval_seconds:.1f}s"
    table = Table(
        title=f"quire top: rates over {every}, queue-age budget {_budgets(top)}",
        title_justify="left",
    )
    table.add_column(_COLUMNS[0], no_wrap=True, min_width=max(map(len, STAGE_NAMES)))
    candidates = _rolling_out(top)
    for header in (*_COLUMNS[1:], *((_CANDIDATE_COLUMN,) if candidates else ())):
        table.add_column(header, justify="right", no_wrap=True)
    for stage in top.stages:
        processes = Text(str(stage.processes), style="" if stage.processes else "bold red")
        table.add_row(
            Text(stage.stage, style="bold"),
            processes,
            _pending(stage),
            _oldest(stage),
            _in_flight(stage),
            _rate(stage.completed_per_second),
            _rate(stage.retries_per_second),
            _number(stage.retries),
            _dead(stage),
            _temp(stage),
            *((_candidate(stage),) if candidates else ()),
        )
    return table


def _footer(top: Top) -> Text:
    totals = top.totals
    text = Text(
        f"jobs accepted {_rate(totals.accepted_per_second)}/s ({_number(totals.accepted)} in all)"
        f"   completed {_rate(totals.completed_per_second)}/s ({_number(totals.completed)} in all)"
    )
    up = len(top.services) - len(top.down)
    text.append(f"\nservices answering: {up} of {len(top.services)}")
    for service in top.down:
        text.append(
            f"\ndown: {service.service} at {service.address} ({service.error})", style="bold red"
        )
    return text


_BREAKER_STYLES = {"closed": "", "half-open": "yellow", "open": "bold red"}


def _sources(top: Top) -> Table:
    table = Table(title="source systems", title_justify="left")
    for header in ("system", "breaker", "fetches/s", "failures/s", "deferred/s"):
        table.add_column(header, justify="left" if header == "system" else "right", no_wrap=True)
    for source in top.sources:
        breaker = source.breaker or _MISSING
        if source.breaker == "open" and source.open_in > 1:
            breaker = f"open in {source.open_in}"
        table.add_row(
            Text(source.system, style="bold"),
            Text(breaker, style=_BREAKER_STYLES.get(source.breaker or "", "")),
            _rate(source.fetches_per_second),
            _rate(source.failures_per_second),
            _rate(source.deferrals_per_second),
        )
    return table


def render(top: Top) -> RenderableType:
    if top.sources:
        return Group(_table(top), _sources(top), _footer(top))
    return Group(_table(top), _footer(top))
