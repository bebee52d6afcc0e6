"""Every fault the nemesis may strike, by kind: what ``make partitions``
and the suite's short run choose from. A fault module adds its faults here."""

from __future__ import annotations

from collections.abc import Sequence

from quire.testing.nemesis.databasecut import DatabaseCut
from quire.testing.nemesis.fault import Fault
from quire.testing.nemesis.kills import NatsKill, ReplicaKill
from quire.testing.nemesis.leasecut import LeaseCut
from quire.testing.nemesis.natscuts import NatsMetaLeaderCut, NatsMinorityCut, NatsStreamLeaderCut

__all__ = ["FAULTS", "faults"]

FAULTS: tuple[Fault, ...] = (
    NatsMinorityCut(),
    NatsMetaLeaderCut(),
    NatsStreamLeaderCut(),
    LeaseCut(),
    DatabaseCut(),
    ReplicaKill(),
    NatsKill(),
)


def faults(kinds: Sequence[str] = ()) -> list[Fault]:
    """The faults of ``kinds`` (every one when empty), in catalogue order."""
    known = {fault.kind: fault for fault in FAULTS}
    unknown = sorted(set(kinds) - set(known))
    if unknown:
        raise ValueError(f"unknown fault kinds: {', '.join(unknown)}")
    return [fault for fault in FAULTS if not kinds or fault.kind in kinds]
