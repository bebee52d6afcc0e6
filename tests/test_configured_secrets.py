"""Secrets every replica must agree on come from configuration (a mounted
Kubernetes Secret): the first operator token, audit's checkpoint key and the
services' TLS certificates. Then nothing is generated into one pod's
directory, a restart keeps them, and a wrong one stops the service at start,
naming the variable and never the value. With mutual TLS on, health still
answers plaintext probes on its own port, and a certificate is not an
identity (DESIGN.md invariant 11).

The stack tests share one stack configured as production is: every secret
above from files."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from grpc_health.v1 import health_pb2, health_pb2_grpc

from quire.cli.args import bearer_metadata
from quire.client import AdmissionClient, PacketItem, TenantAdminClient
from quire.jobs import state_name
from quire.signer.v1 import signer_service_pb2 as spb
from quire.signer.v1 import signer_service_pb2_grpc as sgrpc
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.pdfs import write_text_pdf
from quire.testing.pki import TestCA
from quire.tls import TlsSettings, aio_channel

pytestmark = pytest.mark.stack


def _token() -> str:
    return f"qt_{secrets.token_hex(6)}_{secrets.token_urlsafe(32)}"


def _pem(key: Ed25519PrivateKey | ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _public_pem(key: Ed25519PrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


@dataclass
class Configured:
    """The module's stack and the secrets it was configured with."""

    stack: Stack
    info: StackInfo
    token: str
    checkpoint_key: Ed25519PrivateKey
    tls: TlsSettings


@pytest.fixture(scope="module")
def configured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Configured]:
    """A stack whose operator token, checkpoint key and TLS certificates all
    come from mounted files, with mutual TLS on every service port."""
    root = tmp_path_factory.mktemp("configured")
    secrets_dir = root / "secrets"
    secrets_dir.mkdir()
    token = _token()
    (secrets_dir / "operator-token").write_text(token + "\n")
    checkpoint_key = Ed25519PrivateKey.generate()
    (secrets_dir / "checkpoint.key").write_bytes(_pem(checkpoint_key))
    ca = TestCA(root / "pki")
    cert, key = ca.issue("service")
    stack = Stack(
        root / "stack",
        env={
            "QUIRE_OPERATOR_TOKEN_FILE": str(secrets_dir / "operator-token"),
            "QUIRE_AUDIT_CHECKPOINT_KEY_FILE": str(secrets_dir / "checkpoint.key"),
            "QUIRE_TLS_CERT_FILE": str(cert),
            "QUIRE_TLS_KEY_FILE": str(key),
            "QUIRE_TLS_CA_FILE": str(ca.ca_file),
            "QUIRE_DRAIN_SECONDS": "5",
        },
    )
    info = stack.start()
    try:
        tls = TlsSettings(cert_file=cert, key_file=key, ca_file=ca.ca_file)
        yield Configured(stack, info, token, checkpoint_key, tls)
    finally:
        stack.stop()


async def test_a_configured_operator_token_and_checkpoint_key_are_used_and_survive_a_restart(
    configured: Configured, tmp_path: Path
) -> None:
    stack, info, token, tls = configured.stack, configured.info, configured.token, configured.tls
    assert info.operator_token() == token
    for run in range(2):
        if run:  # the two services that hold them, stopped (audit drains) and started again
            await asyncio.gather(
                *(asyncio.to_thread(stack.stop_service, s) for s in ("admission", "audit"))
            )
            for service in ("admission", "audit"):
                stack.start_service(service)
            await asyncio.to_thread(stack.wait_healthy)
        admin = TenantAdminClient(info.endpoints["admission"], token, tls=tls)
        try:
            reply = await admin.create_tenant(f"configured-{run}")
        finally:
            await admin.close()
        async with AdmissionClient(info.endpoints["admission"], reply.secret, tls=tls) as client:
            path = write_text_pdf(tmp_path / f"doc-{run}.pdf", [f"run {run}"])
            digest = (await client.upload(path)).sha256
            job = await client.submit([PacketItem("d", digest)])
            done = await client.wait(job.name, timeout=60)
            assert state_name(done.state) == "COMPLETED"

    admission_dir = stack.data_dir / "admission"
    assert not (admission_dir / "operator-token").exists(), "nothing written into the pod"
    assert not (admission_dir / "dev-token").exists(), "no development tenant in production"
    assert not (stack.data_dir / "audit" / "keys" / "checkpoint.key").exists()
    documents = list((stack.data_dir / "audit" / "checkpoints").glob("*.json"))
    assert documents, "audit took a checkpoint (at its drain)"
    for document in documents:
        assert json.loads(document.read_text())["public_key"] == _public_pem(
            configured.checkpoint_key
        )


