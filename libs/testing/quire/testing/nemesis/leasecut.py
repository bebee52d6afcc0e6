"""``lease-cut``: a stage replica cut from every NATS member while it holds
a lease (its own figures say it is working on a delivery), kept cut until
the lease has run out and JetStream has handed the work to another replica
(the stage's consumers count a redelivery), then mended. The cut replica
still reaches PostgreSQL and goes on with its work where it can; when it
finally commits, its lease token is stale and the result must be discarded
(``quire.leases``): the history then shows one artifact and one signature
per job. ``fenced`` counts how often its log says so (after the run).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from datetime import datetime
from pathlib import Path

from quire.pipeline import WORKER_SERVICES, stage_of_service
from quire.settings import service_metrics_var
from quire.testing.nemesis.fault import Cluster
from quire.testing.nemesis.namespaced import namespaced
from quire.testing.nemesis.probes import replica_metric
from quire.testing.nscluster import NamespaceCluster, monitor
from quire.workqueue.topology import WORK_STREAM

__all__ = ["LeaseCut", "fenced_after"]

IN_FLIGHT = "quire_stage_in_flight"
REDELIVERY_TIMEOUT_SECONDS = 60.0
POLL_SECONDS = 0.2
STALE = "stale lease for job"
_STALE_JOB = re.compile(r"stale lease for job (\S+) \(token")


def _redelivered(cluster: NamespaceCluster, stage: str) -> int:
    """The stage's consumers' redeliveries, as the best-informed member says."""
    best = -1
    for node in cluster.nats_nodes():
        if not node.alive:
            continue
        try:
            document = monitor(node.server, "jsz?consumers=true")
        except (OSError, ValueError):
            continue
        total = 0
        for account in document.get("account_details") or []:
            for stream in account.get("stream_detail") or []:
                if stream.get("name") != WORK_STREAM:
                    continue
                for consumer in stream.get("consumer_detail") or []:
                    if str(consumer.get("name", "")).startswith(f"{stage}-"):
                        total += int(consumer.get("num_redelivered") or 0)
        best = max(best, total)
    return best


def fenced_after(directory: Path, wall: float) -> list[str]:
    """The jobs whose result the replica in ``directory`` discarded as stale
    after ``wall`` (``time.time()``), from its log's JSON lines."""
    jobs = []
    try:
        lines = (directory / "service.log").read_text(errors="replace").splitlines()
    except OSError:
        return []
    for line in lines:
        if STALE not in line:
            continue
        try:
            entry = json.loads(line)
            when = datetime.fromisoformat(str(entry["time"]).replace("Z", "+00:00"))
        except (ValueError, KeyError):
            continue
        found = _STALE_JOB.search(str(entry.get("message", "")))
        if found and when.timestamp() >= wall:
            jobs.append(found.group(1))
    return jobs


class LeaseCut:
    kind = "lease-cut"

    def targets(self, cluster: Cluster) -> list[str]:
        """The stage replicas holding a lease now."""
        return [
            replica.name
            for service in WORKER_SERVICES
            for replica in cluster.replicas(service)
            if replica.alive
            and (replica_metric(replica.env[service_metrics_var(service)], IN_FLIGHT) or 0) > 0
        ]

    async def strike(self, cluster: Cluster, target: str) -> dict[str, str]:
        found = namespaced(cluster)
        replica = found.processes()[target]
        found_stage = stage_of_service(replica.role)
        assert found_stage is not None, "a stage replica"
        stage = found_stage.name
        address = replica.env[service_metrics_var(replica.role)]
        held = await asyncio.to_thread(replica_metric, address, IN_FLIGHT)
        before = await asyncio.to_thread(_redelivered, found, stage)
        for node in found.nats_nodes():
            found.network.partition(target, node.name)
        cut = time.monotonic()
        after = before
        while time.monotonic() - cut < REDELIVERY_TIMEOUT_SECONDS:
            after = await asyncio.to_thread(_redelivered, found, stage)
            if after > before:
                break
            await asyncio.sleep(POLL_SECONDS)
        return {
            "cut_from": "nats-1,nats-2,nats-3",
            "leases_held": f"{held or 0:g}",
            "redelivered": str(max(0, after - before)),
            "lease_taken_after_s": f"{time.monotonic() - cut:.1f}",
        }

    async def heal(self, cluster: Cluster, target: str) -> None:
        found = namespaced(cluster)
        for node in found.nats_nodes():
            found.network.mend(target, node.name)
