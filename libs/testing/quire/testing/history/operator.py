"""The operator's reads the history checker's gatherer makes of audit and
the signer (with the operator token), and the two facts it verifies offline
with Quire's own verifiers: a job's evidence (``quire.evidenceverify``) and
its artifact's signature (``quire.pdfsignature``, against the signer's keys).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from quire.audit.v1 import audit_service_pb2 as audit_pb
from quire.audit.v1 import audit_service_pb2_grpc as audit_grpc
from quire.blobstore import sha256_file
from quire.cli.args import bearer_metadata
from quire.cli.history import job_entries
from quire.cli.verify import known_certificates
from quire.client import AdmissionClient, ArtifactDigestMismatch
from quire.errors import NotFound
from quire.evidenceverify import repeated_names, summaries, verify_evidence
from quire.grpcstatus import reason_of
from quire.pdfsignature import verify_signed_pdf
from quire.pipeline import ADMISSION
from quire.signer.v1 import signer_service_pb2 as signer_pb
from quire.signer.v1 import signer_service_pb2_grpc as signer_grpc
from quire.stack.info import StackInfo
from quire.testing.history.facts import Artifact, Evidence, Signed
from quire.tls import TlsSettings, aio_channel
from quire.type import job_pb2

__all__ = ["SystemAccess", "Operator", "evidence_of", "artifact_of"]

TIMEOUT_SECONDS = 60.0
BATCH = 1000
"""Audit's most names in one ``BatchGetJobs``."""


@dataclass(frozen=True)
class SystemAccess:
    """Where the checker asks, and as whom."""

    admission: str
    audit: str
    signer: str
    operator_token: str
    tenant_tokens: Mapping[str, str]
    """Each tenant's token by tenant id (``tenants/`` optional): admission
    answers ``GetJob`` and ``DownloadArtifact`` to a job's own tenant only."""
    tls: TlsSettings | None = None
    default_token: str = ""
    """The token for a tenant ``tenant_tokens`` does not name (the embedded
    stack's development tenant's); none when empty."""

    @classmethod
    def of_stack(
        cls, info: StackInfo, tenant_tokens: Mapping[str, str] | None = None
    ) -> SystemAccess:
        """The embedded stack's addresses and operator token; its development
        tenant's token for any tenant not in ``tenant_tokens``."""
        endpoints = info.endpoints
        return cls(
            admission=endpoints[ADMISSION],
            audit=endpoints["audit"],
            signer=endpoints["signer"],
            operator_token=info.operator_token(),
            tenant_tokens=tenant_tokens or {},
            default_token=info.token(),
        )

    def token_of(self, tenant: str) -> str:
        tokens = {key.removeprefix("tenants/"): token for key, token in self.tenant_tokens.items()}
        token = tokens.get(tenant.removeprefix("tenants/"), self.default_token)
        if not token:
            raise ValueError(f"no token for tenants/{tenant}: name it in tenant_tokens")
        return token


class Operator:
    """Audit and the signer, asked as an operator; open while in ``async with``."""

    def __init__(self, access: SystemAccess) -> None:
        self._access = access
        self._metadata = bearer_metadata(access.operator_token)
        self._audit_channel = aio_channel(access.audit, access.tls)
        self._signer_channel = aio_channel(access.signer, access.tls)
        self.audit = audit_grpc.AuditServiceStub(self._audit_channel)
        self.signer = signer_grpc.SignerServiceStub(self._signer_channel)
        self._pin = ""
        self._certificates: list[str] | None = None

    async def __aenter__(self) -> Operator:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self._audit_channel.close()
        await self._signer_channel.close()

    async def views(self, names: Sequence[str]) -> dict[str, job_pb2.Job]:
        """Audit's view of each job it recorded, by name."""
        found: dict[str, job_pb2.Job] = {}
        for start in range(0, len(names), BATCH):
            reply = await self.audit.BatchGetJobs(
                audit_pb.BatchGetJobsRequest(names=names[start : start + BATCH]),
                metadata=self._metadata,
                timeout=TIMEOUT_SECONDS,
            )
            found.update((job.name, job) for job in reply.jobs)
        return found

    async def entries(self, job: str) -> list[audit_pb.LedgerEntry]:
        """Every ledger entry of ``job``; none when the ledger holds nothing of it."""
        try:
            return await job_entries(self.audit, job, self._metadata)
        except NotFound:
            return []

    async def verify_ledger(self) -> audit_pb.VerifyLedgerResponse:
        return await self.audit.VerifyLedger(
            audit_pb.VerifyLedgerRequest(), metadata=self._metadata, timeout=TIMEOUT_SECONDS
        )

    async def pin(self) -> str:
        """The checkpoint key's fingerprint, asked of audit once."""
        if not self._pin:
            key = await self.audit.GetCheckpointKey(
                audit_pb.GetCheckpointKeyRequest(), metadata=self._metadata, timeout=TIMEOUT_SECONDS
            )
            self._pin = key.public_key_sha256
        return self._pin

    async def evidence(self, job: str) -> str:
        reply = await self.audit.ExportEvidence(
            audit_pb.ExportEvidenceRequest(job=job),
            metadata=self._metadata,
            timeout=TIMEOUT_SECONDS,
        )
        return reply.json

    async def signature(self, job: str) -> Signed | None:
        """The signer's record of ``job``; None when it has none."""
        try:
            reply = await self.signer.GetSignature(
                signer_pb.GetSignatureRequest(job=job),
                metadata=self._metadata,
                timeout=TIMEOUT_SECONDS,
            )
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise
        return Signed(
            reply.artifact.sha256, reply.signing.certificate_sha256, reply.signing.key_version
        )

    async def certificates(self) -> list[str]:
        """Every key version's certificate the signer lists, asked once."""
        if self._certificates is None:
            self._certificates = await known_certificates(
                self._access.signer, self._access.tls, metadata=self._metadata
            )
        return self._certificates


async def evidence_of(operator: Operator, job: str, tenant: str) -> Evidence:
    """The job's evidence, verified as ``quire evidence verify`` does."""
    text = await operator.evidence(job)
    problems = [
        f"a member name appears twice: {name}" for name in sorted(set(repeated_names(text)))
    ]
    document = json.loads(text)
    problems += verify_evidence(document, await operator.pin(), tenant=tenant)
    if problems:
        return Evidence(tuple(problems), ())
    return Evidence((), tuple(entry["to_state"] for entry in summaries(document)))


async def artifact_of(
    client: AdmissionClient, operator: Operator, job: str, workdir: Path
) -> Artifact:
    """The job's artifact as its tenant downloads it, verified against the signer's keys."""
    workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=workdir) as folder:
        path = Path(folder) / "artifact.pdf"
        try:
            await client.download(job, path)
        except grpc.aio.AioRpcError as error:
            said = " ".join(part for part in (error.code().name, reason_of(error)) if part)
            return Artifact(problem=f"DownloadArtifact {said}")
        except ArtifactDigestMismatch:
            return Artifact(problem="the bytes are not the digest admission announced")
        digest, _size = await asyncio.to_thread(sha256_file, path)
        report = await asyncio.to_thread(
            verify_signed_pdf, str(path), await operator.certificates()
        )
    return Artifact(
        sha256=digest,
        signature_count=report.signature_count,
        verified=report.ok,
        certificate_sha256=report.certificate_sha256,
        problem=report.unreadable,
    )
