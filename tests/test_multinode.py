"""Quire across machines, on this one: a 3-node JetStream cluster with R3
streams and object store, PostgreSQL with one database per service, and two
replicas of every service, each in its own directory with no path shared.
Midway, one NATS node and one replica of every service are SIGKILLed: of each
stage's service, the replica working on a job when it can be found (its
``quire_stage_in_flight``), and the kill waits until at least one is. Every
job still ends COMPLETED exactly once with one artifact, and ``quire check``
(each service's own database, the blobs in NATS) finds nothing.

``make multinode`` runs it with 200 jobs; the suite runs it with
``MULTINODE_JOBS`` (6 by default: the kills come after the fourth is submitted)."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import grpc
import pytest
from test_faults_common import wait_all

from quire.client import AdmissionClient, PacketItem, TenantAdminClient
from quire.invariants import check
from quire.jobs import state_name
from quire.pipeline import WORKER_SERVICES
from quire.runtime import connect_nats
from quire.settings import SERVICES, service_metrics_var
from quire.stack.natsserver import NatsServer
from quire.testing.multinode import MultiNode, Replica
from quire.testing.nemesis.probes import replica_metric
from quire.testing.pdfs import write_text_pdf
from quire.testing.soak import SOAK_ENV
from quire.workqueue.topology import TOPOLOGY_STREAMS, WORK_STREAM

pytestmark = [pytest.mark.stack, pytest.mark.fault]

JOBS = int(os.environ.get("MULTINODE_JOBS", "6"))
T = TypeVar("T")


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[MultiNode]:
    deployment = MultiNode(tmp_path / "cluster", replicas=2, env=dict(SOAK_ENV))
    deployment.start()
    yield deployment
    deployment.stop()


async def test_two_replicas_of_everything_survive_losing_a_nats_node_and_one_of_each(
    nodes: MultiNode, tmp_path: Path
) -> None:
    nc = await connect_nats(nodes.cluster.url, "test")
    try:
        js = nc.jetstream(timeout=10)
        for stream in TOPOLOGY_STREAMS:
            described = await js.stream_info(stream)
            assert described.config.num_replicas == 3, stream
            assert described.cluster is not None and len(described.cluster.replicas or []) == 2
    finally:
        await nc.close()

    admission = nodes.target("admission")
    admin = TenantAdminClient(admission, nodes.operator_token)
    try:
        tenant = await admin.create_tenant(f"multinode-{uuid.uuid4().hex[:8]}")
    finally:
        await admin.close()

    async with AdmissionClient(admission, tenant.secret) as client:
        names = []
        for index in range(JOBS):
            pages = [f"job {index} {uuid.uuid4().hex}", "second page"]
            path = write_text_pdf(tmp_path / f"{index}.pdf", pages)
            # A client retries what was refused as UNAVAILABLE while a NATS node
            # or a replica is gone; the same request_id keeps it one job.
            digest = (await _retrying(lambda p=path: client.upload(p))).sha256
            request_id = uuid.uuid4().hex
            job = await _retrying(
                lambda d=digest, r=request_id: client.submit([PacketItem("d", d)], request_id=r)
            )
            names.append(job.name)
            if index == JOBS // 2:
                victims = await _working_victims(nodes)
                # The node the work stream's leader is on, the worst one to lose.
                victim = await _leader_of(nodes, WORK_STREAM)
                await asyncio.to_thread(victim.kill)
                for replica, _working in victims.values():
                    await asyncio.to_thread(replica.kill)
        jobs = await wait_all(client, names, timeout=600, through_unavailable=True)
    working = sorted(service for service, (_replica, held) in victims.items() if held)
    print(f"replicas killed while working on a job: {', '.join(working)}")
    assert working, "some stage's replica died with a job in hand"
    assert {state_name(job.state) for job in jobs.values()} == {"COMPLETED"}
    assert len({job.output_digest for job in jobs.values()}) == JOBS, "one artifact each"
    assert len(nodes.cluster.running()) == 2

    for service in SERVICES:
        for replica in nodes.replicas[service]:
            data = replica.directory / "data"
            blobs = data / "blobs"
            assert not blobs.exists() or not any(
                p.is_file() and ".tmp" not in p.parts for p in blobs.rglob("*")
            ), f"{replica.name} keeps no blob on its own disk"

    for replicas in nodes.replicas.values():
        for replica in replicas:
            replica.stop()
    report = await asyncio.to_thread(
        check, nodes.replicas["audit"][1].directory / "data", stopped=True, env=nodes.checker_env()
    )
    assert report.ok, report.findings
    assert report.jobs_accepted == JOBS
    assert report.jobs_by_state == {"COMPLETED": JOBS}
    assert report.artifacts == JOBS


async def _working_victims(
    nodes: MultiNode, timeout: float = 20.0
) -> dict[str, tuple[Replica, bool]]:
    """A replica of every service to kill, and whether it holds a job: of each
    stage's service, one working on a job if either is (its
    ``quire_stage_in_flight``), else the first. Waits (up to ``timeout``)
    until some stage's replica is working, so that the kill finds work in hand."""
    deadline = time.monotonic() + timeout
    while True:
        victims: dict[str, tuple[Replica, bool]] = {}
        for service in SERVICES:
            replicas = nodes.replicas[service]
            chosen = (replicas[0], False)
            if service in WORKER_SERVICES:
                for replica in replicas:
                    address = replica.env[service_metrics_var(service)]
                    held = await asyncio.to_thread(replica_metric, address, "quire_stage_in_flight")
                    if held:
                        chosen = (replica, True)
                        break
            victims[service] = chosen
        if any(held for _replica, held in victims.values()) or time.monotonic() > deadline:
            return victims
        await asyncio.sleep(0.02)


async def _retrying(call: Callable[[], Awaitable[T]], timeout: float = 120.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await call()
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def _leader_of(nodes: MultiNode, stream: str) -> NatsServer:
    nc = await connect_nats(nodes.cluster.url, "test")
    try:
        described = await nc.jetstream(timeout=10).stream_info(stream)
    finally:
        await nc.close()
    assert described.cluster is not None
    (server,) = [
        s
        for s in nodes.cluster.servers
        if s.cluster and s.cluster.server_name == described.cluster.leader
    ]
    return server
