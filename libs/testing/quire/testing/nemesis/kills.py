"""The kills the suite already had, as faults: SIGKILL a service replica
(``kill-replica``: one that holds a lease, or an admission or audit
replica) or a nats-server member (``kill-nats``); healing starts it again
in its namespace on the same data and waits until it serves."""

from __future__ import annotations

import asyncio

from quire.pipeline import WORKER_SERVICES
from quire.settings import SERVICES, service_metrics_var
from quire.testing.nemesis.fault import Cluster
from quire.testing.nemesis.leasecut import IN_FLIGHT
from quire.testing.nemesis.namespaced import namespaced
from quire.testing.nemesis.probes import connected_replicas, replica_metric
from quire.testing.nscluster import NatsNode

__all__ = ["NatsKill", "ReplicaKill"]


class ReplicaKill:
    kind = "kill-replica"

    def targets(self, cluster: Cluster) -> list[str]:
        """Admission and audit replicas (they serve every job in flight), and
        the stage replicas holding a lease now: a kill lands on work."""
        found = []
        for service in SERVICES:
            for replica in cluster.replicas(service):
                if service in WORKER_SERVICES:
                    address = replica.env[service_metrics_var(service)]
                    if not (replica_metric(address, IN_FLIGHT) or 0) > 0:
                        continue
                found.append(replica.name)
        return found

    async def strike(self, cluster: Cluster, target: str) -> dict[str, str]:
        process = cluster.processes()[target]
        detail = {"signal": "SIGKILL", "pid": str(process.pid)}
        if process.role in WORKER_SERVICES:  # what it held, as it said just before
            address = process.env[service_metrics_var(process.role)]
            held = await asyncio.to_thread(replica_metric, address, IN_FLIGHT)
            detail["leases_held"] = "?" if held is None else f"{held:g}"
        await asyncio.to_thread(process.kill)
        return detail

    async def heal(self, cluster: Cluster, target: str) -> None:
        process = cluster.processes()[target]
        if not process.alive:
            await asyncio.to_thread(process.start)


class NatsKill:
    kind = "kill-nats"

    def targets(self, cluster: Cluster) -> list[str]:
        return [node.name for node in cluster.nats_nodes()]

    async def strike(self, cluster: Cluster, target: str) -> dict[str, str]:
        found = namespaced(cluster)
        node = found.processes()[target]
        assert isinstance(node, NatsNode)
        clients = await asyncio.to_thread(connected_replicas, found, node)
        pid = node.pid
        await asyncio.to_thread(node.kill)
        return {"signal": "SIGKILL", "pid": str(pid), "clients_on_it": ",".join(clients) or "none"}

    async def heal(self, cluster: Cluster, target: str) -> None:
        found = namespaced(cluster)
        node = found.processes()[target]
        if not node.alive:
            await asyncio.to_thread(node.start)
        await asyncio.to_thread(found.deployment.cluster.wait_jetstream)
