"""Partitions of the NATS cluster: one member cut from the other two while
every client that reaches it still does (the test's host side and the
service replicas connected to it keep their connections; what they ask of
JetStream through it gets no answer until the cut is mended).

- ``nats-minority``: a member some service replica is connected to, so
  that clients are on both sides of the cut;
- ``nats-meta-leader``: the member leading the JetStream meta group;
- ``nats-stream-leader``: the member leading the work queue's stream.
"""

from __future__ import annotations

import asyncio

from quire.testing.nemesis.fault import Cluster
from quire.testing.nemesis.namespaced import namespaced
from quire.testing.nemesis.probes import connected_replicas, meta_leader, stream_leader
from quire.testing.nscluster import NamespaceCluster, NatsNode
from quire.workqueue.topology import WORK_STREAM

__all__ = ["NatsMetaLeaderCut", "NatsMinorityCut", "NatsStreamLeaderCut"]


class _NatsCut:
    kind = ""

    def _chosen(self, cluster: NamespaceCluster) -> list[NatsNode]:
        raise NotImplementedError

    def targets(self, cluster: Cluster) -> list[str]:
        return [node.name for node in self._chosen(namespaced(cluster)) if node.alive]

    async def strike(self, cluster: Cluster, target: str) -> dict[str, str]:
        found = namespaced(cluster)
        node = found.processes()[target]
        assert isinstance(node, NatsNode)
        clients = await asyncio.to_thread(connected_replicas, found, node)
        meta = await asyncio.to_thread(meta_leader, found)
        work = await asyncio.to_thread(stream_leader, found, WORK_STREAM)
        peers = [other.name for other in found.nats_nodes() if other.name != target]
        for peer in peers:
            found.network.partition(target, peer)
        return {
            "server": node.server_name,
            "cut_from": ",".join(peers),
            "clients_on_it": ",".join(clients) or "none",
            "meta_leader": meta.server_name if meta else "?",
            "work_stream_leader": work.server_name if work else "?",
        }

    async def heal(self, cluster: Cluster, target: str) -> None:
        found = namespaced(cluster)
        for other in found.nats_nodes():
            found.network.mend(target, other.name)
        await asyncio.to_thread(found.deployment.cluster.wait_jetstream)


class NatsMinorityCut(_NatsCut):
    kind = "nats-minority"

    def _chosen(self, cluster: NamespaceCluster) -> list[NatsNode]:
        return [node for node in cluster.nats_nodes() if connected_replicas(cluster, node)]


class NatsMetaLeaderCut(_NatsCut):
    kind = "nats-meta-leader"

    def _chosen(self, cluster: NamespaceCluster) -> list[NatsNode]:
        leader = meta_leader(cluster)
        return [leader] if leader is not None else []


class NatsStreamLeaderCut(_NatsCut):
    kind = "nats-stream-leader"

    def _chosen(self, cluster: NamespaceCluster) -> list[NatsNode]:
        leader = stream_leader(cluster, WORK_STREAM)
        return [leader] if leader is not None else []
