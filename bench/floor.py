"""The design's floor: what the parts every job must pass through cost on this
machine with no Quire code around them.

Quire's design gives each step of a job its own queue message (``Nats-Msg-Id``
from the job and the stage, DESIGN.md invariant 3) on a JetStream stream with
``sync_interval: always`` (invariant 7), and gives a client one RPC per upload,
one to submit and one to watch. This measures the cheapest those can be:

- ``messaging_floor``: a nats-server started with the stack's own config
  (file store, ``sync_interval: always``) and a work-queue stream; messages of
  a given size are published with an acknowledgement at the pipeline's
  concurrency, then fetched by one pull consumer in batches and acknowledged.
  CPU of the server and of this process per message, publish to ack.
- ``rpc_floor``: the gRPC health check, the cheapest call a Quire service
  answers, made against a running service; CPU of this process and of the
  service per call.
- ``commit_floor``: a write transaction of one statement on SQLite as every
  service configures it (WAL, ``synchronous=FULL``, ``BEGIN IMMEDIATE``),
  through ``quire.database.Database`` (its writer thread included), and a
  read transaction the same way.
- ``blob_floor``: a small file written, fsync'd and renamed into place, its
  directory fsync'd: what keeping a blob durably costs at the least.

Both are lower bounds for the real thing: no signature, no protobuf, no
database, no lease, and fetches batched where Quire's stages fetch one at a
time.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import nats
from grpc_health.v1 import health_pb2, health_pb2_grpc
from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StorageType, StreamConfig
from procstats import own_cpu_seconds, process_cpu_seconds

from quire.stack.natsserver import NatsServer
from quire.stack.ports import free_port

__all__ = [
    "Floor",
    "messaging_floor",
    "rpc_floor",
    "commit_floor",
    "blob_floor",
    "counter_database",
    "keep_file",
    "sync_folder",
]


@dataclass(frozen=True)
class Floor:
    server_ms: float
    """CPU of the server side per unit (nats-server, or the gRPC service)."""
    client_ms: float
    """CPU of this process (the Python client library) per unit."""

    @property
    def total_ms(self) -> float:
        return self.server_ms + self.client_ms


def messaging_floor(messages: int, payload_bytes: int, concurrency: int) -> Floor:
    """CPU per message of publish (acknowledged), delivery and ack on a real
    nats-server configured as the stack configures it."""
    with tempfile.TemporaryDirectory(prefix="quire-floor-") as folder:
        server = NatsServer(Path(folder), port=free_port(), monitor_port=free_port())
        server.start()
        try:
            assert server.pid is not None
            return asyncio.run(_messaging(server, messages, payload_bytes, concurrency))
        finally:
            server.stop()


async def _messaging(server: NatsServer, messages: int, size: int, concurrency: int) -> Floor:
    assert server.pid is not None
    connection = await nats.connect(server.url)
    try:
        stream = connection.jetstream()
        await stream.add_stream(
            StreamConfig(
                name="FLOOR",
                subjects=["floor.>"],
                retention=RetentionPolicy.WORK_QUEUE,
                storage=StorageType.FILE,
            )
        )
        payload = os.urandom(size)
        server0, own0 = process_cpu_seconds(server.pid), own_cpu_seconds()
        slots = asyncio.Semaphore(concurrency)

        async def publish(index: int) -> None:
            async with slots:
                await stream.publish(
                    f"floor.{index % 64}", payload, headers={"Nats-Msg-Id": f"m{index}"}
                )

        await asyncio.gather(*(publish(index) for index in range(messages)))
        subscription = await stream.pull_subscribe(
            "floor.>",
            durable="floor",
            config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, max_ack_pending=concurrency * 4),
        )
        received = 0
        while received < messages:
            batch = await subscription.fetch(min(concurrency, messages - received), timeout=10)
            for message in batch:
                await message.ack()
            received += len(batch)
        for _ in range(200):  # the acks are fire-and-forget, as Quire's are
            if (await stream.stream_info("FLOOR")).state.messages == 0:
                break
            await asyncio.sleep(0.05)
        else:
            raise RuntimeError("acknowledged messages were not removed from the stream")
        server_seconds = process_cpu_seconds(server.pid) - server0
        own_seconds = own_cpu_seconds() - own0
    finally:
        await connection.close()
    return Floor(server_seconds / messages * 1000, own_seconds / messages * 1000)


def rpc_floor(endpoint: str, service_pid: int, calls: int, concurrency: int) -> Floor:
    """CPU per call of the gRPC health check against a running service."""
    return asyncio.run(_rpcs(endpoint, service_pid, calls, concurrency))


async def _rpcs(endpoint: str, service_pid: int, calls: int, concurrency: int) -> Floor:
    async with grpc.aio.insecure_channel(endpoint) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        await health.Check(health_pb2.HealthCheckRequest())
        service0, own0 = process_cpu_seconds(service_pid), own_cpu_seconds()
        slots = asyncio.Semaphore(concurrency)

        async def check() -> None:
            async with slots:
                await health.Check(health_pb2.HealthCheckRequest())

        await asyncio.gather(*(check() for _ in range(calls)))
        service_seconds = process_cpu_seconds(service_pid) - service0
        own_seconds = own_cpu_seconds() - own0
    return Floor(service_seconds / calls * 1000, own_seconds / calls * 1000)


def counter_database(path: Path) -> tuple[Any, Any, Any]:
    """A SQLite database at ``path`` as every service configures it
    (``quire.database``), holding one counter: the database, the statement
    that adds one to the counter, and the one that reads it."""
    from sqlalchemy import Column, Integer, MetaData, String, Table, select, update

    from quire.database import Database

    metadata = MetaData()
    table = Table("floor", metadata, Column("k", String(8), primary_key=True), Column("v", Integer))
    database = Database(f"sqlite:///{path}", metadata)
    database.create_schema()
    database.transaction(lambda c: c.execute(table.insert().values(k="a", v=0)))
    bump = update(table).where(table.c.k == "a").values(v=table.c.v + 1)
    return database, bump, select(table.c.v).where(table.c.k == "a")


def commit_floor(folder: Path, transactions: int) -> tuple[float, float]:
    """CPU ms of this process per write transaction and per read transaction."""
    database, bump, look = counter_database(folder / "floor.db")

    async def run() -> tuple[float, float]:
        await database.run(lambda c: c.execute(bump))
        started = own_cpu_seconds()
        for _ in range(transactions):
            await database.run(lambda c: c.execute(bump))
        written = own_cpu_seconds()
        for _ in range(transactions):
            await database.read(lambda c: c.execute(look).scalar())
        read = own_cpu_seconds()
        return (written - started) / transactions * 1000, (read - written) / transactions * 1000

    try:
        return asyncio.run(run())
    finally:
        database.close()


def keep_file(folder: Path, name: str, data: bytes) -> None:
    """``data`` written to a temporary file in ``folder``, fsync'd and renamed
    to ``name``: a blob kept, but for its directory's fsync (``sync_folder``)."""
    temporary = folder / f".tmp-{name}"
    with open(temporary, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, folder / name)


def sync_folder(folder: Path) -> None:
    """Make the renames into ``folder`` durable."""
    directory = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def blob_floor(folder: Path, blobs: int, size: int = 16 * 1024) -> float:
    """CPU ms of this process per durably kept blob of ``size`` bytes."""
    payload = os.urandom(size)
    target = folder / "blobs"
    target.mkdir(parents=True, exist_ok=True)
    started = own_cpu_seconds()
    for index in range(blobs):
        keep_file(target, f"blob-{index}", payload)
        sync_folder(target)
    return (own_cpu_seconds() - started) / blobs * 1000
