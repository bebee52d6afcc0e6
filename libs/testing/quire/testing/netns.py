"""Real network partitions on this machine (issue 42): each node of a test
cluster in its own network namespace, joined to the others by a veth pair
on one bridge, on a private /24 that exists only while the test runs.

``partition(a, b)`` cuts the path between two nodes both ways (a blackhole
route to the other's address in each namespace), so a node may lose its
peers while a client on the bridge still reaches it; ``mend(a, b)`` undoes
one cut; ``isolate(node)`` takes its link down (nothing reaches it);
``heal()`` undoes every cut. Processes run inside a node with ``ip netns
exec``, which execs the command in place (the pid is the process's own).
Needs root (``ip netns``); every name carries a per-network id, the subnet
is one no other bridge on the machine routes, and ``close()`` removes all
it made.

A blackhole fails new connections at once but leaves established TCP
connections open: what they were sending waits in the kernel and is
retransmitted once the cut is mended, so a request that timed out during
a cut may still arrive after it.
"""

from __future__ import annotations

import itertools
import os
import random
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

__all__ = ["Network", "Node", "available"]

_IDS = itertools.count()


def available() -> bool:
    """Whether this process may make network namespaces (root with ``ip``)."""
    return os.geteuid() == 0 and Path("/usr/sbin/ip").exists()


def _ip(*args: str, namespace: str = "") -> None:
    command = ["ip", *(["netns", "exec", namespace, "ip"] if namespace else []), *args]
    subprocess.run(command, check=True, capture_output=True, timeout=10)


def _free_subnet() -> int:
    """A third octet for 10.213.<n>.0/24 that no route on this machine uses
    (other tests' networks among them), from a random start."""
    routes = subprocess.run(
        ["ip", "-4", "route", "show"], check=True, capture_output=True, text=True, timeout=10
    ).stdout
    start = random.randrange(100, 250)
    for offset in range(150):
        subnet = 100 + (start - 100 + offset) % 150
        if f"10.213.{subnet}.0/24" not in routes:
            return subnet
    raise RuntimeError("no free 10.213.x.0/24 subnet")


@dataclass(frozen=True)
class Node:
    """One namespace on the bridge."""

    name: str
    namespace: str
    address: str
    host_link: str
    """The veth end on the bridge's side (down: the node is isolated)."""


@dataclass
class Network:
    """A bridge and its nodes; the host reaches every node through the bridge."""

    subnet: int = field(default_factory=_free_subnet)
    """The third octet of 10.213.<subnet>.0/24."""
    nodes: dict[str, Node] = field(default_factory=dict)
    _cuts: set[tuple[str, str]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.tag = f"q{os.getpid() % 10000}{next(_IDS)}"
        self.bridge = f"{self.tag}br"[:15]
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.host_address}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    @property
    def host_address(self) -> str:
        return f"10.213.{self.subnet}.1"

    def add(self, name: str) -> Node:
        index = len(self.nodes) + 2
        namespace = f"{self.tag}-{name}"
        host_link, node_link = f"{self.tag}h{index}"[:15], f"{self.tag}n{index}"[:15]
        address = f"10.213.{self.subnet}.{index}"
        _ip("netns", "add", namespace)
        _ip("link", "add", host_link, "type", "veth", "peer", "name", node_link)
        _ip("link", "set", node_link, "netns", namespace)
        _ip("link", "set", host_link, "master", self.bridge)
        _ip("link", "set", host_link, "up")
        _ip("addr", "add", f"{address}/24", "dev", node_link, namespace=namespace)
        _ip("link", "set", node_link, "up", namespace=namespace)
        _ip("link", "set", "lo", "up", namespace=namespace)
        node = Node(name, namespace, address, host_link)
        self.nodes[name] = node
        return node

    @property
    def cidr(self) -> str:
        return f"10.213.{self.subnet}.0/24"

    def prefix(self, name: str) -> tuple[str, ...]:
        """The command that runs what follows inside node ``name``'s namespace."""
        return ("ip", "netns", "exec", self.nodes[name].namespace)

    def run(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        output: IO[bytes] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` inside node ``name``'s namespace."""
        return subprocess.Popen(
            [*self.prefix(name), *argv],
            env=dict(env) if env is not None else None,
            stdout=output,
            stderr=output,
        )

    def partition(self, a: str, b: str) -> None:
        """Nothing passes between ``a`` and ``b``, either way; both still
        reach, and are reached from, everyone else."""
        if self.cut(a, b):
            return
        first, second = self.nodes[a], self.nodes[b]
        _ip("route", "add", "blackhole", f"{second.address}/32", namespace=first.namespace)
        _ip("route", "add", "blackhole", f"{first.address}/32", namespace=second.namespace)
        self._cuts.add((a, b))

    def mend(self, a: str, b: str) -> None:
        """Undo ``partition(a, b)`` (either order)."""
        cut = (a, b) if (a, b) in self._cuts else (b, a)
        if cut not in self._cuts:
            return
        first, second = self.nodes[cut[0]], self.nodes[cut[1]]
        _ip("route", "del", "blackhole", f"{second.address}/32", namespace=first.namespace)
        _ip("route", "del", "blackhole", f"{first.address}/32", namespace=second.namespace)
        self._cuts.discard(cut)

    def cut(self, a: str, b: str) -> bool:
        """Whether ``a`` and ``b`` are partitioned."""
        return (a, b) in self._cuts or (b, a) in self._cuts

    def isolate(self, name: str) -> None:
        """Nothing reaches ``name`` and nothing leaves it."""
        _ip("link", "set", self.nodes[name].host_link, "down")

    def rejoin(self, name: str) -> None:
        _ip("link", "set", self.nodes[name].host_link, "up")

    def heal(self) -> None:
        """Every cut undone and every node's link up."""
        for a, b in sorted(self._cuts):
            self.mend(a, b)
        for name in self.nodes:
            self.rejoin(name)

    def close(self) -> None:
        """Remove every namespace, link and the bridge (best effort)."""
        for node in self.nodes.values():
            subprocess.run(["ip", "netns", "del", node.namespace], capture_output=True, timeout=10)
            subprocess.run(["ip", "link", "del", node.host_link], capture_output=True, timeout=10)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=10)
        self.nodes.clear()

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
