"""``quire top``: each stage's queue, work and failures, redrawn every
interval until Ctrl-C; ``--once`` (or ``--json``) prints one frame.

The addresses come from ``stack.json`` unless ``--endpoint`` names them.
A service that does not answer is shown as down; when none answers there
is nothing to show, and the command exits UNREACHABLE.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from quire.cli.errors import CliError
from quire.cli.exitcodes import ExitCode
from quire.cli.output import Output
from quire.top.endpoints import Endpoint, stack_endpoints
from quire.top.model import Snapshot, figures
from quire.top.scrape import scrape_all

__all__ = ["run"]


def _endpoints(args: argparse.Namespace) -> tuple[Endpoint, ...]:
    given: list[Endpoint] = args.endpoint or []
    chosen = tuple(dict.fromkeys(given)) or stack_endpoints(Path(args.data_dir))
    if not chosen:
        raise CliError(
            f"no metrics addresses: no stack.json in {args.data_dir} naming them "
            "(start the stack with `quire up`, or give --endpoint SERVICE=HOST:PORT)",
            ExitCode.UNREACHABLE,
        )
    return chosen


def _snapshot(endpoints: tuple[Endpoint, ...]) -> Snapshot:
    taken_at, scrapes = scrape_all(endpoints)
    return Snapshot(taken_at, scrapes)


def _first(endpoints: tuple[Endpoint, ...]) -> Snapshot:
    snapshot = _snapshot(endpoints)
    if not snapshot.answering:
        addresses = ", ".join(f"{e.service}={e.address}" for e in endpoints)
        raise CliError(f"no metrics endpoint answers ({addresses})", ExitCode.UNREACHABLE)
    return snapshot


def _pause_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.monotonic()))


def _once(endpoints: tuple[Endpoint, ...], interval: float, out: Output) -> int:
    before = _first(endpoints)
    _pause_until(before.taken_at + interval)
    top = figures(before, _snapshot(endpoints))
    out.result(top.document())
    if not out.as_json:
        from rich.console import Console

        from quire.top.view import render

        # A pipe or a file gets the table at its natural width, not cut to 80.
        Console(width=None if sys.stdout.isatty() else 200).print(render(top))
    return int(ExitCode.OK)


def _live(endpoints: tuple[Endpoint, ...], interval: float) -> int:
    from rich.live import Live

    from quire.top.view import render

    try:
        before = _first(endpoints)
        with Live(render(figures(None, before)), auto_refresh=False) as live:
            while True:
                _pause_until(before.taken_at + interval)
                after = _snapshot(endpoints)
                live.update(render(figures(before, after)), refresh=True)
                before = after
    except KeyboardInterrupt:
        return int(ExitCode.OK)  # Ctrl-C is how one leaves a live view


def run(args: argparse.Namespace, out: Output) -> int:
    endpoints = _endpoints(args)
    if args.once or out.as_json:
        return _once(endpoints, args.interval, out)
    return _live(endpoints, args.interval)
