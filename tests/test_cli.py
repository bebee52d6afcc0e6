"""The ``quire`` command as a user runs it: ``quire up`` with the example packet,
then submit, status, fetch and verify from another process.

Every command that talks to the stack runs as a process of its own. The
commands that need no stack (``verify --cert``, ``evidence verify``) run as
``quire.cli.main.main(argv)`` in this process: the same parser, command,
output and exit code, without an interpreter started (and every command
module imported) for each of them."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from quire.cli.exitcodes import ExitCode
from quire.cli.main import main as quire_main
from quire.cosignature import witness_key as cosignature_key
from quire.stack.natsserver import NatsServer
from quire.testing.quirecli import QUIRE, ROOT, read_until, run_quire
from quire.type import job_pb2, queue_pb2

pytestmark = pytest.mark.stack


def test_up_sends_the_example_then_the_cli_drives_the_stack(
    tmp_path: Path, nats_server: NatsServer, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    env = dict(os.environ, QUIRE_NATS_URL=nats_server.url, QUIRE_DRAIN_SECONDS="5")
    up = subprocess.Popen(
        [*QUIRE, "up", "--data-dir", str(data_dir), "--example", "examples/lease-renewal"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        printed = read_until(up, "serving; press Ctrl-C to stop", timeout=120)
        assert f"NATS JetStream: {nats_server.url}" in printed, "QUIRE_NATS_URL is used as given"
        assert "development token: qt_" in printed
        assert "(verified)" in printed
        example_output = Path(printed.split("signed PDF: ", 1)[1].split()[0])
        assert not (data_dir / "nats").exists(), "no second NATS server was started"

        first = tmp_path / "first.pdf"
        second = tmp_path / "second.pdf"
        from quire.testing.pdfs import write_text_pdf

        write_text_pdf(first, ["first document"])
        write_text_pdf(second, ["second document"])
        submitted = run_quire(data_dir, "submit", str(first), str(second), "--wait")
        assert submitted.returncode == 0, submitted.stderr
        job = submitted.stdout.split()[0]
        assert "COMPLETED" in submitted.stdout

        status = run_quire(data_dir, "status", job)
        assert "COMPLETED" in status.stdout

        output = tmp_path / "packet.pdf"
        fetched = run_quire(data_dir, "fetch", job, "-o", str(output))
        assert fetched.returncode == 0, fetched.stderr
        verified = run_quire(data_dir, "verify", str(output), "--job", job)
        assert verified.returncode == 0, verified.stdout
        assert "embedded sources match the ledger, in order: True" in verified.stdout
        assert "OK" in verified.stdout
        # The example's signed packet, which `quire up` wrote: another job's output.
        mismatch = run_quire(data_dir, "verify", str(example_output), "--job", job)
        assert (
            mismatch.returncode == 1
            and "output digest matches the ledger: False" in mismatch.stdout
        )

        tampered = tmp_path / "tampered.pdf"
        data = bytearray(output.read_bytes())
        comment = data.index(b"\n%") + 2
        data[comment] ^= 0x01
        tampered.write_bytes(bytes(data))
        refused = run_quire(data_dir, "verify", str(tampered))
        assert refused.returncode == 1
        assert "NOT VERIFIED" in refused.stdout

        # Offline, with the published certificate and no stack or token at all.
        cert = next((data_dir / "signer" / "keys").glob("v*/cert.pem"))
        no_stack = tmp_path / "no-stack"
        offline_ok = _offline(capsys, no_stack, "verify", str(output), "--cert", str(cert))
        assert offline_ok.returncode == 0 and "OK" in offline_ok.stdout, offline_ok.stdout
        offline_bad = _offline(capsys, no_stack, "verify", str(tampered), "--cert", str(cert))
        assert offline_bad.returncode == 1 and "NOT VERIFIED" in offline_bad.stdout
        stranger = _offline(
            capsys, no_stack, "verify", str(output), "--cert", str(_stranger_cert(tmp_path))
        )
        assert stranger.returncode == 1 and "trusted: False" in stranger.stdout

        listed = run_quire(data_dir, "jobs", "--state", "COMPLETED")
        assert job in listed.stdout
        too_late = run_quire(data_dir, "cancel", job)
        assert too_late.returncode == 1 and "COMPLETED" in too_late.stdout

        created = run_quire(data_dir, "tenants", "create", "acme", "--max-outstanding-jobs", "3")
        assert created.returncode == 0, created.stderr
        tenant = created.stdout.split()[0]
        assert tenant.startswith("tenants/") and "token (shown once): qt_" in created.stdout
        rotated = run_quire(data_dir, "tokens", "create", tenant)
        assert rotated.returncode == 0, rotated.stderr
        token_name = rotated.stdout.split()[0]
        revoked = run_quire(data_dir, "tokens", "revoke", token_name)
        assert revoked.returncode == 0 and "revoked" in revoked.stdout
        tenants = run_quire(data_dir, "tenants", "list")
        assert "acme" in tenants.stdout and "outstanding≤3" in tenants.stdout
        assert f"{token_name}  revoked" in tenants.stdout

        ledger = run_quire(data_dir, "audit", "verify")
        assert ledger.returncode == 0 and "OK" in ledger.stdout, ledger.stdout
        evidence_file = tmp_path / "evidence.json"
        exported = run_quire(data_dir, "evidence", job, "-o", str(evidence_file))
        assert exported.returncode == 0, exported.stderr
        published = run_quire(data_dir, "audit", "key")
        assert published.returncode == 0, published.stderr
        assert "BEGIN PUBLIC KEY" in published.stdout
        pin = published.stdout.split("sha256 ")[1].split()[0]
        key_file = tmp_path / "audit.pub"
        key_file.write_text(published.stdout.split("sha256 ")[0])
        witnessed = run_quire(data_dir, "witness", "key")
        assert witnessed.returncode == 0, witnessed.stderr
        witness = witnessed.stdout.strip()
        assert witness.startswith("quire-witness+")

        def verify_offline(*args: str) -> subprocess.CompletedProcess[str]:
            return _offline(capsys, no_stack, "evidence", "verify", *args)

        unpinned = verify_offline(str(evidence_file), "--witness-key", witness)
        assert unpinned.returncode == ExitCode.USAGE, "the file cannot vouch for itself"
        unwitnessed = verify_offline(str(evidence_file), "--key-sha256", pin)
        assert unwitnessed.returncode == ExitCode.USAGE, "audit alone cannot vouch for its log"
        trusted = ("--key-sha256", pin, "--witness-key", witness)
        offline = verify_offline(str(evidence_file), *trusted)
        assert offline.returncode == 0 and "OK" in offline.stdout, offline.stdout
        by_file = verify_offline(
            str(evidence_file), "--key-file", str(key_file), "--witness-key", witness
        )
        assert by_file.returncode == 0, by_file.stdout
        stranger_witness = cosignature_key(
            "quire-witness", Ed25519PrivateKey.generate().public_key()
        )
        unwitnessed_by_them = verify_offline(
            str(evidence_file), "--key-sha256", pin, "--witness-key", stranger_witness
        )
        assert unwitnessed_by_them.returncode == 1
        assert "no cosignature from the trusted witness" in unwitnessed_by_them.stdout
        elsewhere = verify_offline(str(evidence_file), *trusted, "--tenant", "someone-else")
        assert elsewhere.returncode == 1 and "another tenant" in elsewhere.stdout
        own = json.loads(evidence_file.read_text())["origin"].removeprefix("quire/")
        theirs = verify_offline(str(evidence_file), *trusted, "--tenant", own)
        assert theirs.returncode == 0, theirs.stdout
        impostor = json.loads(evidence_file.read_text())
        impostor["public_key"] = (
            Ed25519PrivateKey.generate()
            .public_key()
            .public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
            .decode()
        )
        (tmp_path / "impostor.json").write_text(json.dumps(impostor))
        self_vouched = verify_offline(str(tmp_path / "impostor.json"), *trusted)
        assert self_vouched.returncode == 1 and "not the trusted one" in self_vouched.stdout
        assert "COMPLETED" in offline.stdout  # read from the proven entries
        document = json.loads(evidence_file.read_text())
        entry = document["entries"][-1]
        event = queue_pb2.TransitionEvent.FromString(base64.b64decode(entry["entry"]))
        event.to_state = job_pb2.JOB_STATE_REJECTED
        entry["entry"] = base64.b64encode(event.SerializeToString()).decode()
        (tmp_path / "tampered.json").write_text(json.dumps(document))
        refused_evidence = verify_offline(str(tmp_path / "tampered.json"), *trusted)
        assert refused_evidence.returncode == 1

        nothing_parked = run_quire(data_dir, "review", "list")
        assert nothing_parked.returncode == 0
        assert nothing_parked.stdout == "no jobs waiting for review\n"
        no_review = run_quire(
            data_dir, "review", "approve", job, "--note", "ok", "--operator", "me"
        )
        assert no_review.returncode == 5 and "NOT_FOUND" in no_review.stderr

        missing = run_quire(data_dir, "status", "jobs/ffffffffffffffff")
        assert missing.returncode == 5
        assert "NOT_FOUND" in missing.stderr
    finally:
        up.send_signal(signal.SIGTERM)
        up.wait(timeout=60)
    assert up.returncode == 0


def _offline(
    capsys: pytest.CaptureFixture[str], data_dir: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """A command that needs no stack, run by the CLI's ``main`` in this process;
    its exit code and output as ``run_quire`` returns a process's."""
    capsys.readouterr()  # only this command's output
    argv = ["--data-dir", str(data_dir), *args]
    code = quire_main(argv)
    printed = capsys.readouterr()
    return subprocess.CompletedProcess(argv, code, printed.out, printed.err)


def _stranger_cert(folder: Path) -> Path:
    """A self-signed certificate no Quire key made."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "stranger")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    path = folder / "stranger.pem"
    path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return path
