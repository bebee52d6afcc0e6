"""Jobs: ids, resource names, states and the manifest digest."""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from datetime import datetime

from google.protobuf import timestamp_pb2

from quire.errors import NotFound
from quire.pipeline import HISTORY_BEFORE_COMPLETION, PARKED, TERMINAL, State
from quire.type import job_pb2

__all__ = [
    "JobState",
    "State",
    "new_job_id",
    "job_name",
    "job_id",
    "state_name",
    "state_value",
    "TERMINAL_STATES",
    "PARKED_STATES",
    "SETTLED_STATES",
    "HISTORY_BEFORE_COMPLETION",
    "state_rank",
    "manifest_digest",
    "timestamp",
]

JobState = job_pb2.JobState
_PREFIX = "JOB_STATE_"
_STATE_NAMES = {
    state.number: state.name.removeprefix(_PREFIX) for state in JobState.DESCRIPTOR.values
}
"""Each state's name by value, looked up many times a job."""

TERMINAL_STATES = TERMINAL
PARKED_STATES = PARKED
SETTLED_STATES = TERMINAL | PARKED
"""The states a job rests in: what a settled-only watch is told of."""
_RANK: dict[str, float] = {
    name: index for index, name in enumerate((*HISTORY_BEFORE_COMPLETION, State.COMPLETED))
}
_RANK[State.NEEDS_REVIEW] = _RANK[State.REVIEWING] + 0.5  # parked after review, before assembly


_JOB_ID = re.compile(r"[0-9a-f]+")


def new_job_id() -> str:
    """A time-ordered id: 12 hex digits of milliseconds, then 16 random hex digits."""
    return f"{int(time.time() * 1000):012x}{os.urandom(8).hex()}"


def job_name(job: str) -> str:
    return f"jobs/{job}"


def job_id(name: str) -> str:
    """The id in ``jobs/{job}``; anything else is NOT_FOUND."""
    prefix, _, ident = name.partition("/")
    if prefix != "jobs" or _JOB_ID.fullmatch(ident) is None:
        raise NotFound("job not found")
    return ident


def state_name(value: int) -> str:
    name = _STATE_NAMES.get(value)
    if name is None:  # not a state: the enum's own error
        return JobState.Name(value).removeprefix(_PREFIX)  # type: ignore[arg-type]
    return name


def state_value(name: str) -> int:
    return JobState.Value(_PREFIX + name)


def state_rank(name: str) -> float:
    """Order of states along the pipeline; terminal states outrank everything."""
    if name in TERMINAL_STATES:
        return 100
    return _RANK.get(name, -1)


def manifest_digest(manifest: job_pb2.Manifest) -> str:
    """sha256 of the manifest's canonical JSON: items by position, then ruleset
    and profile. An item is ``[position, document_id, sha256]``; one that
    names its source by reference adds ``[system, key, content_type]``, so
    two manifests that differ only in a reference never share a digest, and
    a manifest of uploads only hashes as it always has."""
    items: list[list[object]] = []
    for item in sorted(manifest.items, key=lambda i: i.position):
        entry: list[object] = [item.position, item.document_id, item.sha256]
        if item.HasField("source"):
            entry.append([item.source.system, item.source.key, item.source.content_type])
        items.append(entry)
    canonical = {
        "items": items,
        "ruleset": manifest.ruleset,
        "render_profile": manifest.render_profile,
    }
    encoded = json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(encoded).hexdigest()


def timestamp(moment: datetime) -> timestamp_pb2.Timestamp:
    """A protobuf Timestamp for a stored datetime (SQLite returns naive UTC)."""
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(moment)
    return stamp
