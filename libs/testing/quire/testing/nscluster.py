"""Quire's multi-node deployment (``quire.testing.multinode.MultiNode``) with
every node in a network namespace of its own (``quire.testing.netns``):
three nats-server members, PostgreSQL, and each replica of every service,
each bound to its private address on one bridge. The test process (its
clients, the operator, the history checker) stays on the host's side of the
bridge and reaches every node; nodes reach one another until a fault cuts
the path between two of them (``network.partition``). Each replica writes
its finished spans to ``spans.jsonl`` in its directory, so that a run can
tell afterwards which jobs it was working on at a given moment.

It is the ``Cluster`` the nemesis's faults strike
(``quire.testing.nemesis.fault``): every process by name (``nats-1``..
``nats-3``, ``postgres``, ``admission-1``, ``signer-2``...), each able to be
killed, stopped and started again in its own namespace. Needs root.

    with NamespaceCluster(tmp_path / "cluster", env=SOAK_ENV) as cluster:
        cluster.network.partition("validator-1", "nats-2")
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from quire.settings import SERVICES
from quire.stack.natsserver import NatsServer
from quire.stack.placement import Placement
from quire.stack.postgres import PostgresServer
from quire.testing.multinode import MultiNode, Replica, wait_serving
from quire.testing.nemesis.fault import Preparing
from quire.testing.netns import Network

__all__ = ["NamespaceCluster", "NatsNode", "PostgresNode", "monitor"]

NATS_MEMBERS = 3
MONITOR_TIMEOUT_SECONDS = 2.0


def monitor(server: NatsServer, path: str) -> dict[str, Any]:
    """One of the server's monitoring documents (``jsz?...``, ``connz``)."""
    url = f"{server.monitor_url}/{path}"
    with urllib.request.urlopen(url, timeout=MONITOR_TIMEOUT_SECONDS) as reply:  # noqa: S310
        found: dict[str, Any] = json.load(reply)
    return found


class NatsNode:
    """A nats-server member as a process a fault may strike."""

    role = "nats"

    def __init__(self, name: str, server: NatsServer) -> None:
        self.name = name
        self.server = server
        self.env: dict[str, str] = {}

    @property
    def namespace_node(self) -> str:
        return self.server.placement.node

    @property
    def directory(self) -> Path:
        return self.server.directory

    @property
    def server_name(self) -> str:
        """Its name in the cluster (``n1``), as /jsz and stream infos name it."""
        assert self.server.cluster is not None
        return self.server.cluster.server_name

    @property
    def alive(self) -> bool:
        return self.server.alive

    @property
    def pid(self) -> int | None:
        return self.server.pid

    def kill(self) -> None:
        self.server.kill()

    def stop(self) -> None:
        self.server.stop()

    def start(self, extra_env: Mapping[str, str] | None = None) -> None:
        self.server.start(wait=True, extra_env={**self.env, **(extra_env or {})})


