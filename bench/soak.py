"""Soak: 1,000 jobs through the embedded stack while a random process (one of
the five services, or the NATS server) is SIGKILLed every few seconds.

Prints the outcome counts, the kills, the retries and the run time, then runs
`quire check` on the stopped stack. Exits non-zero unless every job has
exactly one outcome, every kind of process was killed and the check passes.

Every job is submitted at once and held to 24 in flight, so kills land on a
busy pipeline. The seed's first six victims are the five services and the
NATS server.

    make soak                          # SOAK_JOBS=1000, SOAK_KILL_SECONDS=3
    SOAK_JOBS=200 SOAK_KILL_SECONDS=2 make soak
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from quire.invariants import check  # noqa: E402
from quire.stack.supervisor import Stack  # noqa: E402
from quire.testing.soak import SOAK_ENV, VICTIMS, soak  # noqa: E402

SEED = 1361
"""Its first kills: assembler, nats, admission, signer, audit, validator."""


def main() -> int:
    jobs = int(os.environ.get("SOAK_JOBS", "1000"))
    interval = float(os.environ.get("SOAK_KILL_SECONDS", "3"))
    with tempfile.TemporaryDirectory(prefix="quire-soak-") as temp:
        folder = Path(temp)
        (folder / "inputs").mkdir()
        stack = Stack(folder / "stack", env=SOAK_ENV)
        stack.start()
        try:
            report = asyncio.run(
                soak(
                    stack,
                    folder / "inputs",
                    jobs=jobs,
                    kill_interval=interval,
                    timeout=3600,
                    seed=SEED,
                )
            )
        finally:
            stack.stop()
        result = check(stack.data_dir)
        report.findings = list(result.findings)
    print(f"kill interval: {interval:.1f} s (jittered 0.5-1.5x)")
    print("\n".join(report.lines()))
    for finding in report.findings:
        print(f"  finding: {finding}")
    exactly_once = report.terminal_entries == {1: jobs} and sum(report.outcomes.values()) == jobs
    every_kind = set(report.kills) == set(VICTIMS)
    if not every_kind:
        print(f"  not killed: {sorted(set(VICTIMS) - set(report.kills))}")
    return 0 if exactly_once and every_kind and result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
