"""``lease-cut``: a stage replica cut from every NATS member while it holds
a lease (its own figures say it is working on a delivery; its spans, read
once the cut is in place, name the deliveries it held then, and a cut that
came as its work ended is mended and made again when it next holds one),
kept cut until
the lease has run out and JetStream has handed the work to another replica
(a sibling replica commits a delivery after a first one), then mended. The cut replica
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

from quire.pipeline import WORKER_SERVICES
from quire.settings import service_metrics_var
from quire.testing.nemesis.fault import Cluster
from quire.testing.nemesis.inflight import taken_unfinished
from quire.testing.nemesis.namespaced import namespaced
from quire.testing.nemesis.probes import replica_metric

__all__ = ["LeaseCut", "fenced_after"]

IN_FLIGHT = "quire_stage_in_flight"
DELIVERIES = "quire_stage_deliveries"
TAKEOVER_TIMEOUT_SECONDS = 30.0
CUT_TRIES = 5
"""Cuts made until one leaves the target holding a lease."""
LEASE_WAIT_SECONDS = 10.0
SPAN_EXPORT_SECONDS = 0.5
"""A replica writes its finished spans within 0.2 s (``quire.telemetry``)."""
POLL_SECONDS = 0.2
STALE = "stale lease for job"
_STALE_JOB = re.compile(r"stale lease for job (\S+) \(token")


def _taken_over(cluster: Cluster, target: str) -> float | None:
    """How many deliveries after a first one the target's sibling replicas
    have committed (their ``quire_stage_deliveries`` past its first bucket):
    it grows when a sibling takes over work whose lease ran out. None when
    a sibling does not answer."""
    service = cluster.processes()[target].role
    total = 0.0
    for sibling in cluster.replicas(service):
        if sibling.name == target:
            continue
        address = sibling.env[service_metrics_var(service)]
        every = replica_metric(address, f"{DELIVERIES}_count")
        first = replica_metric(address, f"{DELIVERIES}_bucket", 'le="1.0"')
        if every is None or first is None:
            return None
        total += every - first
    return total


def fenced_after(directory: Path, wall: float, until: float = float("inf")) -> list[str]:
    """The jobs whose result the replica in ``directory`` discarded as stale
    between ``wall`` and ``until`` (``time.time()``), from its log's JSON
    lines; each once."""
    jobs: list[str] = []
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
        if found and wall <= when.timestamp() <= until and found.group(1) not in jobs:
            jobs.append(found.group(1))
    return jobs


class LeaseCut:
    kind = "lease-cut"
    hold = 0.5
    """Mended this soon after another replica took the work over, so that
    the cut replica's own calls, held in its kernel, may still complete
    within their timeouts and its work reach its (stale) commit."""

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
        address = replica.env[service_metrics_var(replica.role)]
        for tries in range(1, CUT_TRIES + 1):
            before = await asyncio.to_thread(_taken_over, found, target)
            for node in found.nats_nodes():
                found.network.partition(target, node.name)
            wall = time.time()  # cut from every member from here on
            # What it held at the cut, from its own spans (written locally,
            # so the cut does not hold them back): work that ended before
            # the cut took effect leaves nothing to take over.
            await asyncio.sleep(SPAN_EXPORT_SECONDS)
            held = await asyncio.to_thread(taken_unfinished, [replica.directory], wall)
            if held or tries == CUT_TRIES:
                break
            await self.heal(cluster, target)
            deadline = time.monotonic() + LEASE_WAIT_SECONDS
            while time.monotonic() < deadline:
                if (await asyncio.to_thread(replica_metric, address, IN_FLIGHT) or 0) > 0:
                    break
                await asyncio.sleep(POLL_SECONDS / 4)
        cut = time.monotonic()
        taken = 0.0
        while time.monotonic() - cut < TAKEOVER_TIMEOUT_SECONDS:
            after = await asyncio.to_thread(_taken_over, found, target)
            if before is None:
                before = after
            elif after is not None and after > before:
                taken = after - before
                break
            await asyncio.sleep(POLL_SECONDS)
        return {
            "cut_from": ",".join(node.name for node in found.nats_nodes()),
            "leases_held": str(len(held)),
            "cut_tries": str(tries),
            "taken_over": f"{taken:g}",
            "taken_over_after_s": f"{time.monotonic() - cut:.1f}",
        }

    async def heal(self, cluster: Cluster, target: str) -> None:
        found = namespaced(cluster)
        for node in found.nats_nodes():
            found.network.mend(target, node.name)
