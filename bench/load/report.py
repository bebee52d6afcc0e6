"""Turns a load run's measurements into report.md, PNG plots and results.json."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from quire.pipeline import State

__all__ = ["write", "percentile"]

STAGE_KINDS = {
    "admission": ("admission",),
    "validate": ("validator", "validator workers"),
    "assemble": ("assembler", "assembler workers"),
    "sign": ("signer", "signer workers"),
    "audit": ("audit",),
    "nats-server": ("nats-server",),
}
# Time a job spends in each ledger state, and what that time mostly is.
STATE_MEANING = (
    (State.ACCEPTED, "validate queue"),
    (State.VALIDATING, "validation"),
    (State.REVIEWING, "rules review"),
    (State.ASSEMBLING, "assemble queue + assembly"),
    (State.SIGNING, "sign queue + signing"),
    (State.COMMITTING, "commit queue + completion by audit"),
)
TERMINAL = (State.COMPLETED, State.REJECTED, State.FAILED, State.CANCELLED)


def percentile(values: list[float], share: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def _ms(value: float) -> str:
    return "–" if math.isnan(value) else f"{value * 1000:.0f}"


def _s(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.2f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines + [""]


def _phase_bounds(results: dict[str, Any]) -> list[tuple[dict[str, Any], float, float]]:
    bounds, start = [], results["start_wall"]
    for phase in results["phases"]:
        bounds.append((phase, start, start + phase["seconds"]))
        start += phase["seconds"]
    return bounds


def _per_job(results: dict[str, Any]) -> list[dict[str, Any]]:
    jobs = []
    for record in results["records"]:
        events = results["events"].get(record["job"], []) if record["job"] else []
        terminal = next((e for e in reversed(events) if e["to_state"] in TERMINAL), None)
        parked = any(e["to_state"] == State.NEEDS_REVIEW for e in events)
        entered: dict[str, float] = {}
        in_state: dict[str, float] = defaultdict(float)
        for event in sorted(events, key=lambda e: e["sequence"]):
            if event["from_state"] in entered:
                in_state[event["from_state"]] += event["occurred_at"] - entered.pop(
                    event["from_state"]
                )
            entered[event["to_state"]] = event["occurred_at"]
        jobs.append(
            {
                **record,
                "end": terminal["to_state"] if terminal else ("PARKED" if parked else ""),
                "reason": terminal["reason"] if terminal else "",
                "latency": terminal["recorded_at"] - record["arrival"] if terminal else None,
                "attempts": max((e["attempt"] for e in events), default=0),
                "audit_lag": [e["recorded_at"] - e["occurred_at"] for e in events],
                "in_state": dict(in_state),
                "ended_at": terminal["recorded_at"] if terminal else None,
            }
        )
    return jobs


def _class_row(label: str, jobs: list[dict[str, Any]], seconds: float) -> list[str]:
    accepted = [j for j in jobs if j["job"]]
    completed = [j for j in accepted if j["end"] == State.COMPLETED]
    rejected = [j for j in accepted if j["end"] == State.REJECTED]
    failed = [j for j in accepted if j["end"] in (State.FAILED, State.CANCELLED)]
    unfinished = [j for j in accepted if not j["end"] or j["end"] == "PARKED"]
    latencies = [j["latency"] for j in accepted if j["latency"] is not None]
    attempts = [j["attempts"] for j in accepted if j["attempts"]]
    lags = [lag for j in accepted for lag in j["audit_lag"]]
    refused = len(jobs) - len(accepted)
    unexpected = sum(1 for j in accepted if j["end"] in TERMINAL and j["end"] != j["expect"])
    return [
        label,
        str(len(jobs)),
        f"{len(accepted)} ({len(accepted) / seconds:.2f}/s)",
        f"{len(completed)} ({len(completed) / seconds:.2f}/s)",
        f"{len(rejected) / len(accepted):.0%}" if accepted else "–",
        str(refused),
        f"{len(failed)} / {len(unfinished)}",
        str(unexpected),
        _ms(percentile(latencies, 0.50)),
        _ms(percentile(latencies, 0.95)),
        _ms(percentile(latencies, 0.99)),
        f"{sum(attempts) / len(attempts):.2f} / {max(attempts)}" if attempts else "–",
        f"{_ms(percentile(lags, 0.50))} / {_ms(percentile(lags, 0.95))} / "
        f"{_ms(max(lags) if lags else math.nan)}",
    ]


def _stage_age(
    results: dict[str, Any],
) -> tuple[dict[str, list[tuple[float, float, int]]], list[tuple[float, float]]]:
    per_stage: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    worst: dict[float, float] = defaultdict(float)
    for at, stage, pending, unacked, age in results["queue_samples"]:
        per_stage[stage].append((at, age, pending + unacked))
        key = round(at, 1)
        worst[key] = max(worst[key], age)
    return per_stage, sorted(worst.items())


def _pass_condition(
    results: dict[str, Any], jobs: list[dict[str, Any]], worst: list[tuple[float, float]]
) -> tuple[bool, list[str]]:
    bounds = _phase_bounds(results)
    admitted = {
        phase["name"]: sum(1 for j in jobs if j["phase"] == phase["name"] and j["job"])
        / phase["seconds"]
        for phase, _, _ in bounds
    }
    top_index = max(range(len(bounds)), key=lambda i: admitted[bounds[i][0]["name"]])
    top, top_start, top_end = bounds[top_index]
    if top_index > 0:
        _, before_start, before_end = bounds[top_index - 1]
    else:
        before_start, before_end = top_start - 5.0, top_start
    before = [age for at, age in worst if before_start + 2.0 <= at <= before_end]
    baseline = percentile(before, 0.95) if before else 0.0
    threshold = max(baseline * 1.5, baseline + 1.0)
    recovered = None
    after = [(at, age) for at, age in worst if at >= top_end]
    for index, (at, age) in enumerate(after):
        nxt = after[index + 1][1] if index + 1 < len(after) else age
        if age <= threshold and nxt <= threshold:
            recovered = at - top_end
            break
    limit = 2 * top["seconds"]
    ok = recovered is not None and recovered <= limit
    peak = max((age for at, age in worst if top_start <= at <= top_end + limit), default=0.0)
    lines = [
        f"- Highest admitted rate: phase **{top['name']}** ({top['kind']}, "
        f"{top['seconds']:.0f} s), {admitted[top['name']]:.2f} jobs/s admitted "
        f"(scheduled {top['rate']:.2f}/s).",
        f"- Baseline oldest queue age (p95 over the phase before, worst stage): "
        f"{baseline:.2f} s; counted as back at baseline below {threshold:.2f} s "
        "(1.5x baseline or baseline + 1 s, whichever is higher).",
        f"- Peak oldest queue age from the phase's start to the limit: {peak:.2f} s.",
        (
            f"- Back at baseline {recovered:.1f} s after the phase ended; limit "
            f"{limit:.0f} s (twice its length)."
            if recovered is not None
            else f"- Never back at baseline before the samples ended (limit {limit:.0f} s)."
        ),
        f"- **{'PASS' if ok else 'FAIL'}**: queue age "
        f"{'returned' if ok else 'did not return'} to baseline within twice the "
        f"{top['name']} phase's length.",
    ]
    return ok, lines


def _plots(
    results: dict[str, Any],
    jobs: list[dict[str, Any]],
    per_stage: dict[str, list[tuple[float, float, int]]],
    classes: list[str],
    out: Path,
) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = results["start_wall"]
    bounds = _phase_bounds(results)
    colours = {"plateau": "#e8f0fe", "burst": "#fde2e1"}

    def shade(axis: Any) -> None:
        for phase, start, end in bounds:
            axis.axvspan(start - t0, end - t0, color=colours.get(phase["kind"], "#eee"), zorder=0)
            axis.text(
                (start + end) / 2 - t0,
                1.0,
                phase["name"],
                transform=axis.get_xaxis_transform(),
                ha="center",
                va="bottom",
                fontsize=8,
            )

    written = []
    fig, (age_axis, depth_axis) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for stage, samples in per_stage.items():
        age_axis.plot([s[0] - t0 for s in samples], [s[1] for s in samples], label=stage)
        depth_axis.plot([s[0] - t0 for s in samples], [s[2] for s in samples], label=stage)
    shade(age_axis)
    shade(depth_axis)
    age_axis.set_ylabel("oldest message age (s)")
    depth_axis.set_ylabel("pending + unacked")
    depth_axis.set_xlabel("seconds since the first arrival")
    age_axis.legend(loc="upper right")
    fig.suptitle("Queue age and depth per stage (JetStream, sampled every 0.5 s)", y=0.995)
    fig.tight_layout()
    fig.savefig(out / "queue_age.png", dpi=110)
    plt.close(fig)
    written.append("queue_age.png")

    fig, axis = plt.subplots(figsize=(10, 5))
    data = [
        [j["latency"] for j in jobs if j["cls"] == c and j["latency"] is not None] for c in classes
    ]
    axis.boxplot(data, whis=(1, 99), showfliers=True)
    axis.set_xticks(range(1, len(classes) + 1), classes)
    for index, values in enumerate(data, start=1):
        if values:
            axis.scatter(
                [index], [percentile(values, 0.95)], marker="_", s=600, color="red", zorder=3
            )
    axis.set_yscale("log")
    axis.set_ylabel("arrival to terminal (s, log)")
    axis.set_title("Terminal latency per class (box p25–p75, whiskers p1–p99, red bar p95)")
    fig.tight_layout()
    fig.savefig(out / "latency_by_class.png", dpi=110)
    plt.close(fig)
    written.append("latency_by_class.png")

    fig, (acc_axis, done_axis) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    end = max([results["load_ended"]] + [j["ended_at"] or 0 for j in jobs]) - t0
    bins = [b * 2.0 for b in range(int(end / 2.0) + 2)]
    acc = [[j["submitted"] - t0 for j in jobs if j["cls"] == c and j["submitted"]] for c in classes]
    done = [[j["ended_at"] - t0 for j in jobs if j["cls"] == c and j["ended_at"]] for c in classes]
    acc_axis.hist(acc, bins=bins, stacked=True, label=classes)
    done_axis.hist(done, bins=bins, stacked=True, label=classes)
    shade(acc_axis)
    shade(done_axis)
    acc_axis.set_ylabel("accepted per 2 s")
    done_axis.set_ylabel("terminal per 2 s")
    done_axis.set_xlabel("seconds since the first arrival")
    acc_axis.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=110)
    plt.close(fig)
    written.append("throughput.png")

    series = [row for row in results["proc_series"] if row["t"] >= t0 - 1]
    if len(series) > 1:
        fig, (cpu_axis, mem_axis) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
        kinds = sorted(k for k in series[0] if k.startswith("cpu "))
        times = [row["t"] - t0 for row in series]
        for kind in kinds:
            rates = [0.0] + [
                (b.get(kind, 0) - a.get(kind, 0)) / max(b["t"] - a["t"], 1e-3)
                for a, b in zip(series, series[1:], strict=False)
            ]
            if max(rates) > 0.02:
                cpu_axis.plot(times, rates, label=kind.removeprefix("cpu "))
        for key in sorted(k for k in series[0] if k.endswith("worker rss MiB")):
            mem_axis.plot(times, [row.get(key, 0) for row in series], label=key)
        mem_axis.plot(
            times, [row.get("tmp MiB", 0) for row in series], label="blobs/.tmp MiB", ls="--"
        )
        shade(cpu_axis)
        shade(mem_axis)
        cpu_axis.set_ylabel("CPU cores")
        mem_axis.set_ylabel("MiB")
        mem_axis.set_xlabel("seconds since the first arrival")
        cpu_axis.legend(loc="upper right", fontsize=7, ncol=2)
        mem_axis.legend(loc="upper right", fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "resources.png", dpi=110)
        plt.close(fig)
        written.append("resources.png")
    return written


def _worksheet(
    calibrations: list[dict[str, Any]], rates: dict[str, float], target: float
) -> list[str]:
    cost = {
        c["cls"]: {
            stage: sum(c["cpu"].get(k, 0.0) for k in kinds) for stage, kinds in STAGE_KINDS.items()
        }
        for c in calibrations
    }
    rows = []
    for stage in STAGE_KINDS:
        demand = sum(rate * cost.get(cls, {}).get(stage, 0.0) for cls, rate in rates.items())
        replicas = max(1, math.ceil(demand / target - 1e-9))
        parts = ", ".join(
            f"{cls} {rate * cost.get(cls, {}).get(stage, 0.0):.2f}"
            for cls, rate in rates.items()
            if rate
        )
        rows.append([stage, f"{demand:.2f}", parts, str(replicas)])
    return _table(
        ["stage process kind", "CPU cores needed", "by class (cores)", f"replicas at {target:.0%}"],
        rows,
    )


def write(
    results: dict[str, Any],
    out: Path,
    *,
    worksheet: dict[str, float] | None = None,
    target_utilisation: float = 0.7,
) -> str:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, default=str))
    jobs = _per_job(results)
    classes = [
        c
        for c in ("contract", "lease", "scan", "invoice", "malformed")
        if any(j["cls"] == c for j in jobs)
    ]
    seconds = sum(p["seconds"] for p in results["phases"])
    per_stage, worst = _stage_age(results)
    ok, pass_lines = _pass_condition(results, jobs, worst)
    plots = _plots(results, jobs, per_stage, classes, out)

    md = [
        "# Quire load report",
        "",
        f"Profile **{results['profile']}** on {results['cores']} cores; harness ran "
        f"{results.get('harness_seconds', 0):.0f} s. Open-loop arrivals over {seconds:.0f} s "
        f"(then a drain), mix "
        + ", ".join(f"{c} {s:.0%}" for c, s in results["mix"].items())
        + f". Capacity estimated from the calibration runs: {results['capacity_estimate']:.2f} jobs/s "
        "(cores / mixed CPU per job); the phases are scaled to it. Other work on the machine "
        "shares the CPU and is not subtracted.",
        "",
        "## Phases",
        "",
    ]
    rows = []
    for phase, _, _ in _phase_bounds(results):
        mine = [j for j in jobs if j["phase"] == phase["name"]]
        accepted = sum(1 for j in mine if j["job"])
        rows.append(
            [
                phase["name"],
                phase["kind"],
                f"{phase['seconds']:.0f}",
                f"{phase['rate']:.2f}",
                str(len(mine)),
                f"{accepted / phase['seconds']:.2f}",
            ]
        )
    md += _table(
        ["phase", "kind", "seconds", "scheduled jobs/s", "arrivals", "admitted jobs/s"], rows
    )

    md += [
        "## Per class",
        "",
        "Latency is from the scheduled arrival (upload included) to audit recording the "
        "terminal state (ledger `recorded_at`). Attempts: the highest JetStream delivery "
        "count among a job's ledger entries (mean / max). Audit lag: ledger `recorded_at` "
        "minus the event's `occurred_at` (p50 / p95 / max ms). Rates are per second of the "
        "arrival schedule. *unexpected*: ended other than the class's expectation (malformed "
        "and wrong-total invoices should be REJECTED, the rest COMPLETED).",
        "",
    ]
    header = [
        "class",
        "arrived",
        "accepted",
        "completed",
        "rejection rate",
        "refused at door",
        "failed / unfinished",
        "unexpected",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "attempts",
        "audit lag ms",
    ]
    rows = [_class_row(c, [j for j in jobs if j["cls"] == c], seconds) for c in classes]
    rows.append(_class_row("**all classes (blended)**", jobs, seconds))
    md += _table(header, rows)

    md += [
        "### Time in each ledger state, p95 ms (each stage enters the next stage's state when it hands the job on, so a state's time is that stage's queue wait plus its work)",
        "",
    ]
    header = ["class"] + [f"{state} ({meaning})" for state, meaning in STATE_MEANING]
    rows = []
    for cls in classes:
        mine = [j for j in jobs if j["cls"] == cls]
        rows.append(
            [cls]
            + [
                _ms(percentile([j["in_state"][s] for j in mine if s in j["in_state"]], 0.95))
                for s, _ in STATE_MEANING
            ]
        )
    md += _table(header, rows)

    reasons: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for job in jobs:
        key = (
            job["end"] + (f" {job['reason']}" if job["reason"] else "")
            if job["job"]
            else f"refused {job['refused']}"
        )
        reasons[job["cls"]][key or "unfinished"] += 1
    md += ["### Outcomes", ""]
    md += _table(
        ["class", "outcomes"],
        [[c, ", ".join(f"{k}: {v}" for k, v in sorted(reasons[c].items()))] for c in classes],
    )

    md += [
        "## Cost per class (each class alone, calibration)",
        "",
        "Each class ran alone, two jobs at a time; CPU is per job with the idle stack's CPU "
        "removed. Parser CPU is the sandbox workers' CPU (validator, assembler and signer "
        "workers, short-lived ones included). Memory is the largest sandbox worker's RSS "
        "sampled every 0.5 s; temporary space is the peak size of `blobs/.tmp` (sampled). "
        "Lock wait is an estimate: threads of admission and audit found every 0.1 s in the "
        "sleep SQLite's busy handler uses, times the sample interval.",
        "",
    ]
    kinds = sorted({k for c in results["calibrations"] for k in c["cpu"]})
    header = [
        "class",
        "jobs",
        "CPU ms/job total",
        "parser CPU ms/job",
        "peak worker RSS MiB",
        "tmp peak MiB",
        "lock wait ms/job (adm / audit)",
        "outcomes",
    ]
    rows = []
    for c in results["calibrations"]:
        parser = sum(v for k, v in c["cpu"].items() if k.endswith("workers"))
        rows.append(
            [
                c["cls"],
                str(c["jobs"]),
                f"{sum(c['cpu'].values()) * 1000:.0f}",
                f"{parser * 1000:.0f}",
                " / ".join(
                    f"{c['worker_rss_mib'].get(s, 0):.0f}"
                    for s in ("validator", "assembler", "signer")
                ),
                f"{c['tmp_peak_mib']:.1f}",
                f"{c['lock_wait_seconds'].get('admission', 0) / c['jobs'] * 1000:.0f} / "
                f"{c['lock_wait_seconds'].get('audit', 0) / c['jobs'] * 1000:.0f}",
                ", ".join(f"{k}: {v}" for k, v in c["outcomes"].items()),
            ]
        )
    md += ["Peak worker RSS is shown validator / assembler / signer.", ""]
    md += _table(header, rows)
    md += ["CPU ms per job by process kind:", ""]
    md += _table(
        ["class"] + kinds,
        [
            [c["cls"]] + [f"{c['cpu'].get(k, 0) * 1000:.0f}" for k in kinds]
            for c in results["calibrations"]
        ],
    )

    accepted = sum(1 for j in jobs if j["job"]) or 1
    load_cpu = results["load_cpu"]
    md += [
        "## Whole load run (all classes together)",
        "",
        f"CPU over the run (arrivals and drain, {results['load_ended'] - results['start_wall']:.0f} s), "
        f"per accepted job ({accepted}):",
        "",
    ]
    md += _table(
        ["process kind", "CPU s", "ms per job"],
        [
            [k, f"{v:.1f}", f"{v / accepted * 1000:.0f}"]
            for k, v in sorted(load_cpu.items(), key=lambda i: -i[1])
        ]
        + [
            [
                "**total**",
                f"{sum(load_cpu.values()):.1f}",
                f"{sum(load_cpu.values()) / accepted * 1000:.0f}",
            ]
        ],
    )
    md += [
        "- Peak sandbox worker RSS (sampled): "
        + ", ".join(f"{s} {v:.0f} MiB" for s, v in results["load_worker_rss_mib"].items())
        + "; highest VmHWM of any worker: "
        + ", ".join(f"{s} {v:.0f} MiB" for s, v in results["worker_hwm_mib"].items())
        + ".",
        f"- Peak temporary space (`blobs/.tmp`, sampled every 0.5 s): {results['load_tmp_peak_mib']:.1f} MiB.",
        "- Database lock time (estimate by sampling, see above): "
        + ", ".join(f"{s} {v:.1f} s" for s, v in results["load_lock_wait_seconds"].items())
        + "; 'database is locked' lines in the service logs: "
        + ", ".join(
            f"{s} {n}" for s, n in sorted(results["database_locked_log_lines"].items()) if n
        )
        + (" none" if not any(results["database_locked_log_lines"].values()) else "")
        + ".",
        f"- Service restarts during the run: {results['restarts']}; queue sampler errors: {results['queue_errors']}.",
        "",
        "## Oldest queue age per stage",
        "",
        "Sampled every 0.5 s from JetStream: per stage (both priorities), pending + "
        "unacknowledged messages and the age of the oldest message still in the work stream "
        "for that stage (read at the consumer's ack floor + 1). Plot: `queue_age.png`.",
        "",
    ]
    rows = []
    for phase, start, end in _phase_bounds(results) + [
        ({"name": "drain"}, _phase_bounds(results)[-1][2], results["load_ended"])
    ]:
        row = [phase["name"]]
        for samples in per_stage.values():
            ages = [a for t, a, _ in samples if start <= t < end]
            depth = [d for t, _, d in samples if start <= t < end]
            row.append(f"{max(ages, default=0):.2f} s / {max(depth, default=0)}")
        rows.append(row)
    md += _table(["phase"] + [f"{s}: max age / max depth" for s in per_stage], rows)

    md += ["## Pass condition", ""] + pass_lines + [""]
    md += [
        "Per-class p95 (arrival to terminal): "
        + ", ".join(
            f"{c} {_ms(percentile([j['latency'] for j in jobs if j['cls'] == c and j['latency'] is not None], 0.95))} ms"
            for c in classes
        )
        + ".",
        "",
    ]

    measured = {}
    top = max(results["phases"], key=lambda p: p["rate"] if p["kind"] == "plateau" else 0)
    for cls in classes:
        measured[cls] = (
            sum(1 for j in jobs if j["cls"] == cls and j["phase"] == top["name"] and j["job"])
            / top["seconds"]
        )
    md += [
        "## Capacity worksheet",
        "",
        "CPU seconds per job per stage process kind come from the calibration above (a "
        "stage's main process plus its sandbox workers). Demand in cores = sum over classes "
        "of jobs/s x CPU s per job; one replica is counted as one core's worth of CPU, and "
        f"replicas = ceil(demand / {target_utilisation:.0%}). Set your own mix with "
        "`LOAD_WORKSHEET=contract=20,lease=1,scan=3,invoice=10,malformed=2` and the target "
        "with `LOAD_TARGET_UTIL=0.7`.",
        "",
        "CPU seconds per job:",
        "",
    ]
    md += _table(
        ["class"] + list(STAGE_KINDS),
        [
            [c["cls"]]
            + [f"{sum(c['cpu'].get(k, 0) for k in kinds_):.3f}" for kinds_ in STAGE_KINDS.values()]
            for c in results["calibrations"]
        ],
    )
    md += [
        f"Mix measured in the **{top['name']}** plateau (admitted jobs/s): "
        + ", ".join(f"{c} {r:.2f}" for c, r in measured.items()),
        "",
    ]
    md += _worksheet(results["calibrations"], measured, target_utilisation)
    if worksheet:
        md += [
            "Mix given in LOAD_WORKSHEET (jobs/s): "
            + ", ".join(f"{c} {r:g}" for c, r in worksheet.items()),
            "",
        ]
        md += _worksheet(results["calibrations"], worksheet, target_utilisation)
    md += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    (out / "report.md").write_text("\n".join(md))
    verdict = "\n".join(pass_lines)
    return verdict
