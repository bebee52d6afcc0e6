"""Job states as the user types them (``--state completed``)."""

from __future__ import annotations

import argparse

from quire.type import job_pb2

__all__ = ["job_state"]

STATE_PREFIX = "JOB_STATE_"


def _state_names() -> list[str]:
    return [
        name.removeprefix(STATE_PREFIX)
        for name in job_pb2.JobState.keys()
        if not name.endswith("UNSPECIFIED")
    ]


def job_state(text: str) -> str:
    """An argparse type: a job state's name (any case), refused with the valid names."""
    name = text.strip().upper().removeprefix(STATE_PREFIX)
    try:
        job_pb2.JobState.Value(STATE_PREFIX + name)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"unknown state {text!r}; one of: {', '.join(_state_names())}"
        ) from None
    return name
