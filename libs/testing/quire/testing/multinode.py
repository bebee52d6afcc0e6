"""Quire as a cluster would run it, on this machine: a 3-node JetStream
cluster, PostgreSQL with one database per service, and several replicas of
every service, each in its own directory with its own copy of the
configuration's secrets. No filesystem path is shared between replicas:
blobs and the tenants' data keys live in NATS (``QUIRE_BLOB_BACKEND=nats``),
every table in PostgreSQL.

Services find each other through a list of every replica's address
(``ipv4:a,b`` targets: gRPC fails over between them, as a Kubernetes Service
would spread them); each replica binds its own.

Everything runs on loopback unless ``place`` says otherwise: given a node's
name (``nats-1``, ``postgres``, ``admission-1``) it answers where that node
runs (``quire.stack.placement``), e.g. in a network namespace of its own on
a private address (``quire.testing.nscluster``).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from grpc_health.v1 import health_pb2, health_pb2_grpc

from quire.identity import provision_identities
from quire.kek import new_ring_line
from quire.runtime import connect_nats
from quire.settings import (
    SERVICES,
    QueueSettings,
    service_address_var,
    service_health_var,
    service_metrics_var,
)
from quire.signer.keystore import _generate as generate_signing_key
from quire.stack.natscluster import NatsCluster
from quire.stack.placement import LOOPBACK, Placement
from quire.stack.ports import free_port
from quire.stack.postgres import PostgresServer, postgres_binaries
from quire.workqueue.topology import ensure_topology

__all__ = ["MultiNode", "Replica", "wait_healthy"]

HEALTH_TIMEOUT_SECONDS = 180.0


@dataclass
class Replica:
    service: str
    number: int
    directory: Path
    address: str
    health: str
    process: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)
    placement: Placement = LOOPBACK

    @property
    def name(self) -> str:
        return f"{self.service}-{self.number}"

    @property
    def role(self) -> str:
        return self.service

    @property
    def namespace_node(self) -> str:
        return self.placement.node

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        """The service's own pid (``ip netns exec`` execs in place)."""
        return None if self.process is None else self.process.pid

    def start(self, extra_env: Mapping[str, str] | None = None, *, wait: bool = True) -> None:
        """Run the service with ``env`` (and ``extra_env`` on top); ``wait``:
        until it serves."""
        with open(self.directory / "service.log", "ab") as log:
            self.process = subprocess.Popen(
                self.placement.command([sys.executable, "-m", f"quire.{self.service}.main"]),
                env={**self.env, **(extra_env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if wait:
            wait_serving(self)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self, timeout: float = 30.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()


def _loopback(_node: str) -> Placement:
    return LOOPBACK


class MultiNode:
    def __init__(
        self,
        root: Path,
        *,
        replicas: int = 2,
        env: dict[str, str] | None = None,
        place: Callable[[str], Placement] = _loopback,
        clients: str = "",
        spans: bool = False,
        prepare: Callable[[Path, str], dict[str, str]] | None = None,
    ) -> None:
        """``place``: where each node runs, by name; ``clients``: the CIDR
        PostgreSQL trusts besides loopback (where the nodes are placed);
        ``spans``: each replica writes its finished spans to
        ``spans.jsonl`` in its directory; ``prepare``: called with each
        nats-server's and replica's directory and role (``"nats"`` or the
        service) before it first starts, and returns variables it starts
        with (on every start)."""
        self.root = root.resolve()
        self.prepare = prepare or (lambda _directory, _role: {})
        self.nats_env: list[dict[str, str]] = []
        self.spans = spans
        self.count = replicas
        self.extra_env = env or {}
        self.place = place
        self.cluster = NatsCluster(
            self.root / "nats", placements=[place(f"nats-{n}") for n in range(1, 4)]
        )
        binaries = postgres_binaries()
        if binaries is None:
            raise RuntimeError("PostgreSQL server binaries are not installed")
        # Its own folder under /tmp: the server runs as the ``postgres`` user,
        # who cannot enter a test's private temporary directory.
        self.postgres = PostgresServer(
            Path(tempfile.mkdtemp(prefix="quire-pg-")),
            port=free_port(),
            binaries=binaries,
            placement=place("postgres"),
            clients=clients,
        )
        self.database_urls: dict[str, str] = {}
        self.operator_token = f"qt_{secrets.token_hex(6)}_{secrets.token_urlsafe(32)}"
        self.replicas: dict[str, list[Replica]] = {}

    # -- what the operator would keep in Secrets ---------------------------

    def _make_secrets(self) -> Path:
        folder = self.root / "secrets"
        provision_identities(folder / "identity", SERVICES)
        (folder / "kek.ring").write_text(new_ring_line("cluster-1"))
        (folder / "operator-token").write_text(self.operator_token + "\n")
        (folder / "checkpoint.key").write_bytes(
            Ed25519PrivateKey.generate().private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        key, cert = generate_signing_key(folder / "signer", "cluster-v1")
        shutil.move(key, folder / "signer.key")
        shutil.move(cert, folder / "signer.pem")
        shutil.rmtree(folder / "signer")
        return folder

    def target(self, service: str) -> str:
        """Every replica of ``service``, as one gRPC target."""
        addresses = ",".join(replica.address for replica in self.replicas[service])
        return f"ipv4:{addresses}"

    def _replica_env(self, replica: Replica, secrets_copy: Path) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUIRE_")}
        env.update(
            {
                "PYTHONUNBUFFERED": "1",
                "QUIRE_DATA_DIR": str(replica.directory / "data"),
                "QUIRE_NATS_URL": self.cluster.url,
                "QUIRE_NATS_REPLICAS": "3",
                "QUIRE_BLOB_BACKEND": "nats",
                "QUIRE_INSTANCE": replica.name,
                "QUIRE_IDENTITY_DIR": str(secrets_copy / "identity"),
                "QUIRE_KEK_FILE": str(secrets_copy / "kek.ring"),
                "QUIRE_OPERATOR_TOKEN_FILE": str(secrets_copy / "operator-token"),
                "QUIRE_AUDIT_CHECKPOINT_KEY_FILE": str(secrets_copy / "checkpoint.key"),
                "QUIRE_SIGNER_KEY_FILE": str(secrets_copy / "signer.key"),
                "QUIRE_SIGNER_CERT_FILE": str(secrets_copy / "signer.pem"),
                "QUIRE_DRAIN_SECONDS": "5",
                f"QUIRE_{replica.service.upper()}_DATABASE_URL": self.database_urls[
                    replica.service
                ],
            }
        )
        for service in SERVICES:
            env[service_address_var(service)] = self.target(service)
        env[service_address_var(replica.service)] = replica.address
        env[service_health_var(replica.service)] = replica.health
        env[service_metrics_var(replica.service)] = f"{replica.placement.host}:{free_port()}"
        if self.spans:
            env["QUIRE_TRACE_FILE"] = str(replica.directory / "spans.jsonl")
        env.update(self.extra_env)
        return env

    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.nats_env = [self.prepare(server.directory, "nats") for server in self.cluster.servers]
        self.cluster.start(self.nats_env)
        self.postgres.start()
        self.database_urls = {
            service: self.postgres.create_database(f"quire_{service}") for service in SERVICES
        }
        folder = self._make_secrets()
        asyncio.run(self._provision())
        for service in SERVICES:
            self.replicas[service] = [
                self._replica(service, number) for number in range(1, self.count + 1)
            ]
        for replicas in self.replicas.values():
            for replica in replicas:
                replica.directory.mkdir(parents=True)
                copy = replica.directory / "secrets"  # its own copy, as a mounted Secret
                shutil.copytree(folder, copy)
                replica.env = {
                    **self._replica_env(replica, copy),
                    **self.prepare(replica.directory, replica.service),
                }
                replica.start(wait=False)
        for replicas in self.replicas.values():
            for replica in replicas:
                wait_serving(replica)

    def _replica(self, service: str, number: int) -> Replica:
        placement = self.place(f"{service}-{number}")
        return Replica(
            service,
            number,
            self.root / f"{service}-{number}",
            f"{placement.host}:{free_port()}",
            f"{placement.host}:{free_port()}",
            placement=placement,
        )

    async def _provision(self) -> None:
        nc = await connect_nats(self.cluster.url, "quire-provision")
        try:
            await ensure_topology(nc.jetstream(timeout=30), QueueSettings(replicas=3))
        finally:
            await nc.close()

    def checker_env(self) -> dict[str, str]:
        """What ``quire check`` is given: every service's database URL and the
        blob backend, as an operator's shell would have them."""
        env = dict(self.replicas["signer"][0].env)
        for service, url in self.database_urls.items():
            env[f"QUIRE_{service.upper()}_DATABASE_URL"] = url
        return env

    def stop(self) -> None:
        for replicas in self.replicas.values():
            for replica in replicas:
                replica.stop()
        self.cluster.stop()
        self.postgres.stop()


def wait_serving(replica: Replica, timeout: float = HEALTH_TIMEOUT_SECONDS) -> None:
    assert replica.process is not None
    wait_healthy(replica.health, replica.process, f"{replica.name} ({replica.directory})", timeout)


def wait_healthy(
    health: str,
    process: subprocess.Popen[bytes],
    name: str,
    timeout: float = HEALTH_TIMEOUT_SECONDS,
) -> None:
    """Until the service process answers SERVING on its health address."""
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(health) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited before serving ({process.returncode})")
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.2)
    raise TimeoutError(f"{name} did not become healthy")
