"""Every fault the nemesis may strike, by kind: what ``make partitions``
and the suite's short run choose from. A fault module adds its faults here.

Some faults hold state (the small disks they mounted, the clocks they
preloaded) and must ready each process before the cluster starts it
(``Preparing``), so ``faults`` makes new ones for each cluster: hand the
same list to ``NamespaceCluster(preparers=...)`` and to every schedule run
on it."""

from __future__ import annotations

import random
from collections.abc import Sequence

from quire.pipeline import ADMISSION
from quire.settings import SERVICES
from quire.testing.nemesis.clockskew import ClockSkew
from quire.testing.nemesis.databasecut import DatabaseCut
from quire.testing.nemesis.diskfull import BLOB_DISK_FULL, TEMP_DISK_FULL, DiskFull
from quire.testing.nemesis.fault import Fault, Preparing
from quire.testing.nemesis.kills import NatsKill, ReplicaKill
from quire.testing.nemesis.leasecut import LeaseCut
from quire.testing.nemesis.natscuts import NatsMetaLeaderCut, NatsMinorityCut, NatsStreamLeaderCut
from quire.testing.smallfs import MIB

__all__ = ["KINDS", "faults", "preparers"]

BLOB_DISK_BYTES = 512 * MIB
"""A nats-server's JetStream store: every blob, queue and bucket of every
schedule run on one cluster fits, with room to spare until it is filled."""


def _catalogue(seed: int) -> tuple[Fault, ...]:
    return (
        NatsMinorityCut(),
        NatsMetaLeaderCut(),
        NatsStreamLeaderCut(),
        LeaseCut(),
        DatabaseCut(),
        ReplicaKill(),
        NatsKill(),
        DiskFull(BLOB_DISK_FULL, size_bytes=BLOB_DISK_BYTES),
        DiskFull(TEMP_DISK_FULL),
        # Not preloaded into every replica: with libfaketime in all ten, a
        # lease cut's sibling did not take the job over within 30 s in
        # test_partitions (the cause is not run down); a strike restarts
        # its one target with it instead. Admission is left out: restarted
        # minutes off, its first calls (the validator's rulesets) are
        # refused CLOCK_SKEW and it does not become ready until the clock
        # is set right (a skewed admission that keeps running is in
        # test_clock_skew).
        ClockSkew(
            rng=random.Random(seed),
            preload=False,
            services=[service for service in SERVICES if service != ADMISSION],
        ),
    )


KINDS: tuple[str, ...] = tuple(fault.kind for fault in _catalogue(0))
"""Every kind, in catalogue order."""


def faults(kinds: Sequence[str] = (), *, seed: int = 0) -> list[Fault]:
    """New faults of ``kinds`` (every one when empty), in catalogue order;
    ``seed`` draws the clock-skew faults' directions."""
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown fault kinds: {', '.join(unknown)}")
    return [fault for fault in _catalogue(seed) if not kinds or fault.kind in kinds]


def preparers(chosen: Sequence[Fault]) -> list[Preparing]:
    """The faults among ``chosen`` that ready processes before they start."""
    return [fault for fault in chosen if isinstance(fault, Preparing)]
