"""``make partitions``: seeded fault schedules on Quire's cluster in network
namespaces (issue 42), each a history-checked run.

One cluster (three nats-server members, PostgreSQL, two replicas of every
service, each in its own namespace; ``quire.testing.nscluster``) serves
every schedule in turn. Each schedule makes its own tenants, runs a
recorded workload while the nemesis strikes the faults its seed plans
(``quire.testing.nemesis``), heals them, lets the jobs settle, gathers the
facts through the services' APIs and checks the history; its verdicts are
its own. Each schedule's seed is printed, and its report written to
``reports/partitions/seed-<n>.md`` with ``seed-<n>.png``; ``index.md``
lists them all. Exits non-zero if any verdict fails (or a schedule fails to
run). Needs root (``ip netns``) and PostgreSQL (``make system-deps``).

    make partitions                          # 20 schedules, seeds 1..20
    make partitions SEEDS=7                  # reproduce seed 7
    make partitions SCHEDULES=5 FAULTS=nats-minority,lease-cut
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from quire.testing.nemesis.catalogue import faults, preparers  # noqa: E402
from quire.testing.nemesis.report import write_report  # noqa: E402
from quire.testing.nemesis.run import ScheduleResult, run_schedule  # noqa: E402
from quire.testing.nscluster import NamespaceCluster  # noqa: E402
from quire.testing.soak import SOAK_ENV  # noqa: E402

REPORTS = ROOT / "reports" / "partitions"


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=int(os.environ.get("SCHEDULES") or 20))
    parser.add_argument("--seeds", default=os.environ.get("SEEDS", ""), help="e.g. 3,7,12")
    parser.add_argument(
        "--faults", default=os.environ.get("FAULTS", ""), help="kinds, comma-separated"
    )
    parser.add_argument("--strikes", type=int, default=int(os.environ.get("STRIKES") or 3))
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("JOBS_PER_CLIENT") or 3))
    parser.add_argument("--reports", type=Path, default=REPORTS)
    return parser.parse_args()


def _index(results: list[ScheduleResult], failed: dict[int, str], seconds: float) -> str:
    lines = [
        "# Partition schedules",
        "",
        f"{len(results) + len(failed)} schedules in {seconds:.0f} s; "
        f"{sum(r.ok for r in results)} clean.",
        "",
        "| seed | verdict | strikes | jobs | seconds | report |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for result in results:
        kinds = ", ".join(f"{r.kind} on {r.target}" for r in result.timeline.records)
        verdict = "clean" if result.ok else "**violated**"
        lines.append(
            f"| {result.seed} | {verdict} | {kinds} | {len(result.history.acknowledged())} "
            f"| {result.seconds:.0f} | [seed-{result.seed}.md](seed-{result.seed}.md) |"
        )
    for seed, error in failed.items():
        lines.append(f"| {seed} | **did not run** ({error}) | | | | |")
    return "\n".join(lines) + "\n"


def main() -> int:
    args = _arguments()
    seeds = [int(s) for s in args.seeds.split(",") if s] or list(range(1, args.schedules + 1))
    chosen = faults([k for k in args.faults.split(",") if k], seed=seeds[0])
    started = time.monotonic()
    results: list[ScheduleResult] = []
    failed: dict[int, str] = {}
    with tempfile.TemporaryDirectory(prefix="quire-partitions-") as temp:
        with NamespaceCluster(
            Path(temp) / "cluster", env=SOAK_ENV, preparers=preparers(chosen)
        ) as cluster:
            print(f"cluster up in {time.monotonic() - started:.0f} s", flush=True)
            for seed in seeds:
                try:
                    result = asyncio.run(
                        run_schedule(
                            cluster,
                            seed,
                            chosen,
                            Path(temp) / f"seed-{seed}",
                            strikes=args.strikes,
                            jobs_per_client=args.jobs,
                        )
                    )
                except Exception as error:  # noqa: BLE001 - reported, the run goes on
                    failed[seed] = type(error).__name__
                    print(f"seed {seed}: did not run ({type(error).__name__})", flush=True)
                    traceback.print_exc()  # the test harness's own frames: no document data
                    continue
                results.append(result)
                report = write_report(result, args.reports)
                struck = ", ".join(f"{r.kind}@{r.target}" for r in result.timeline.records)
                verdict = "clean" if result.ok else "VIOLATED: " + result.verdicts.summary()
                print(
                    f"seed {seed}: {verdict} ({result.seconds:.0f} s, "
                    f"{result.checking_seconds:.0f} s checking; {struck}) -> "
                    f"{report.relative_to(ROOT) if report.is_relative_to(ROOT) else report}",
                    flush=True,
                )
    seconds = time.monotonic() - started
    args.reports.mkdir(parents=True, exist_ok=True)
    (args.reports / "index.md").write_text(_index(results, failed, seconds))
    ok = not failed and all(result.ok for result in results)
    print(f"{len(seeds)} schedules in {seconds:.0f} s: {'clean' if ok else 'NOT clean'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
