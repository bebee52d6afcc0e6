"""The options of ``quire top``, apart from the command so that building the
parser imports neither ``rich`` nor the Prometheus parser."""

from __future__ import annotations

import argparse

from quire.top.endpoints import endpoint_option

__all__ = ["add_top_arguments"]


def _interval(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0.1 <= seconds <= 3600:
        raise argparse.ArgumentTypeError(f"between 0.1 and 3600 seconds, got {text}")
    return seconds


def add_top_arguments(top: argparse.ArgumentParser) -> None:
    top.add_argument(
        "--interval",
        type=_interval,
        default=1.0,
        help="seconds between scrapes; rates are over this interval (default: 1.0)",
    )
    top.add_argument(
        "--once",
        action="store_true",
        help="print one frame (two scrapes an interval apart) and exit; implied by --json",
    )
    top.add_argument(
        "--endpoint",
        type=endpoint_option,
        action="append",
        metavar="SERVICE=HOST:PORT",
        help="scrape this metrics address instead of those in stack.json "
        "(repeatable; a service may be named once per replica)",
    )
