"""The validator's stage work: every source of a job inspected in the sandbox."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from quire.blobstore import LocalBlobStore
from quire.errors import Rejected
from quire.leases import Lease
from quire.reasons import ReasonCode
from quire.sandbox import SandboxExhausted, SandboxPool
from quire.stage import StageResult
from quire.type import queue_pb2
from quire.validator import tables
from quire.validator.inspection import Finding, inspect_source
from quire.validator.pdfchecks import PdfLimits

__all__ = ["ValidatorWork", "SourcesRejected", "STRIKES"]

STRIKES = 2
"""Deliveries on which a source exhausts its sandbox before the job is REJECTED."""


class SourcesRejected(Rejected):
    """A source failed inspection; carries every finding for the record."""

    def __init__(self, reason: str, findings: list[dict[str, object]], token: int) -> None:
        super().__init__(reason, "source rejected")
        self.findings = findings
        self.token = token


def _record(
    job: str, verdict: str, reason: str, findings: list[dict[str, object]], token: int
) -> Callable[[Session], None]:
    def write(session: Session) -> None:
        session.execute(
            tables.validations.insert().values(
                job=job,
                verdict=verdict,
                reason_code=reason,
                findings=findings,
                lease_token=token,
                decided_at=datetime.now(UTC),
            )
        )

    return write


class ValidatorWork:
    stage_state = "VALIDATING"
    next_state = "ASSEMBLING"
    next_stage = "assemble"

    def __init__(
        self, *, blobs: LocalBlobStore, sandbox: SandboxPool, limits: PdfLimits | None = None
    ) -> None:
        self._blobs = blobs
        self._sandbox = sandbox
        self._limits = limits or PdfLimits()

    async def process(self, task: queue_pb2.JobTask, lease: Lease, attempt: int) -> StageResult:
        findings: list[dict[str, object]] = []
        for source in task.sources:
            try:
                finding: Finding = await self._sandbox.run(
                    inspect_source,
                    str(self._blobs.local_path(source.blob_key)),
                    source.sha256,
                    source.content_type,
                    self._limits,
                )
            except SandboxExhausted:
                if attempt < STRIKES:
                    raise  # transient: the machine may have been busy; try once more
                finding = Finding("", 0, ReasonCode.PARSER_LIMIT_EXCEEDED)
            findings.append(
                {"position": source.position, "sha256": source.sha256, **asdict(finding)}
            )
            if finding.reason:
                raise SourcesRejected(finding.reason, findings, lease.token)
        next_task = queue_pb2.JobTask()
        next_task.CopyFrom(task)
        return StageResult(
            next_task=next_task,
            extra_events=[("VALIDATING", "REVIEWING", {})],
            record=_record(task.job, "PASSED", "", findings, lease.token),
        )

    def record_rejection(
        self, task: queue_pb2.JobTask, error: Exception
    ) -> Callable[[Session], None] | None:
        if isinstance(error, SourcesRejected):
            return _record(task.job, "REJECTED", str(error.reason), error.findings, error.token)
        return None
