"""One evaluation of a job's sources under a ruleset: structural checks in the
sandbox, then the ruleset's rules over facts extracted in the sandbox. Used
by the stage (which records the result) and by shadow evaluation (which
records nothing)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from quire.attemptfiles import AttemptFiles
from quire.blobstore import LocalBlobStore
from quire.errors import PermanentError
from quire.reasons import ReasonCode
from quire.sandbox import SandboxExhausted, SandboxPool
from quire.type import job_pb2, queue_pb2
from quire.validator.facts import DocumentFacts, extract_facts
from quire.validator.inspection import Finding, inspect_source
from quire.validator.pdfchecks import PdfLimits
from quire.validator.rules import Decision, evaluate, verdict
from quire.validator.rulesets import Ruleset

__all__ = ["Evaluation", "Evaluator", "STRIKES"]

STRIKES = 2
UNREADABLE_SOURCE = frozenset({ReasonCode.SOURCE_MISSING, ReasonCode.DIGEST_MISMATCH})
"""Why a stored source may not open: the job is REJECTED for it, as the sandbox would."""
"""Deliveries on which a source exhausts its sandbox before the job is REJECTED."""


@dataclass(frozen=True)
class Evaluation:
    verdict: str  # "PASSED", "REJECTED" or "NEEDS_REVIEW"
    reason: str
    findings: list[dict[str, object]]
    decisions: list[Decision]

    def decisions_json(self) -> list[dict[str, object]]:
        return [asdict(d) for d in self.decisions]


def judge(sources: list[tuple[str, int, str]], ruleset: Ruleset) -> list[Decision]:
    """Extract the facts and apply the rules, inside a sandbox worker: only the
    decisions (no document text) come back to the service."""
    facts: list[DocumentFacts] = [extract_facts(*source) for source in sources]
    return evaluate(ruleset, facts)


class Evaluator:
    def __init__(self, *, blobs: LocalBlobStore, sandbox: SandboxPool, limits: PdfLimits) -> None:
        self._blobs = blobs
        self._sandbox = sandbox
        self._limits = limits

    async def evaluate(
        self, task: queue_pb2.JobTask, ruleset: Ruleset, *, attempt: int = STRIKES
    ) -> Evaluation:
        async with AttemptFiles(self._blobs) as files:
            return await self._evaluate(task, ruleset, attempt, files)

    async def _evaluate(
        self, task: queue_pb2.JobTask, ruleset: Ruleset, attempt: int, files: AttemptFiles
    ) -> Evaluation:
        limits = replace(self._limits, allow_active_content=ruleset.allows_active_content)
        findings: list[dict[str, object]] = []
        paths: list[str] = []
        for source in task.sources:
            try:
                path = await files.plain(source.blob_key, source.sha256)
            except PermanentError as error:
                if error.reason not in UNREADABLE_SOURCE:
                    raise  # DATA_SHREDDED and the like end the job as they are
                finding = Finding("", 0, error.reason)
            else:
                paths.append(path)
                finding = await self._inspect(path, source, limits, attempt)
            findings.append(
                {"position": source.position, "sha256": source.sha256, **asdict(finding)}
            )
            if finding.reason:
                return Evaluation("REJECTED", finding.reason, findings, [])
        if not ruleset.reads_content:
            return Evaluation("PASSED", "", findings, [])
        inputs = [
            (path, s.position, s.content_type) for path, s in zip(paths, task.sources, strict=True)
        ]
        try:
            decisions: list[Decision] = await self._sandbox.run(judge, inputs, ruleset)
        except SandboxExhausted:
            if attempt < STRIKES:
                raise
            return Evaluation("REJECTED", ReasonCode.PARSER_LIMIT_EXCEEDED, findings, [])
        outcome, reason = verdict(decisions)
        return Evaluation(outcome, reason, findings, decisions)

    async def _inspect(
        self, path: str, source: job_pb2.SourceRef, limits: PdfLimits, attempt: int
    ) -> Finding:
        try:
            return await self._sandbox.run(
                inspect_source,
                path,
                source.sha256,
                source.content_type,
                limits,
            )
        except SandboxExhausted:
            if attempt < STRIKES:
                raise  # transient: the machine may have been busy; try once more
            return Finding("", 0, ReasonCode.PARSER_LIMIT_EXCEEDED)
