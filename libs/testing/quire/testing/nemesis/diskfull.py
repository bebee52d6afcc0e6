"""Full disks, as the nemesis strikes them (issue 42).

Two kinds, each a small tmpfs (``quire.testing.smallfs``) mounted before
the process it belongs to starts, filled to ``ENOSPC`` when struck, kept
full (whatever is freed meanwhile is taken again) and freed when healed:

- ``blob-disk-full``: a nats-server's JetStream store (``<node dir>/jetstream``),
  where a cluster keeps its blobs (``QUIRE_BLOB_BACKEND=nats``), its queues
  and its buckets. nats-server may switch JetStream off on a store it
  cannot write; healing frees the disk, then stops and starts the node so
  that it serves JetStream again.
- ``temp-disk-full``: a service replica's temporary space, where attempts'
  private directories and blobs being written live
  (``<replica dir>/data/blobs``, which holds ``.tmp``; ``QUIRE_BLOB_ROOT``'s
  default under ``QUIRE_DATA_DIR``). With the local blob backend the blobs
  are on the same disk (promotion is a rename, so they must be).

Whoever starts the cluster calls ``prepare`` for each process before
starting it, and ``release`` once everything is stopped (on failure too)::

    disks = DiskFull(TEMP_DISK_FULL)
    env = {**base_env, **disks.prepare(replica.directory, replica.role)}
    ...start the replica with env...
    ...
    disks.release()

``prepare`` mounts the disk and returns what the process needs besides: a
service's temporary-space thresholds sized to the small disk (admission
refuses new work below ``QUIRE_TEMP_FREE_RESERVE_BYTES`` free, a stage
pauses below ``QUIRE_TEMP_PAUSE_FREE_BYTES``), nothing for a nats-server.
Mounting needs root; every mount is named after its maker and swept once
the maker is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from pathlib import Path

from quire.settings import SERVICES
from quire.testing.nemesis.fault import Cluster
from quire.testing.nemesis.probes import connected_replicas
from quire.testing.nscluster import NamespaceCluster, NatsNode
from quire.testing.smallfs import MIB, Filler, SmallFileSystem

__all__ = ["BLOB_DISK_FULL", "TEMP_DISK_FULL", "DiskFull", "mount_point"]

BLOB_DISK_FULL = "blob-disk-full"
TEMP_DISK_FULL = "temp-disk-full"
NATS = "nats"
DEFAULT_SIZE_BYTES = 64 * MIB
HOLD_INTERVAL_SECONDS = 0.05


def mount_point(kind: str, directory: Path, role: str) -> Path | None:
    """Where ``kind``'s disk goes for a process of ``role`` in ``directory``;
    None when the kind does not strike that role."""
    if kind == BLOB_DISK_FULL and role == NATS:
        return directory / "jetstream"
    if kind == TEMP_DISK_FULL and role in SERVICES:
        return directory / "data" / "blobs"
    return None


@dataclass
class _Struck:
    filler: Filler
    holding: asyncio.Task[None]


class DiskFull:
    """One kind of full disk over every process ``prepare`` was called for."""

    def __init__(self, kind: str, *, size_bytes: int = DEFAULT_SIZE_BYTES) -> None:
        if kind not in (BLOB_DISK_FULL, TEMP_DISK_FULL):
            raise ValueError(f"no disk-full fault {kind!r}")
        self.kind = kind
        self.size_bytes = size_bytes
        self._disks: dict[Path, SmallFileSystem] = {}
        self._struck: dict[str, _Struck] = {}

    def prepare(self, directory: Path, role: str) -> dict[str, str]:
        """Mount the small disk a process of ``role`` in ``directory`` will
        use (before it starts); the environment it needs besides."""
        point = mount_point(self.kind, directory, role)
        if point is None:
            return {}
        if point.resolve() not in self._disks:
            disk = SmallFileSystem(point, self.size_bytes)
            disk.mount()
            self._disks[disk.path] = disk
        if role == NATS:
            return {}
        return {
            "QUIRE_TEMP_FREE_RESERVE_BYTES": str(self.size_bytes // 8),
            "QUIRE_TEMP_PAUSE_FREE_BYTES": str(self.size_bytes // 16),
        }

    def release(self) -> None:
        """Free and unmount every disk (the processes on them stopped first)."""
        for struck in self._struck.values():
            struck.holding.cancel()
            struck.filler.free()
        self._struck.clear()
        for disk in self._disks.values():
            disk.unmount()
        self._disks.clear()

    def _disk_of(self, cluster: Cluster, target: str) -> SmallFileSystem | None:
        process = cluster.processes().get(target)
        if process is None:
            return None
        point = mount_point(self.kind, process.directory, process.role)
        return None if point is None else self._disks.get(point.resolve())

    def targets(self, cluster: Cluster) -> list[str]:
        """The processes whose disk ``prepare`` mounted."""
        return sorted(name for name in cluster.processes() if self._disk_of(cluster, name))

    async def strike(self, cluster: Cluster, target: str) -> dict[str, str]:
        disk = self._disk_of(cluster, target)
        if disk is None:
            raise ValueError(f"{target} has no disk of {self.kind}")
        filler = Filler(disk.path)
        held = await asyncio.to_thread(filler.fill)
        holding = asyncio.create_task(self._hold(filler), name=f"{self.kind}-{target}")
        self._struck[target] = _Struck(filler, holding)
        detail = {"disk_bytes": str(disk.size_bytes), "filled_bytes": str(held)}
        node = cluster.processes()[target]
        if isinstance(cluster, NamespaceCluster) and isinstance(node, NatsNode):
            # Whose work the full store holds up: the replicas connected to it.
            clients = await asyncio.to_thread(connected_replicas, cluster, node)
            detail["clients_on_it"] = ",".join(clients) or "none"
        return detail

    @staticmethod
    async def _hold(filler: Filler) -> None:
        while True:
            await filler.hold(1.0, HOLD_INTERVAL_SECONDS)

    async def heal(self, cluster: Cluster, target: str) -> None:
        struck = self._struck.pop(target, None)
        if struck is not None:
            struck.holding.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await struck.holding
            struck.filler.free()
        process = cluster.processes()[target]
        if process.role == NATS:
            # JetStream may have switched itself off on the store it could
            # not write: a restart on the freed store brings it back.
            await asyncio.to_thread(process.stop)
            await asyncio.to_thread(process.start)
        elif not process.alive:
            await asyncio.to_thread(process.start)
