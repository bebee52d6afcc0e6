"""What the cluster reports about itself, as the nemesis reads it when it
chooses a target and when it strikes: NATS's monitoring documents (who
leads the meta group and each stream, which clients each member serves)
and a replica's own Prometheus figures (the leases it holds). Blocking
HTTP reads, each bounded; call them through ``asyncio.to_thread``.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterable
from typing import Any

from quire.testing.nscluster import NamespaceCluster, NatsNode, monitor

__all__ = [
    "connected_replicas",
    "meta_leader",
    "metric_sum",
    "replica_metric",
    "stream_leader",
]

METRICS_TIMEOUT_SECONDS = 2.0


def _documents(cluster: NamespaceCluster, path: str) -> Iterable[tuple[NatsNode, dict[str, Any]]]:
    for node in cluster.nats_nodes():
        if not node.alive:
            continue
        try:
            yield node, monitor(node.server, path)
        except (OSError, ValueError):
            continue


def meta_leader(cluster: NamespaceCluster) -> NatsNode | None:
    """The member the most members name as the meta group's leader."""
    votes: dict[str, int] = {}
    for _, document in _documents(cluster, "jsz"):
        leader = (document.get("meta_cluster") or {}).get("leader")
        if leader:
            votes[leader] = votes.get(leader, 0) + 1
    if not votes:
        return None
    return cluster.nats_node(max(votes, key=lambda name: votes[name]))


def stream_leader(cluster: NamespaceCluster, stream: str) -> NatsNode | None:
    """The member that leads ``stream``'s replicas, as the members report it."""
    votes: dict[str, int] = {}
    for _, document in _documents(cluster, "jsz?streams=true"):
        for account in document.get("account_details") or []:
            for found in account.get("stream_detail") or []:
                leader = (found.get("cluster") or {}).get("leader")
                if found.get("name") == stream and leader:
                    votes[leader] = votes.get(leader, 0) + 1
    if not votes:
        return None
    return cluster.nats_node(max(votes, key=lambda name: votes[name]))


def connected_replicas(cluster: NamespaceCluster, node: NatsNode) -> list[str]:
    """The service replicas with a connection to ``node`` (by their address)."""
    by_address = {
        replica.placement.host: replica.name
        for service in cluster.deployment.replicas
        for replica in cluster.replicas(service)
    }
    try:
        document = monitor(node.server, "connz?limit=1024")
    except (OSError, ValueError):
        return []
    found = {by_address.get(c.get("ip", ""), "") for c in document.get("connections") or []}
    return sorted(name for name in found if name)


def replica_metric(address: str, family: str, having: str = "") -> float | None:
    """The sum of ``family``'s samples (those whose labels include
    ``having``, when given) on a replica's ``/metrics``; None when it does
    not answer."""
    try:
        url = f"http://{address}/metrics"
        with urllib.request.urlopen(url, timeout=METRICS_TIMEOUT_SECONDS) as reply:  # noqa: S310
            text = reply.read().decode()
    except OSError:
        return None
    return metric_sum(text, family, having)


def metric_sum(text: str, family: str, having: str = "") -> float:
    """The sum of ``family``'s samples in a Prometheus text exposition
    (those whose labels include ``having``, when given)."""
    total = 0.0
    for line in text.splitlines():
        if having and having not in line.partition(" ")[0]:
            continue
        if line.startswith(family) and line[len(family) : len(family) + 1] in ("{", " "):
            try:
                total += float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                continue
    return total
