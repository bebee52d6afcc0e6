"""Tenants' own evidence, through admission, on the session's stack.

A tenant exports its job's evidence with its own token (``quire evidence
export`` through admission, and ``GET /v1/pdf/job/get/{id}/evidence``) and
verifies it offline with the keys its operator publishes, exactly as an
operator's export from audit; one changed byte fails verification. Another
tenant's job is NOT_FOUND, word for word as a job that does not exist, on
gRPC and HTTP. Audit itself answers admission only for the tenant it names,
checked against the job's entries, and an export naming no tenant only for
an operator.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest

from quire.audit.v1 import audit_service_pb2 as apb
from quire.audit.v1 import audit_service_pb2_grpc as agrpc
from quire.callers import CallerProofInterceptors
from quire.client import AdmissionClient, PacketItem
from quire.grpcstatus import reason_of
from quire.identity import IdentitySettings, ServiceIdentity
from quire.jobs import job_id, state_name
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.pdfs import write_text_pdf
from quire.testing.quirecli import run_quire
from quire.tls import aio_channel

pytestmark = pytest.mark.stack

UNKNOWN_JOB = "jobs/" + "cd" * 14


@dataclass
class Tenant:
    client: AdmissionClient
    token: str
    id: str


@dataclass
class Scene:
    info: StackInfo
    owner: Tenant
    other: Tenant
    job: str
    """A COMPLETED job of ``owner``."""
    pin: str
    """Audit's checkpoint key pin, as the operator publishes it (``quire audit key``)."""
    witness: str
    """The witness's verifier key (``quire witness key``)."""

    def as_tenant(self, tenant: Tenant) -> dict[str, str]:
        """The environment of a tenant's shell: its token and admission's address, nothing else."""
        return {
            "QUIRE_ADMISSION_ADDR": self.info.endpoints["admission"],
            "QUIRE_TOKEN": tenant.token,
            "QUIRE_OPERATOR_TOKEN": "",
        }

    def verify(self, path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        """``quire evidence verify`` offline: no stack, the published keys."""
        return run_quire(
            path.parent / "no-stack",
            "evidence",
            "verify",
            str(path),
            "--key-sha256",
            self.pin,
            "--witness-key",
            self.witness,
            "--tenant",
            self.owner.id,
            *extra,
        )


async def _published(info: StackInfo, what: str) -> dict[str, str]:
    shown = await asyncio.to_thread(run_quire, Path(info.data_dir), what, "key", "--json")
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)  # type: ignore[no-any-return]


@pytest.fixture
async def scene(stack: Stack, tenants, tmp_path: Path) -> AsyncIterator[Scene]:  # type: ignore[no-untyped-def]
    info = StackInfo.read(stack.data_dir)
    made: list[Tenant] = []
    for name in ("owner", "other"):
        reply = await tenants.admin.create_tenant(f"evidence-{name}-{uuid.uuid4().hex[:8]}")
        client = AdmissionClient(info.endpoints["admission"], reply.secret)
        made.append(Tenant(client, reply.secret, reply.tenant.name.removeprefix("tenants/")))
    owner, other = made
    try:
        pdf = write_text_pdf(tmp_path / "mine.pdf", ["my own evidence", uuid.uuid4().hex])
        digest = (await owner.client.upload(pdf)).sha256
        job = (await owner.client.submit([PacketItem("mine", digest)])).name
        done = await owner.client.wait(job, timeout=90)
        assert state_name(done.state) == "COMPLETED", done.reason_code
        audit_key = await _published(info, "audit")
        witness_key = await _published(info, "witness")
        yield Scene(
            info,
            owner,
            other,
            job,
            audit_key["public_key_sha256"],
            witness_key["verifier_key"],
        )
    finally:
        for tenant in made:
            await tenant.client.close()


def _offsets(text: str) -> dict[str, int]:
    """Where a fully significant base64 character sits (the first of its
    string) in: an entry's bytes, an inclusion proof's first hash, and the
    checkpoint's root line."""
    entry = text.index('"entry": "') + len('"entry": "')
    proof = text.index('"', text.index('"inclusion_proof": [') + len('"inclusion_proof": [')) + 1
    checkpoint = text.index('"checkpoint": "') + len('"checkpoint": "')
    origin, size = text[checkpoint:].split("\\n")[:2]
    root = checkpoint + len(origin) + 2 + len(size) + 2
    return {"entry": entry, "proof": proof, "root": root}


def _tampered(path: Path, what: str) -> Path:
    """A copy of the evidence file with one byte changed, at ``what`` (``_offsets``)."""
    text = path.read_text()
    at = _offsets(text)[what]
    swapped = "B" if text[at] == "A" else "A"
    copy = path.with_name(f"{path.stem}-{what}-tampered.json")
    copy.write_text(text[:at] + swapped + text[at + 1 :])
    assert len(copy.read_bytes()) == len(path.read_bytes())
    return copy


