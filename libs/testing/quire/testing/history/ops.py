"""A workload's history: every call its clients made to Quire's API and
every answer they got, with when (a Jepsen history, for Quire's jobs).

Each client process appends to a file of its own, one JSON line per
operation, flushed as it is written (``quire.testing.history.recorder``): a
process killed mid-run leaves every operation it finished and at most a
torn last line, which reading skips and counts. Times are
``time.monotonic()``, comparable between processes of one machine (Linux's
``CLOCK_MONOTONIC`` is the kernel's, shared by network namespaces and not
moved by a skewed wall clock), and ``time.time()`` for people. Only ids,
states, digests, status codes and reason codes are written: never document
content, never a token.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import MISSING, dataclass, fields
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import Any

__all__ = ["Kind", "Rpc", "Op", "History", "HistoryDamaged"]


class Kind(StrEnum):
    """What a line records."""

    INVOKE = "invoke"
    """A call was made (its answer follows under the same ``call``, if any came)."""
    ACCEPTED = "accepted"
    """SubmitJob's acknowledgement: the job it names."""
    OBSERVED = "observed"
    """A state of a job, as a read answered it (GetJob, CancelJob) or a
    watch delivered it (WatchJob, with its ledger sequence)."""
    FETCHED = "fetched"
    """The artifact, downloaded: the digest it was verified against."""
    REFUSED = "refused"
    """The call ended with an error status: its code, reason and retry hint."""


class Rpc(StrEnum):
    """The admission API's calls a workload makes."""

    SUBMIT = "SubmitJob"
    GET = "GetJob"
    WATCH = "WatchJob"
    CANCEL = "CancelJob"
    DOWNLOAD = "DownloadArtifact"


class HistoryDamaged(ValueError):
    """A history file holds a line that is not an operation, other than a
    torn last line."""


@dataclass(frozen=True)
class Op:
    """One operation of one client process."""

    process: str
    """The client process that recorded it (unique for the run)."""
    index: int
    """Its position in that process's history, from 0."""
    kind: Kind
    rpc: Rpc
    call: int
    """The ``index`` of the invoke this answers; its own index for an invoke."""
    monotonic: float
    """When it was recorded: ``time.monotonic()``."""
    wall: float
    """When it was recorded: ``time.time()`` (for people; never compared)."""
    request_id: str = ""
    job: str = ""
    """``jobs/{job}``."""
    state: str = ""
    """A job state's name (``COMPLETED``)."""
    sequence: int = 0
    """The ledger sequence of a watched change (0: not known, as for GetJob)."""
    digest: str = ""
    code: str = ""
    """A refusal's gRPC status code's name (``UNAVAILABLE``)."""
    reason: str = ""
    """A refusal's reason code (``google.rpc.ErrorInfo``); empty when it had none."""
    retry_after: float | None = None
    """A refusal's ``google.rpc.RetryInfo`` delay in seconds, when it had one."""
    retryable: bool = False
    """Whether the refusal told the client to try again (by its code or a hint)."""

    def to_json(self) -> str:
        """One line: the fields that differ from their defaults."""
        said = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.default is MISSING or getattr(self, f.name) != f.default
        }
        return json.dumps(said, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, line: str) -> Op:
        said: dict[str, Any] = json.loads(line)
        said["kind"] = Kind(said["kind"])
        said["rpc"] = Rpc(said["rpc"])
        return cls(**said)


def _ops_of(path: Path) -> tuple[list[Op], int]:
    """The operations of one file, and 1 when its last line is torn."""
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    ops = []
    for number, line in enumerate(lines, start=1):
        if not line:
            continue
        try:
            ops.append(Op.from_json(line))
        except (ValueError, TypeError, KeyError):
            if number == len(lines):  # the last line, with no newline: cut by a kill
                return ops, 1
            raise HistoryDamaged(f"{path.name}: line {number} is not an operation") from None
    return ops, 0


@dataclass(frozen=True)
class History:
    """Every client process's operations, each process's in its order."""

    ops: tuple[Op, ...]
    torn: int = 0
    """Torn last lines skipped (a client killed while writing one)."""

    @classmethod
    def read(cls, paths: Iterable[Path]) -> History:
        """The history in ``paths`` (one file per client process)."""
        ops: list[Op] = []
        torn = 0
        for path in sorted(paths):
            found, cut = _ops_of(path)
            ops += found
            torn += cut
        return cls(tuple(ops), torn)

    def of(self, kind: Kind, *rpcs: Rpc) -> Iterator[Op]:
        """The operations of ``kind`` (of these calls, when named)."""
        return (op for op in self.ops if op.kind == kind and (not rpcs or op.rpc in rpcs))

    def invoked_at(self, op: Op) -> float:
        """When the call ``op`` answers was made."""
        return self._invokes.get((op.process, op.call), op).monotonic

    @cached_property
    def _invokes(self) -> dict[tuple[str, int], Op]:
        return {(op.process, op.index): op for op in self.of(Kind.INVOKE)}

    def acknowledged(self) -> dict[str, list[Op]]:
        """Each job a submit was acknowledged with, and those acknowledgements."""
        acks: dict[str, list[Op]] = defaultdict(list)
        for op in self.of(Kind.ACCEPTED):
            acks[op.job].append(op)
        return dict(acks)

    def observations(self) -> dict[str, list[Op]]:
        """Each job's observed states, in the order they were recorded."""
        seen: dict[str, list[Op]] = defaultdict(list)
        for op in sorted(self.of(Kind.OBSERVED), key=lambda o: o.monotonic):
            seen[op.job].append(op)
        return dict(seen)