async def _health(address: str) -> int:
    """The overall status a probe without credentials reads at ``address``."""
    async with grpc.aio.insecure_channel(address) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=5
        )
    return reply.status


async def test_with_mutual_tls_health_answers_plaintext_probes_and_a_certificate_is_not_an_identity(
    configured: Configured,
) -> None:
    info, tls = configured.info, configured.tls
    for service, address in info.health_endpoints.items():
        assert await _health(address) == health_pb2.HealthCheckResponse.SERVING, service
    async with aio_channel(info.endpoints["signer"], None) as plaintext:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await health_pb2_grpc.HealthStub(plaintext).Check(
                health_pb2.HealthCheckRequest(), timeout=5
            )
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, "the service port is TLS only"
    async with aio_channel(info.endpoints["signer"], tls) as certified:
        signer = sgrpc.SignerServiceStub(certified)
        with pytest.raises(grpc.aio.AioRpcError) as anonymous:
            await signer.RotateKey(spb.RotateKeyRequest())
        assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED
        operator = bearer_metadata(info.operator_token())
        keys = await signer.ListKeys(spb.ListKeysRequest(), metadata=operator)
        assert keys.keys, "operators get through over mutual TLS"


def _start_alone(
    service: str, env: dict[str, str], data_dir: Path
) -> subprocess.CompletedProcess[str]:
    """The service's command with one bad setting; it must stop before it
    tries to reach NATS (none is running)."""
    return subprocess.run(
        [sys.executable, "-m", f"quire.{service}.main"],
        env={
            **os.environ,
            **env,
            "QUIRE_DATA_DIR": str(data_dir),
            "QUIRE_NATS_URL": "nats://127.0.0.1:9",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("service", "variable", "content", "expected"),
    [
        ("admission", "QUIRE_OPERATOR_TOKEN_FILE", b"hunter2-not-a-token\n", "a token qt_"),
        ("admission", "QUIRE_OPERATOR_TOKEN_FILE", b"\n", "not empty"),
        ("admission", "QUIRE_OPERATOR_TOKEN_FILE", None, "a readable file"),
        ("audit", "QUIRE_AUDIT_CHECKPOINT_KEY_FILE", b"hunter2\n", "PEM private key"),
        (
            "audit",
            "QUIRE_AUDIT_CHECKPOINT_KEY_FILE",
            _pem(ec.generate_private_key(ec.SECP256R1())),
            "an Ed25519 key",
        ),
    ],
)
def test_a_wrong_secret_stops_the_service_at_start_naming_the_variable(
    service: str, variable: str, content: bytes | None, expected: str, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    if content is not None:
        secret.write_bytes(content)
    done = _start_alone(service, {variable: str(secret)}, tmp_path / "data")
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"quire-{service}: cannot start: {variable}: " in done.stderr
    assert expected in done.stderr
    assert "hunter2" not in done.stderr and "Traceback" not in done.stderr


def test_a_stage_limit_below_two_stops_a_stage_at_start(tmp_path: Path) -> None:
    done = _start_alone("signer", {"QUIRE_SIGNER_STAGE_LIMIT": "1"}, tmp_path / "data")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "QUIRE_SIGNER_STAGE_LIMIT: at least 2" in done.stderr