async def test_a_tenant_exports_its_own_evidence_and_verifies_it_offline(
    scene: Scene, tmp_path: Path
) -> None:
    exported = tmp_path / "mine.evidence.json"
    cli = await asyncio.to_thread(
        run_quire,
        tmp_path / "tenant-shell",
        "evidence",
        "export",
        job_id(scene.job),
        "-o",
        str(exported),
        "--json",
        env=scene.as_tenant(scene.owner),
    )
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout) == {"job": scene.job, "output": str(exported), "via": "admission"}
    assert "Traceback" not in cli.stderr

    verified = await asyncio.to_thread(scene.verify, exported, "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    report = json.loads(verified.stdout)
    assert report["ok"] and report["job"] == scene.job
    assert report["origin"] == f"quire/{scene.owner.id}"
    states = [entry["to_state"] for entry in report["transitions"]]
    assert states[0] == "ACCEPTED" and states[-1] == "COMPLETED"

    # The operator's export of the same job, from audit: the same format and
    # entries, verified the same way.
    operator_file = tmp_path / "operator.evidence.json"
    operator = await asyncio.to_thread(
        run_quire,
        Path(scene.info.data_dir),
        "evidence",
        "export",
        scene.job,
        "-o",
        str(operator_file),
        "--json",
    )
    assert operator.returncode == 0, operator.stderr
    assert json.loads(operator.stdout)["via"] == "audit"
    assert (await asyncio.to_thread(scene.verify, operator_file)).returncode == 0
    mine, theirs = json.loads(exported.read_text()), json.loads(operator_file.read_text())
    assert mine.keys() == theirs.keys() and mine["format"] == "quire-evidence/1"
    assert [e["entry"] for e in mine["entries"]] == [e["entry"] for e in theirs["entries"]]

    # One changed byte (an entry's bytes, a proof hash, the checkpoint's
    # root): a clear failure, never a traceback.
    for what in ("entry", "proof", "root"):
        refused = await asyncio.to_thread(scene.verify, _tampered(exported, what))
        assert refused.returncode == 1, (what, refused.stdout, refused.stderr)
        assert "EVIDENCE DOES NOT VERIFY" in refused.stdout and "problem:" in refused.stdout
        assert "Traceback" not in refused.stderr


async def test_a_tenant_gets_its_own_evidence_over_http_and_it_verifies(
    scene: Scene, tmp_path: Path
) -> None:
    url = f"/v1/pdf/job/get/{job_id(scene.job)}/evidence"
    async with httpx.AsyncClient(base_url=scene.info.gateway_url, timeout=60) as http:
        reply = await http.get(url, headers={"Authorization": f"Bearer {scene.owner.token}"})
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("application/json")
    body = tmp_path / "http.evidence.json"
    body.write_bytes(reply.content)
    verified = await asyncio.to_thread(scene.verify, body)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.rstrip().endswith("OK")

    refused = await asyncio.to_thread(scene.verify, _tampered(body, "entry"))
    assert refused.returncode == 1 and "EVIDENCE DOES NOT VERIFY" in refused.stdout


async def test_another_tenants_job_is_not_found_like_one_that_does_not_exist(
    scene: Scene, tmp_path: Path
) -> None:
    answers = []
    for name in (scene.job, UNKNOWN_JOB):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await scene.other.client.evidence(name)
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND
        answers.append((reason_of(refused.value), refused.value.details()))
    assert answers[0] == answers[1], "the answer says nothing of whose the job is"

    problems = []
    async with httpx.AsyncClient(base_url=scene.info.gateway_url, timeout=60) as http:
        for name in (scene.job, UNKNOWN_JOB):
            reply = await http.get(
                f"/v1/pdf/job/get/{job_id(name)}/evidence",
                headers={"Authorization": f"Bearer {scene.other.token}"},
            )
            assert reply.status_code == 404, reply.text
            assert reply.headers["content-type"].startswith("application/problem+json")
            problems.append(reply.json())
    assert problems[0]["reason"] == "NOT_FOUND" and problems[0] == problems[1]

    cli = await asyncio.to_thread(
        run_quire,
        tmp_path / "other-shell",
        "evidence",
        job_id(scene.job),  # the older form: still an export
        "-o",
        str(tmp_path / "not-mine.json"),
        env=scene.as_tenant(scene.other),
    )
    assert cli.returncode == 5 and "NOT_FOUND" in cli.stderr, cli.stderr
    assert "Traceback" not in cli.stderr and not (tmp_path / "not-mine.json").exists()

    async with httpx.AsyncClient(base_url=scene.info.gateway_url, timeout=60) as http:
        anonymous = await http.get(f"/v1/pdf/job/get/{job_id(scene.job)}/evidence")
    assert anonymous.status_code == 401


async def test_audit_exports_for_admission_only_the_tenant_it_names(scene: Scene) -> None:
    """Admission's identity is not enough to read across tenants: audit checks
    the tenant named against the job's entries, and an export naming none
    needs an operator's token."""
    data_dir = Path(scene.info.data_dir)
    admission = ServiceIdentity.load(
        IdentitySettings.from_env("admission", data_dir, {"QUIRE_DATA_DIR": str(data_dir)})
    )
    async with aio_channel(
        scene.info.endpoints["audit"], None, CallerProofInterceptors(admission)
    ) as channel:
        audit = agrpc.AuditServiceStub(channel)
        own = await audit.ExportEvidence(
            apb.ExportEvidenceRequest(job=scene.job, tenant=f"tenants/{scene.owner.id}")
        )
        assert json.loads(own.json)["origin"] == f"quire/{scene.owner.id}"
        for tenant in (f"tenants/{scene.other.id}", "tenants/", "owner"):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await audit.ExportEvidence(apb.ExportEvidenceRequest(job=scene.job, tenant=tenant))
            assert refused.value.code() == grpc.StatusCode.NOT_FOUND, tenant
        with pytest.raises(grpc.aio.AioRpcError) as unscoped:
            await audit.ExportEvidence(apb.ExportEvidenceRequest(job=scene.job))
        assert unscoped.value.code() == grpc.StatusCode.UNAUTHENTICATED
