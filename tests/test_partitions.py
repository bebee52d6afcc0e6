"""Issue 42's cluster in network namespaces and a short run of its nemesis
(``make partitions`` runs 20 schedules): three nats-server members,
PostgreSQL and two replicas of every service, each in a namespace of its
own. The nemesis strikes what seed 13 plans — a stage replica cut from NATS
while it holds a lease, a NATS member cut from its peers with replicas on
both sides, a replica SIGKILLed, an audit or admission replica cut from
PostgreSQL — each while jobs are in flight, and the recorded history holds
every property of the checker. About a minute."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from quire.settings import SERVICES
from quire.testing.history import verdicts_markdown
from quire.testing.nemesis.catalogue import faults, preparers
from quire.testing.nemesis.fault import Fault
from quire.testing.nemesis.report import write_report
from quire.testing.nemesis.run import run_schedule
from quire.testing.nscluster import NamespaceCluster
from quire.testing.soak import SOAK_ENV

pytestmark = [pytest.mark.stack, pytest.mark.fault]

SEED = 13
NETWORK_KINDS = (
    "nats-minority",
    "nats-meta-leader",
    "nats-stream-leader",
    "lease-cut",
    "postgres-cut",
    "kill-replica",
    "kill-nats",
)
"""With these kinds, seed 13 plans lease-cut, nats-minority, kill-replica
and postgres-cut, in that order."""
STRIKES = 4
DISK_AND_CLOCK_KINDS = ("blob-disk-full", "temp-disk-full", "clock-skew")
"""Struck once each, in the order the seed draws."""
COMMANDS = {"nats": "nats-server", "postgres": "postgres"}


@pytest.fixture(scope="module")
def chosen() -> list[Fault]:
    """Every fault, made for this module's cluster (the disk and clock
    faults ready its processes before they start)."""
    return faults(seed=SEED)


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, chosen: list[Fault]
) -> Iterator[NamespaceCluster]:
    with NamespaceCluster(
        tmp_path_factory.mktemp("partitions") / "cluster",
        env=SOAK_ENV,
        preparers=preparers(chosen),
    ) as nodes:
        yield nodes


def _of(chosen: list[Fault], kinds: tuple[str, ...]) -> list[Fault]:
    return [fault for fault in chosen if fault.kind in kinds]


def _namespace_of(pid: int) -> str:
    return subprocess.run(
        ["ip", "netns", "identify", str(pid)], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_every_node_runs_in_a_namespace_of_its_own(cluster: NamespaceCluster) -> None:
    processes = cluster.processes()
    assert len(processes) == 3 + 1 + 2 * len(SERVICES)
    for name, process in processes.items():
        assert process.pid is not None and process.alive, name
        node = cluster.network.nodes[process.namespace_node]
        # The pid is the server's own: ip netns exec execs in place.
        assert _namespace_of(process.pid) == node.namespace, name
        command = Path(f"/proc/{process.pid}/comm").read_text().strip()
        assert command.startswith(COMMANDS.get(process.role, "python")), (name, command)
    urls = cluster.replicas("signer")[0].env["QUIRE_NATS_URL"].split(",")
    assert sorted(urls) == sorted(node.server.url for node in cluster.nats_nodes())
    assert all(url.startswith("nats://10.213.") for url in urls), "private addresses only"

    victim = cluster.replicas("validator")[1]
    pid = victim.pid
    victim.kill()
    assert not Path(f"/proc/{pid}").exists(), "the kill reached the service itself"
    victim.start()
    assert victim.alive and victim.pid != pid


def test_a_seeded_schedule_strikes_mid_work_and_every_property_holds(
    cluster: NamespaceCluster, chosen: list[Fault], tmp_path: Path
) -> None:
    started = time.monotonic()
    result = asyncio.run(
        run_schedule(
            cluster,
            SEED,
            _of(chosen, NETWORK_KINDS),
            tmp_path / "run",
            strikes=STRIKES,
            jobs_per_client=3,
        )
    )
    report = write_report(result, tmp_path / "report")
    print(report.read_text())
    print(f"{time.monotonic() - started:.1f} s")
    assert result.ok, verdicts_markdown(result.verdicts)
    records = result.timeline.records
    assert [r.kind for r in records] == [p.kind for p in result.planned], "every strike struck"
    for record in records:
        assert not record.error, (record.kind, record.error)
        assert record.end is not None, (record.kind, "healed")
        assert record.in_flight, (record.kind, "struck with no job in flight")
    by_kind = {record.kind: record for record in records}
    assert float(by_kind["lease-cut"].detail["taken_over"]) >= 1, "a sibling took the work"
    assert by_kind["nats-minority"].detail["clients_on_it"] != "none", "clients on both sides"
    assert all(process.alive for process in cluster.processes().values()), "all healed"
    assert (tmp_path / "report" / f"seed-{SEED}.png").stat().st_size > 0
    for replica in cluster.replicas("admission"):  # the clients spread over both
        spans = (replica.directory / "spans.jsonl").read_text()
        assert "AdmissionService/SubmitJob" in spans, replica.name


def test_full_disks_and_a_skewed_clock_strike_mid_work_and_every_property_holds(
    cluster: NamespaceCluster, chosen: list[Fault], tmp_path: Path
) -> None:
    """A nats-server's JetStream store full, a replica's temporary disk
    full, a replica's clock minutes off: each once, with jobs in flight,
    on the same cluster, and the history holds."""
    result = asyncio.run(
        run_schedule(
            cluster,
            SEED,
            _of(chosen, DISK_AND_CLOCK_KINDS),
            tmp_path / "run",
            strikes=len(DISK_AND_CLOCK_KINDS),
            clients=2,  # the clock's two restarts are slow under the suite's load
            jobs_per_client=3,
        )
    )
    write_report(result, tmp_path / "report")
    assert result.ok, verdicts_markdown(result.verdicts)
    records = result.timeline.records
    assert sorted(r.kind for r in records) == sorted(DISK_AND_CLOCK_KINDS), "every strike struck"
    for record in records:
        assert not record.error, (record.kind, record.error)
        assert record.end is not None, (record.kind, "healed")
        assert record.in_flight, (record.kind, "struck with no job in flight")
    by_kind = {record.kind: record for record in records}
    assert int(by_kind["blob-disk-full"].detail["filled_bytes"]) > 0
    assert int(by_kind["temp-disk-full"].detail["filled_bytes"]) > 0
    assert by_kind["clock-skew"].detail["how"] == "restarted with it"
    assert abs(int(by_kind["clock-skew"].detail["offset_seconds"])) >= 60
    assert all(process.alive for process in cluster.processes().values()), "all healed"
