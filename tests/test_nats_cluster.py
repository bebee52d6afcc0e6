"""Quire on a 3-node JetStream cluster (three nats-server processes):
``QUIRE_NATS_REPLICAS=3`` gives every stream, consumer and the job-gate
bucket a copy on each node, and SIGKILL of one node mid-run stalls nothing —
every job still ends COMPLETED, exactly once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_faults_common import ledger_rows, wait_all

from quire.client import AdmissionClient, PacketItem
from quire.jobgate import GATE_BUCKET
from quire.jobs import state_name
from quire.runtime import connect_nats
from quire.stack.natscluster import NatsCluster
from quire.stack.supervisor import Stack
from quire.testing.pdfs import write_text_pdf
from quire.testing.soak import SOAK_ENV
from quire.workqueue.topology import DEAD_STREAM, EVENTS_STREAM, WORK_STREAM

pytestmark = pytest.mark.stack

JOBS = 24


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    cluster = NatsCluster(tmp_path / "nats")
    cluster.start()
    yield cluster
    cluster.stop()


async def test_replicated_streams_survive_the_loss_of_one_nats_node(
    cluster: NatsCluster, tmp_path: Path
) -> None:
    stack = Stack(
        tmp_path / "stack",
        nats_url=cluster.url,
        # Short leases and backoffs (as the soak's), so work caught on the
        # killed node comes back within seconds.
        env={**SOAK_ENV, "QUIRE_NATS_REPLICAS": "3"},
    )
    info = await asyncio.to_thread(stack.start)
    try:
        nc = await connect_nats(cluster.url, "test")
        try:
            js = nc.jetstream(timeout=10)
            for stream in (WORK_STREAM, EVENTS_STREAM, DEAD_STREAM, f"KV_{GATE_BUCKET}"):
                described = await js.stream_info(stream)
                assert described.config.num_replicas == 3, stream
                assert described.cluster is not None and len(described.cluster.replicas or []) == 2
        finally:
            await nc.close()

        async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
            names = []
            for index in range(JOBS):
                path = write_text_pdf(tmp_path / f"{index}.pdf", [f"{index} {uuid.uuid4().hex}"])
                digest = (await client.upload(path)).sha256
                names.append((await client.submit([PacketItem("d", digest)])).name)
                if index == JOBS // 3:
                    # The node the work stream's leader is on, the worst one to lose.
                    victim = await _leader_of(cluster, WORK_STREAM)
                    victim.kill()
            jobs = await wait_all(client, names, timeout=240, through_unavailable=True)
        assert {state_name(job.state) for job in jobs.values()} == {"COMPLETED"}
        assert len(cluster.running()) == 2
    finally:
        await asyncio.to_thread(stack.stop)

    completions = [row for row in ledger_rows(stack.data_dir) if row[3] == "COMPLETED"]
    assert sorted(row[2] for row in completions) == sorted(names), "each job completed once"


async def _leader_of(cluster: NatsCluster, stream: str):  # type: ignore[no-untyped-def]
    nc = await connect_nats(cluster.url, "test")
    try:
        described = await nc.jetstream(timeout=10).stream_info(stream)
    finally:
        await nc.close()
    assert described.cluster is not None
    leader = described.cluster.leader
    (server,) = [s for s in cluster.servers if s.cluster and s.cluster.server_name == leader]
    return server
