"""``quire check``: the invariant checker over a data directory, like fsck.

Asks the services for their records (a stopped stack's are exported from
each service's database, read-only) and reads the blob directory; needs no
running stack (run it with the stack stopped, or running and idle). Prints a
summary and every finding (kinds, job ids, ledger sequences, states: never
document content), and exits 1 when anything is found.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from quire.cli.errors import CliError
from quire.cli.exitcodes import ExitCode
from quire.cli.output import Output
from quire.invariants import CheckReport, check
from quire.servicerecords import RecordsUnavailable

__all__ = ["run", "render"]


def render(report: CheckReport) -> list[str]:
    """The summary and findings, one line each."""
    states = "  ".join(f"{state}={count}" for state, count in report.jobs_by_state.items())
    lines = [
        f"stack: {'stopped' if report.stopped else 'running'}",
        f"jobs accepted: {report.jobs_accepted}  by state: {states or '-'}",
        f"ledger: {report.ledger_entries} entries, {report.ledger_chains} chains, "
        f"{report.checkpoints_checked} checkpoints checked",
        f"signed artifacts: {report.artifacts}  temporary entries: {report.temp_entries}",
    ]
    lines += [f"finding: {finding}" for finding in report.findings]
    lines.append("OK" if report.ok else f"{len(report.findings)} FINDINGS")
    return lines


def run(args: argparse.Namespace, out: Output) -> int:
    data_dir = Path(args.data_dir)
    if not data_dir.is_dir():
        raise CliError(f"no data directory at {data_dir}")
    try:
        report = check(data_dir, stopped=True if args.stopped else None)
    except RecordsUnavailable as error:
        raise CliError(str(error), ExitCode.UNREACHABLE) from None
    for line in render(report):
        out.line(line)
    out.result({**asdict(report), "ok": report.ok})
    return 0 if report.ok else 1
