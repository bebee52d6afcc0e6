"""``quire dlq retry JOB --budget 30s``: the new budget a retry may give a job."""

from __future__ import annotations

import argparse
import math
import re

__all__ = ["BUDGET_HELP", "budget_duration"]

BUDGET_HELP = (
    "give the retried job a new budget: its deadline becomes now plus this (30s, 5m, 1h;"
    " a plain number is seconds), recorded in the ledger. Without it the job keeps its"
    " deadline, and a job past it fails DEADLINE_EXCEEDED again. At most the longest"
    " budget a job may ask for (QUIRE_MAX_JOB_BUDGET_SECONDS, 3600 by default)"
)
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*$")


def budget_duration(text: str) -> float:
    """``30s``, ``5m``, ``1.5h`` or ``90``: a positive number of seconds."""
    match = _DURATION.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"not a duration (30s, 5m, 1h): {text!r}")
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if not (seconds > 0 and math.isfinite(seconds)):
        raise argparse.ArgumentTypeError(f"a budget must be more than 0s: {text!r}")
    return seconds