class PostgresNode:
    """The PostgreSQL server as a process a fault may strike (a fast
    shutdown and a start again; its data stays)."""

    role = "postgres"
    name = "postgres"

    def __init__(self, server: PostgresServer) -> None:
        self.server = server
        self.env: dict[str, str] = {}

    @property
    def namespace_node(self) -> str:
        return self.server.placement.node

    @property
    def directory(self) -> Path:
        return self.server.directory

    def _pid_file(self) -> Path:
        return self.server.directory / "data" / "postmaster.pid"

    @property
    def pid(self) -> int | None:
        try:
            return int(self._pid_file().read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    @property
    def alive(self) -> bool:
        pid = self.pid
        return pid is not None and Path(f"/proc/{pid}").exists()

    def kill(self) -> None:
        self.server.control("immediate")

    def stop(self) -> None:
        self.server.control("fast")

    def start(self, extra_env: Mapping[str, str] | None = None) -> None:
        if extra_env:
            raise NotImplementedError("PostgreSQL starts with the cluster's environment")
        self.server.restart()


class NamespaceCluster:
    """The deployment and its network; ``start`` brings both up, ``stop``
    (also on failure) takes every process, namespace and link down."""

    def __init__(
        self,
        root: Path,
        *,
        replicas: int = 2,
        env: Mapping[str, str] | None = None,
        preparers: Sequence[Preparing] = (),
    ) -> None:
        """``preparers``: faults that ready each process before it starts
        (``quire.testing.nemesis.catalogue.preparers``); released at ``stop``."""
        self.network = Network()
        self._preparers = list(preparers)
        try:
            for name in self._names(replicas):
                self.network.add(name)
            self.deployment = MultiNode(
                root,
                replicas=replicas,
                env=dict(env or {}),
                place=self._place,
                clients=self.network.cidr,
                spans=True,
                prepare=self._prepare,
            )
        except BaseException:
            self.network.close()
            raise
        self._nats = [
            NatsNode(f"nats-{index + 1}", server)
            for index, server in enumerate(self.deployment.cluster.servers)
        ]
        self._postgres = PostgresNode(self.deployment.postgres)

    @staticmethod
    def _names(replicas: int) -> list[str]:
        return [
            *(f"nats-{n}" for n in range(1, NATS_MEMBERS + 1)),
            "postgres",
            *(f"{service}-{n}" for service in SERVICES for n in range(1, replicas + 1)),
        ]

    def _prepare(self, directory: Path, role: str) -> dict[str, str]:
        env: dict[str, str] = {}
        for preparer in self._preparers:
            env.update(preparer.prepare(directory, role))
        return env

    def _place(self, name: str) -> Placement:
        node = self.network.nodes[name]
        return Placement(node.address, self.network.prefix(name), node=name)

    # -- the Cluster a fault strikes --------------------------------------

    def processes(self) -> dict[str, NatsNode | PostgresNode | Replica]:
        found: dict[str, NatsNode | PostgresNode | Replica] = {n.name: n for n in self._nats}
        found[self._postgres.name] = self._postgres
        for replicas in self.deployment.replicas.values():
            found.update({replica.name: replica for replica in replicas})
        return found

    def replicas(self, service: str) -> Sequence[Replica]:
        return self.deployment.replicas[service]

    def nats_nodes(self) -> Sequence[NatsNode]:
        return self._nats

    @property
    def postgres(self) -> PostgresNode:
        return self._postgres

    # -- what a test uses --------------------------------------------------

    @property
    def nats_url(self) -> str:
        return self.deployment.cluster.url

    @property
    def operator_token(self) -> str:
        return self.deployment.operator_token

    def target(self, service: str) -> str:
        return self.deployment.target(service)

    def nats_node(self, server_name: str) -> NatsNode:
        """The member JetStream calls ``server_name`` (``n2``)."""
        (node,) = [n for n in self._nats if n.server_name == server_name]
        return node

    def wait_whole(self) -> None:
        """Until every process runs and serves (a schedule starts on a whole
        cluster): each service replica answers SERVING, every member sees
        the JetStream meta leader. Raises when one has died."""
        dead = [name for name, process in self.processes().items() if not process.alive]
        if dead:
            raise RuntimeError(f"not running: {', '.join(dead)}")
        for replicas in self.deployment.replicas.values():
            for replica in replicas:
                wait_serving(replica)
        self.deployment.cluster.wait_jetstream()

    def start(self) -> NamespaceCluster:
        try:
            self.deployment.start()
        except BaseException:
            self.network.close()
            self._release()
            raise
        for node, env in zip(self._nats, self.deployment.nats_env, strict=True):
            node.env = dict(env)  # kept on every restart
        return self

    def _release(self) -> None:
        for preparer in self._preparers:
            preparer.release()

    def stop(self) -> None:
        try:
            self.network.heal()  # a draining service reaches NATS and its database
        except subprocess.SubprocessError:
            pass
        finally:
            try:
                self.deployment.stop()
            finally:
                self.network.close()
                self._release()

    def __enter__(self) -> NamespaceCluster:
        return self.start()

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        self.stop()
