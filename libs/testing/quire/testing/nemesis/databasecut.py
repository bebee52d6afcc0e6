"""``postgres-cut``: an audit or admission replica cut from PostgreSQL
(both ways) while it still reaches NATS and its clients; its database
calls fail or wait until the cut is mended, and the other replica goes on."""

from __future__ import annotations

from quire.pipeline import ADMISSION, AUDIT
from quire.testing.nemesis.fault import Cluster

__all__ = ["DatabaseCut"]


class DatabaseCut:
    kind = "postgres-cut"

    def targets(self, cluster: Cluster) -> list[str]:
        return [r.name for service in (ADMISSION, AUDIT) for r in cluster.replicas(service)]

    async def strike(self, cluster: Cluster, target: str) -> dict[str, str]:
        cluster.network.partition(target, "postgres")
        return {"cut_from": "postgres"}

    async def heal(self, cluster: Cluster, target: str) -> None:
        cluster.network.mend(target, "postgres")
