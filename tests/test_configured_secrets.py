"""Secrets every replica must agree on come from configuration (a mounted
Kubernetes Secret): the first operator token and audit's checkpoint key. Then
nothing is generated into one pod's directory, a restart keeps them, and a
wrong one stops the service at start, naming the variable and never the
value."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from quire.client import AdmissionClient, PacketItem, TenantAdminClient
from quire.jobs import state_name
from quire.stack.supervisor import Stack
from quire.testing.pdfs import write_text_pdf

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


async def test_a_configured_operator_token_and_checkpoint_key_are_used_and_survive_a_restart(
    tmp_path: Path,
) -> None:
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir()
    token = _token()
    (secrets_dir / "operator-token").write_text(token + "\n")
    checkpoint_key = Ed25519PrivateKey.generate()
    (secrets_dir / "checkpoint.key").write_bytes(_pem(checkpoint_key))
    env = {
        "QUIRE_OPERATOR_TOKEN_FILE": str(secrets_dir / "operator-token"),
        "QUIRE_AUDIT_CHECKPOINT_KEY_FILE": str(secrets_dir / "checkpoint.key"),
        "QUIRE_DRAIN_SECONDS": "5",
    }
    stack = Stack(tmp_path / "stack", env=env)
    info = await asyncio.to_thread(stack.start)
    try:
        assert info.operator_token() == token
        for run in range(2):
            if run:  # the two services that hold them, stopped (audit drains) and started again
                await asyncio.gather(
                    *(asyncio.to_thread(stack.stop_service, s) for s in ("admission", "audit"))
                )
                for service in ("admission", "audit"):
                    stack.start_service(service)
                await asyncio.to_thread(stack.wait_healthy)
            admin = TenantAdminClient(info.endpoints["admission"], token)
            try:
                reply = await admin.create_tenant(f"configured-{run}")
            finally:
                await admin.close()
            async with AdmissionClient(info.endpoints["admission"], reply.secret) as client:
                path = write_text_pdf(tmp_path / f"doc-{run}.pdf", [f"run {run}"])
                digest = (await client.upload(path)).sha256
                job = await client.submit([PacketItem("d", digest)])
                done = await client.wait(job.name, timeout=60)
                assert state_name(done.state) == "COMPLETED"
    finally:
        await asyncio.to_thread(stack.stop)

    admission_dir = tmp_path / "stack" / "admission"
    assert not (admission_dir / "operator-token").exists(), "nothing written into the pod"
    assert not (admission_dir / "dev-token").exists(), "no development tenant in production"
    assert not (tmp_path / "stack" / "audit" / "keys" / "checkpoint.key").exists()
    documents = list((tmp_path / "stack" / "audit" / "checkpoints").glob("*.json"))
    assert documents, "audit took checkpoints (at each drain)"
    for document in documents:
        assert json.loads(document.read_text())["public_key"] == _public_pem(checkpoint_key)


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
