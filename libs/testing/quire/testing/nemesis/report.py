"""A schedule's report (``make partitions`` writes one per schedule): the
seed, the checker's verdict per property, the fault timeline with the jobs
in flight at each strike, and a PNG of the timeline as bands over the
throughput (completions per second, as clients saw them) and the queue age
(the work stream's oldest task, queued or leased, sampled every second)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quire.testing.history import verdicts_markdown
from quire.testing.nemesis.fault import FaultRecord
from quire.testing.nemesis.run import ScheduleResult

__all__ = ["schedule_markdown", "timeline_png", "write_report"]

LISTED_JOBS = 6
"""Jobs named per cell; the rest are counted."""
BAND_COLOURS = (
    "#fde2e1",
    "#e8f0fe",
    "#e6f4ea",
    "#fef7e0",
    "#f3e8fd",
    "#e0f7fa",
    "#fce8f3",
    "#eeeeee",
)


def _jobs(jobs: tuple[str, ...]) -> str:
    if not jobs:
        return "none"
    named = ", ".join(f"`{job.removeprefix('jobs/')}`" for job in jobs[:LISTED_JOBS])
    rest = len(jobs) - LISTED_JOBS
    return named + (f" and {rest} more" if rest > 0 else "")


def _detail(record: FaultRecord) -> str:
    parts = [f"{key}={value}" for key, value in sorted(record.detail.items())]
    if record.error:
        parts.append(f"error={record.error}")
    return "; ".join(parts).replace("|", "/") or "-"


def schedule_markdown(result: ScheduleResult, png: str = "") -> str:
    """The schedule's report as markdown (``png``: the plot's file name)."""
    verdict = "clean" if result.ok else "**violated**"
    jobs = len(result.history.acknowledged())
    lines = [
        f"# Partition schedule, seed {result.seed}: {verdict}",
        "",
        f"Reproduce: `make partitions SEEDS={result.seed}`. {jobs} jobs acknowledged, "
        f"{len(result.completions())} seen completed, {result.seconds:.0f} s in all "
        f"({result.checking_seconds:.0f} s of them checking, after the workload).",
        "",
        verdicts_markdown(result.verdicts, heading="Verdicts", level=2),
        "## Fault timeline",
        "",
        "Seconds from the schedule's start. *In flight*: jobs acknowledged and not yet "
        "seen ended by any client when it struck (the history). *On the target*: those "
        "of them whose work spans on the struck replica (on the replicas connected to a "
        "struck NATS member) were open when it struck (the services' own spans; for a "
        "killed replica, the deliveries it had taken and not finished).",
        "",
        "| # | kind | target | struck | healed | detail | in flight | on the target |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for number, record in enumerate(result.timeline.records, start=1):
        healed = "-" if record.end is None else f"{record.end - result.started:.1f}"
        lines.append(
            f"| {number} | `{record.kind}` | {record.target or '-'} "
            f"| {record.start - result.started:.1f} | {healed} | {_detail(record)} "
            f"| {len(record.in_flight)}: {_jobs(record.in_flight)} "
            f"| {len(record.on_target)}: {_jobs(record.on_target)} |"
        )
    if not result.timeline.records:
        lines.append("| - | nothing struck | | | | | | |")
    planned = ", ".join(
        f"{p.kind} after {p.after_acknowledged} acks for {p.hold:g} s" for p in result.planned
    )
    lines += ["", f"Planned by the seed: {planned or 'nothing'}.", ""]
    if png:
        lines += [f"![fault timeline over throughput and queue age]({png})", ""]
    return "\n".join(lines)


def timeline_png(result: ScheduleResult, path: Path) -> None:
    """Fault bands over completions per second and the oldest queued task's age."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = result.started
    end = max(1.0, result.seconds)
    completions = [moment - t0 for moment in result.completions()]
    bins = [float(second) for second in range(int(end) + 2)]
    figure, (done_axis, age_axis) = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True)
    done_axis.hist(completions, bins=bins, color="#1a73e8")
    done_axis.set_ylabel("completions per second")
    age_axis.plot(
        [sample.monotonic - t0 for sample in result.queues],
        [sample.oldest_age for sample in result.queues],
        color="#d93025",
        label="oldest task in the work queue (s)",
    )
    ready = age_axis.twinx()
    ready.step(
        [sample.monotonic - t0 for sample in result.queues],
        [sample.ready for sample in result.queues],
        where="post",
        color="#5f6368",
        alpha=0.6,
        label="tasks in the work queue",
    )
    ready.set_ylabel("tasks (queued or leased)")
    age_axis.set_ylabel("queue age (s)")
    age_axis.set_xlabel("seconds from the schedule's start")
    age_axis.legend(loc="upper left", fontsize=8)
    kinds = sorted({record.kind for record in result.timeline.records})
    colours = {kind: BAND_COLOURS[i % len(BAND_COLOURS)] for i, kind in enumerate(kinds)}
    for axis in (done_axis, age_axis):
        _bands(axis, result, colours, labelled=axis is done_axis)
    done_axis.set_xlim(0, end)
    verdict = "clean" if result.ok else "VIOLATED"
    figure.suptitle(f"Seed {result.seed}: faults over throughput and queue age ({verdict})")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _bands(axis: Any, result: ScheduleResult, colours: dict[str, str], *, labelled: bool) -> None:
    t0 = result.started
    for number, record in enumerate(result.timeline.records, start=1):
        start = record.start - t0
        stop = (record.end if record.end is not None else t0 + result.seconds) - t0
        axis.axvspan(start, max(stop, start + 0.2), color=colours[record.kind], zorder=0)
        if labelled:
            axis.text(
                start,
                1.0,
                f"{number} {record.kind}\n{record.target}",
                transform=axis.get_xaxis_transform(),
                ha="left",
                va="bottom",
                fontsize=7,
            )


def write_report(result: ScheduleResult, folder: Path) -> Path:
    """``seed-<n>.md`` and ``seed-<n>.png`` under ``folder``; the markdown's path."""
    folder.mkdir(parents=True, exist_ok=True)
    png = folder / f"seed-{result.seed}.png"
    timeline_png(result, png)
    markdown = folder / f"seed-{result.seed}.md"
    markdown.write_text(schedule_markdown(result, png.name))
    return markdown
