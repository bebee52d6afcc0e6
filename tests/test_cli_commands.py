"""The commands issue 38 added or straightened, as a user runs them:
structured (JSON) sources with ``submit --ruleset --render-profile``, a
job's ledger transitions (``audit history``), signing-key rotation (``keys
rotate``), ``keys status`` readable without ``--json``, ``batch status
--wait`` quiet without a terminal, and ``stack.json`` naming the operator
token's file.

The stack's commands run against the session stack, each as a process of
its own; ``keys rotate`` runs against a real signer on a local server, so
the session stack keeps signing with its first key version.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest

from quire.cli.exitcodes import ExitCode
from quire.cli.main import main as quire_main
from quire.database import Database
from quire.paging import PageTokens
from quire.signer import tables as signer_tables
from quire.signer.keystore import GeneratedKeys, KeyStore
from quire.signer.servicer import SignerServicer
from quire.signer.v1 import signer_service_pb2 as spb
from quire.signer.v1 import signer_service_pb2_grpc as sgrpc
from quire.stack.info import StackInfo
from quire.testing.pdfs import write_text_pdf
from quire.testing.quirecli import QUIRE, ROOT, run_quire


def _invoice(total: str, unit_price: str = "0.10") -> dict[str, Any]:
    return {
        "invoice_number": f"INV-{uuid.uuid4().hex[:8]}",
        "currency": "EUR",
        "seller": {"name": "Carrier GmbH", "tax_id": "DE123456789"},
        "lines": [{"description": "freight", "quantity": "3", "unit_price": unit_price}],
        "tax_rate": "0",
        "total": total,
    }


async def _quire(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(run_quire, data_dir, *args)


@pytest.mark.stack
async def test_a_json_source_is_checked_by_the_ruleset_named_and_its_history_listed(
    stack: Any, tmp_path: Path
) -> None:
    data_dir = stack.data_dir
    good = tmp_path / "invoice.json"
    good.write_text(json.dumps(_invoice(total="0.30")))
    submitted = await _quire(
        data_dir,
        "submit",
        str(good),
        "--ruleset",
        "logistics-invoice",
        "--render-profile",
        "strict",
        "--wait",
        "--json",
    )
    assert submitted.returncode == ExitCode.OK, submitted.stdout + submitted.stderr
    job = json.loads(submitted.stdout)["job"]
    assert job["state"] == "COMPLETED" and job["ruleset_version"] == "logistics-invoice@1"

    # The ruleset is what decides: a wrong total passes the default ruleset
    # (no content rules) and is refused by the one named.
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(_invoice(total="0.31")))
    refused = await _quire(
        data_dir, "submit", str(wrong), "--ruleset", "logistics-invoice", "--wait"
    )
    assert refused.returncode == ExitCode.REJECTED, refused.stdout + refused.stderr
    assert "TOTAL_MISMATCH" in refused.stdout
    unknown_profile = await _quire(data_dir, "submit", str(good), "--render-profile", "glossy")
    assert unknown_profile.returncode == ExitCode.REFUSED
    assert "manifest.render_profile" in unknown_profile.stderr, "the flag reached admission"

    # A manifest naming the JSON file; the flag overrides its ruleset.
    manifest = tmp_path / "manifest.json"
    manifest.write_text(
        json.dumps(
            {
                "documents": [{"document_id": "inv", "file": "wrong.json", "position": 0}],
                "ruleset": "default",
            }
        )
    )
    overridden = await _quire(
        data_dir, "submit", "--manifest", str(manifest), "--ruleset", "logistics-invoice", "--wait"
    )
    assert overridden.returncode == ExitCode.REJECTED, overridden.stdout + overridden.stderr

    history = await _quire(data_dir, "audit", "history", job["name"])
    assert history.returncode == ExitCode.OK, history.stderr
    lines = history.stdout.splitlines()
    assert lines[0].split()[2] == "ACCEPTED" and "-> COMPLETED" in lines[-1], history.stdout
    assert any("ruleset=logistics-invoice@1" in line for line in lines)
    assert all(line.startswith("#") for line in lines), "one line per ledger entry"
    as_json = json.loads((await _quire(data_dir, "audit", "history", job["name"], "--json")).stdout)
    states = [entry["to_state"] for entry in as_json["entries"]]
    assert states[0] == "ACCEPTED" and states[-1] == "COMPLETED" and len(states) == len(lines)
    sequences = [int(entry["sequence"]) for entry in as_json["entries"]]
    assert sequences == sorted(sequences)


@pytest.mark.stack
async def test_diff_of_a_job_and_one_that_does_not_exist_is_not_found(
    stack: Any, tmp_path: Path
) -> None:
    pdf = write_text_pdf(tmp_path / "one.pdf", ["diffed"])
    submitted = await _quire(stack.data_dir, "submit", str(pdf), "--wait", "--json")
    job = json.loads(submitted.stdout)["job"]["name"]
    same = await _quire(stack.data_dir, "diff", job, job)
    assert same.returncode == ExitCode.OK and same.stdout.splitlines()[-1] == "same"
    for pair in ((job, "jobs/" + "0" * 32), ("jobs/" + "1" * 32, "jobs/" + "2" * 32)):
        missing = await _quire(stack.data_dir, "diff", *pair)
        assert missing.returncode == ExitCode.REFUSED, missing.stdout + missing.stderr
        assert "NOT_FOUND" in missing.stderr and "same" not in missing.stdout
        assert "Traceback" not in missing.stderr


@pytest.mark.stack
async def test_batch_status_wait_without_a_terminal_writes_nothing_on_stderr(
    stack: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "portfolio"
    (folder / "p1").mkdir(parents=True)
    write_text_pdf(folder / "p1" / "a.pdf", ["batch progress"])
    submitted = await _quire(stack.data_dir, "batch", "submit", str(folder), "--json")
    assert submitted.returncode == ExitCode.OK, submitted.stderr
    name = json.loads(submitted.stdout)["batch"]["name"]
    waited = await _quire(stack.data_dir, "batch", "status", name, "--wait")
    assert waited.returncode == ExitCode.OK, waited.stdout + waited.stderr
    assert waited.stderr == "", "progress is for a terminal; a pipe gets the result only"
    assert waited.stdout.startswith(f"{name}  DONE")


@pytest.mark.stack
def test_keys_status_is_lines_for_people_and_json_when_asked(
    stack: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("QUIRE_KEK_FILE", raising=False)
    pdf = write_text_pdf(tmp_path / "keyed.pdf", ["a data key"])
    assert run_quire(stack.data_dir, "submit", str(pdf)).returncode == 0, "the tenant has a key"
    capsys.readouterr()
    assert quire_main(["--data-dir", str(stack.data_dir), "keys", "status"]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("tenants/") and "data keys" in shown, shown
    assert "wrapped by" in shown and "{" not in shown, "no JSON without --json"
    assert quire_main(["--data-dir", str(stack.data_dir), "keys", "status", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["status"] and all("keys" in tenant for tenant in document["status"])


@pytest.mark.stack
def test_stack_json_names_the_operator_token_file_that_exists(stack: Any) -> None:
    info = StackInfo.read(stack.data_dir)
    path = Path(info.operator_token_file)
    assert info.operator_token_file and path.is_file(), info
    assert path.read_text().strip() == info.operator_token()


async def test_keys_rotate_makes_the_next_version_active_once_per_request_id(
    tmp_path: Path,
) -> None:
    database = Database(f"sqlite:///{tmp_path / 'signer.db'}", signer_tables.metadata)
    database.create_schema()
    keys = KeyStore(database, GeneratedKeys(tmp_path / "keys"))
    keys.ensure_active_key()
    server = grpc.aio.server()
    sgrpc.add_SignerServiceServicer_to_server(
        SignerServicer(database, keys, pages=PageTokens.ephemeral()), server
    )
    address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    await server.start()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("QUIRE_")},
        "QUIRE_ADMISSION_ADDR": address,  # any: rotation asks the signer only
        "QUIRE_SIGNER_ADDR": address,
        "QUIRE_OPERATOR_TOKEN": "qt_operator",
    }

    def rotate(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*QUIRE, "--data-dir", str(tmp_path), "keys", "rotate", *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            env=env,
        )

    try:
        rotated = await asyncio.to_thread(rotate, "--request-id", "r-1", "--json")
        assert rotated.returncode == ExitCode.OK, rotated.stderr
        key = json.loads(rotated.stdout)["key"]
        assert key["version"] == "v2" and key["active"] is True
        assert "PRIVATE" not in rotated.stdout
        again = await asyncio.to_thread(rotate, "--request-id", "r-1")
        assert again.returncode == ExitCode.OK and again.stdout.startswith("signing key v2 ")
        async with grpc.aio.insecure_channel(address) as channel:
            listed = await sgrpc.SignerServiceStub(channel).ListKeys(spb.ListKeysRequest())
        assert [(k.version, k.active) for k in listed.keys] == [("v1", False), ("v2", True)]
        fresh = await asyncio.to_thread(rotate)
        assert fresh.stdout.startswith("signing key v3 "), "a new request rotates again"
    finally:
        await server.stop(None)
        database.close()


READS = (
    ("jobs",),
    ("tenants", "list"),
    ("review", "list"),
    ("dlq", "list"),
    ("audit", "verify"),
    ("audit", "key"),
    ("witness", "key"),
    ("notifications", "show"),
    ("rollout", "status"),
    ("keys", "status"),
    ("workers",),
)
"""Commands that read and print without changing anything."""


@pytest.mark.stack
def test_every_read_prints_lines_for_people_and_one_json_document_only_with_json(
    stack: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("QUIRE_KEK_FILE", "QUIRE_NATS_URL", "QUIRE_NATS_PASSWORD_FILE"):
        monkeypatch.delenv(name, raising=False)
    data_dir = str(stack.data_dir)
    for words in READS:
        capsys.readouterr()
        assert quire_main(["--data-dir", data_dir, *words]) == ExitCode.OK, words
        human = capsys.readouterr().out
        assert human.strip(), f"{words}: nothing printed"
        try:
            json.loads(human)
        except ValueError:
            pass
        else:
            raise AssertionError(f"{words} printed JSON without --json:\n{human}")
        assert quire_main(["--data-dir", data_dir, *words, "--json"]) == ExitCode.OK, words
        assert isinstance(json.loads(capsys.readouterr().out), dict), words
