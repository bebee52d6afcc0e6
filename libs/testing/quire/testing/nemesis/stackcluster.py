"""The embedded stack seen as a nemesis ``Cluster`` (issue 42), so a fault
can be tried on one machine's stack before the namespace cluster: one
replica of each service (``admission-1``, ...) and one nats-server
(``nats-1``), all in the machine's own network namespace (``network`` is
None: faults that cut links need the namespace cluster).

Directories follow the interface: the stack's data directory is
``<root>/data`` (a replica keeps its data in ``directory / "data"``, and
every replica here shares that one directory), the nats-server's
JetStream store is ``<root>/data/nats/jetstream``. Build the stack as
``Stack(root / "data", ...)``; a fault's ``prepare`` is called with
``root`` for a service and ``root / "data" / "nats"`` for the nats-server,
before the stack starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quire.settings import SERVICES
from quire.stack.supervisor import NATS, Stack

__all__ = ["StackCluster", "nats_directory", "service_directory"]


def service_directory(root: Path) -> Path:
    return root


def nats_directory(root: Path) -> Path:
    return root / "data" / "nats"


@dataclass
class _Service:
    stack: Stack
    service: str
    directory: Path
    name: str = ""
    role: str = ""
    namespace_node: str = ""
    env: dict[str, str] = field(default_factory=dict)
    own: dict[str, str] = field(default_factory=dict)
    """Its own variables as the stack was built, put back by ``start()``."""

    def __post_init__(self) -> None:
        self.name = f"{self.service}-1"
        self.role = self.service
        self.env = self.stack.env_of(self.service)
        self.own = self.stack.own_env(self.service)

    @property
    def alive(self) -> bool:
        return self.stack.exit_status(self.service) is None

    @property
    def pid(self) -> int | None:
        return self.stack.pid(self.service)

    def kill(self) -> None:
        self.stack.kill(self.service)

    def stop(self) -> None:
        self.stack.stop_service(self.service)

    def start(self, extra_env: Mapping[str, str] | None = None) -> None:
        self.stack.start_service(self.service, {**self.own, **(extra_env or {})})
        self.stack.wait_healthy()


@dataclass
class _NatsServer:
    stack: Stack
    directory: Path
    name: str = "nats-1"
    role: str = "nats"
    namespace_node: str = ""
    env: dict[str, str] = field(default_factory=dict)

    @property
    def _server(self) -> Any:
        assert self.stack.nats is not None, "the stack runs a nats-server of its own"
        return self.stack.nats

    @property
    def alive(self) -> bool:
        return bool(self._server.alive)

    @property
    def pid(self) -> int | None:
        return self.stack.pid(NATS) if self.alive else None

    def kill(self) -> None:
        self.stack.kill(NATS)

    def stop(self) -> None:
        self._server.stop()

    def start(self, extra_env: Mapping[str, str] | None = None) -> None:
        if not self._server.alive:  # the stack's watcher may have been first
            self._server.start()


class StackCluster:
    """``stack`` (built on ``root / "data"``) as a ``Cluster``."""

    network: Any = None

    def __init__(self, stack: Stack, root: Path) -> None:
        self._processes: dict[str, Any] = {
            f"{service}-1": _Service(stack, service, service_directory(root))
            for service in SERVICES
        }
        self._processes["nats-1"] = _NatsServer(stack, nats_directory(root))

    def processes(self) -> Mapping[str, Any]:
        return self._processes

    def replicas(self, service: str) -> Sequence[Any]:
        return [self._processes[f"{service}-1"]]

    def nats_nodes(self) -> Sequence[Any]:
        return [self._processes["nats-1"]]
