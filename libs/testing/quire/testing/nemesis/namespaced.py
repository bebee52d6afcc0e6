"""The faults of this package strike the namespace cluster; part of what
they read (NATS's monitoring, a replica's placement) is its own."""

from __future__ import annotations

from quire.testing.nemesis.fault import Cluster
from quire.testing.nscluster import NamespaceCluster

__all__ = ["namespaced"]


def namespaced(cluster: Cluster) -> NamespaceCluster:
    if not isinstance(cluster, NamespaceCluster):
        raise TypeError("this fault strikes a NamespaceCluster")
    return cluster
