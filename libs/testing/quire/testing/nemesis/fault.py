"""The nemesis's interface (issue 42): what every fault implements, what it
may ask of the cluster it strikes, and the records of a run's fault timeline.

A fault is one kind of harm (``kind``, a stable id such as
``"nats-minority"`` or ``"disk-full"``). The nemesis asks it which parts of
the cluster it may strike (``targets``), strikes one (``strike``, which
returns a few words of detail for the timeline: ids, addresses, sizes —
never a secret or a document's content) and later heals it (``heal``,
which must also work when the strike half failed, and leaves the target
serving again). Faults hold no state between runs other than what they
need to heal what they struck.

``Cluster`` is the part of the namespace cluster
(``quire.testing.nscluster.NamespaceCluster``) a fault may use: every
process by name, each with its directory, its environment, and the means to
kill, stop and start it again in its own network namespace; the network.
A fault that changes a process's environment (a skewed clock) restarts it
with ``start(extra_env)`` and heals it with ``start()``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from quire.testing.netns import Network

__all__ = ["Cluster", "Fault", "FaultRecord", "Preparing", "Process", "Timeline"]


class Process(Protocol):
    """One process of the cluster: a nats-server (``nats-1``), PostgreSQL
    (``postgres``) or a service replica (``admission-1``, ``signer-2``)."""

    @property
    def name(self) -> str: ...

    @property
    def role(self) -> str:
        """``"nats"``, ``"postgres"`` or the service's name (``"audit"``)."""
        ...

    @property
    def namespace_node(self) -> str:
        """Its node in ``Cluster.network`` (the namespace it runs in)."""
        ...

    @property
    def directory(self) -> Path:
        """Its own directory; a replica keeps its data in ``directory / "data"``,
        a nats-server its JetStream store in ``directory / "jetstream"``."""
        ...

    env: dict[str, str]
    """The environment it is started with (without ``extra_env``)."""

    @property
    def alive(self) -> bool: ...

    @property
    def pid(self) -> int | None:
        """The real process's id (not an ``ip netns exec`` wrapper's)."""
        ...

    def kill(self) -> None:
        """SIGKILL the process and wait for it."""
        ...

    def stop(self) -> None:
        """SIGTERM (a service drains), SIGKILL after a bound."""
        ...

    def start(self, extra_env: Mapping[str, str] | None = None) -> None:
        """Run it again in its namespace with ``env`` and ``extra_env`` on
        top, and wait until it serves (bounded)."""
        ...


@runtime_checkable
class Cluster(Protocol):
    """What a fault may ask of the cluster it strikes."""

    network: Network

    def processes(self) -> Mapping[str, Process]:
        """Every process, by name."""
        ...

    def replicas(self, service: str) -> Sequence[Process]:
        """The replicas of one service, in number order."""
        ...

    def nats_nodes(self) -> Sequence[Process]:
        """The nats-server members, in name order."""
        ...


class Fault(Protocol):
    kind: str
    """A stable id, e.g. ``"nats-minority"``, ``"disk-full"``."""

    def targets(self, cluster: Cluster) -> list[str]:
        """The node or replica names it may strike (``Process.name``)."""
        ...

    async def strike(self, cluster: Cluster, target: str) -> dict[str, str]:
        """Do the harm; the detail for the timeline (no secrets, no content)."""
        ...

    async def heal(self, cluster: Cluster, target: str) -> None:
        """Undo it; the target serves again when this returns."""
        ...


@runtime_checkable
class Preparing(Protocol):
    """A fault that must ready a process before it starts (mount its small
    disk, preload its clock): the cluster calls ``prepare`` for every
    process before its first start and keeps what it returns in the
    process's environment; ``release`` once everything has stopped."""

    def prepare(self, directory: Path, role: str) -> dict[str, str]: ...

    def release(self) -> None: ...


@dataclass
class FaultRecord:
    """One strike on the timeline. Times are ``time.monotonic()`` of the
    nemesis's process, as the history log's ``monotonic`` are."""

    kind: str
    target: str
    start: float
    end: float | None = None
    """When it was healed; None while it lasts."""
    wall_start: float = field(default_factory=time.time)
    detail: dict[str, str] = field(default_factory=dict)
    on_target: tuple[str, ...] = ()
    """Jobs the services reported in work on the target when it struck."""
    in_flight: tuple[str, ...] = ()
    """Jobs the history shows acknowledged and not yet ended when it struck
    (filled in after the run, from the history log)."""
    error: str = ""
    """Why the strike or the heal failed (an exception's type), if it did."""

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "target": self.target,
            "start": self.start,
            "end": self.end,
            "wall_start": self.wall_start,
            "detail": dict(self.detail),
            "on_target": list(self.on_target),
            "in_flight": list(self.in_flight),
            "error": self.error,
        }


@dataclass
class Timeline:
    """Every strike of one run, in order, and the seed that chose them."""

    seed: int
    started: float = field(default_factory=time.monotonic)
    records: list[FaultRecord] = field(default_factory=list)

    def open(self) -> list[FaultRecord]:
        """The strikes not yet healed."""
        return [record for record in self.records if record.end is None]

    def to_json(self) -> dict[str, object]:
        return {
            "seed": self.seed,
            "started": self.started,
            "records": [record.to_json() for record in self.records],
        }
