"""One evaluation of a job's sources under a ruleset: structural checks in the
sandbox, then the ruleset's rules over facts extracted in the sandbox. Used
by the stage (which records the result) and by shadow evaluation (which
records nothing)."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypeVar

from quire.attemptfiles import AttemptFiles, Document, Output, in_memory, keep, size_of, written
from quire.blobstore import BlobStore, normalized_key
from quire.errors import PermanentError
from quire.memoryfiles import InMemory, MemoryOutput
from quire.metrics import phase
from quire.pipeline import Verdict
from quire.reasons import ReasonCode
from quire.sandbox import Budget, SandboxExhausted, SandboxPool
from quire.type import job_pb2, queue_pb2
from quire.validator.budgets import BudgetRule
from quire.validator.faithfulness import AMBIGUOUS_CONTENT, SECOND_READER_REFUSED
from quire.validator.inspection import Finding, inspect_source, inspect_sources
from quire.validator.judging import judge
from quire.validator.pdfchecks import PdfLimits
from quire.validator.rules import Decision, verdict
from quire.validator.rulesets import Ruleset
from quire.workqueue.worker import step_aside

__all__ = ["Evaluation", "Evaluator", "STRIKES", "reads_two_ways"]

STRIKES = 2
"""Without a quarantine lane: deliveries on which a source exhausts its sandbox
before the job is REJECTED. With one, the second strike is the quarantine lane,
within the same delivery."""
UNREADABLE_SOURCE = frozenset({ReasonCode.SOURCE_MISSING, ReasonCode.DIGEST_MISMATCH})
"""Why a stored source may not open: the job is REJECTED for it, as the sandbox would."""
TWO_READINGS = frozenset({AMBIGUOUS_CONTENT, SECOND_READER_REFUSED})
REMEMBERED = 1024
"""How many sources that exhausted the shared lane go straight to quarantine."""

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Evaluation:
    """What one evaluation decided: the verdict with its reason, and the findings
    and rule decisions it rests on."""

    verdict: Verdict
    reason: str
    findings: list[dict[str, object]]
    decisions: list[Decision]
    detail: str = ""
    """A stable sub-code of ``reason`` (see ``inspection.Finding.detail``)."""
    repairs: list[job_pb2.SourceRepair] = field(default_factory=list)
    """Sources repaired into a clean rewrite, stored under ``normalized_key``."""
    disagreements: list[job_pb2.PageDisagreement] = field(default_factory=list)
    """Sources two readers read differently (``faithfulness``): why the job was
    refused, or (repair policy "review") one reason it waits for review."""

    def decisions_json(self) -> list[dict[str, object]]:
        return [asdict(d) for d in self.decisions]


def _rewrite_argument(rewrite: Output | None) -> Any:
    """Where ``inspect_source`` writes a repair: nowhere (the ruleset refuses
    repairs), in memory, or at a path."""
    if rewrite is None:
        return ""
    return rewrite if isinstance(rewrite, MemoryOutput) else str(rewrite)


def reads_two_ways(finding: Finding) -> bool:
    """Whether the second reader disagreed, or could not read the source:
    refused for it (``detail``), or passed on for review with it among the
    warnings (pages named or not)."""
    return bool(
        finding.differing_pages
        or finding.detail in TWO_READINGS
        or TWO_READINGS.intersection(finding.warnings)
    )


def _disagreement_of(source: job_pb2.SourceRef, finding: Finding) -> job_pb2.PageDisagreement:
    detail = finding.detail or next(w for w in finding.warnings if w in TWO_READINGS)
    return job_pb2.PageDisagreement(
        position=source.position, pages=list(finding.differing_pages), detail=detail
    )


def _repair_of(source: job_pb2.SourceRef, finding: Finding) -> job_pb2.SourceRepair:
    return job_pb2.SourceRepair(
        position=source.position,
        sha256=source.sha256,
        normalized_sha256=finding.normalized_sha256,
        normalized_size_bytes=finding.normalized_size,
        warnings=list(finding.warnings),
    )


class Evaluator:
    """Runs a ruleset over a job's sources, every look at their bytes in the
    sandbox: in the shared lane, or in quarantine for a source that exhausted it."""

    def __init__(
        self,
        *,
        blobs: BlobStore,
        sandbox: SandboxPool,
        limits: PdfLimits,
        quarantine: SandboxPool | None = None,
        budgets: BudgetRule | None = None,
    ) -> None:
        self._blobs = blobs
        self._sandbox = sandbox
        self._limits = limits
        self._quarantine = quarantine
        self._budgets = budgets or BudgetRule()
        self._hostile: OrderedDict[tuple[str, ...], None] = OrderedDict()
        self._aside = asyncio.Semaphore(self._budgets.quarantine_slots)

    async def run_sandboxed(
        self,
        key: tuple[str, ...],
        size: int,
        pages: int,
        fn: Callable[..., T],
        *args: Any,
    ) -> T:
        """``fn(*args)`` under a budget for ``size`` bytes over ``pages`` pages: in
        the shared pool, and if that exhausts it, at once in the quarantine lane
        (waiting, bounded, for a quarantine worker, never for the shared pool).
        ``SandboxExhausted`` from here means the last lane was exhausted too.
        Sources that once exhausted the shared lane (``key``, their digests) go
        straight to quarantine on a later delivery."""
        with phase("validate"):
            return await self._in_a_lane(key, size, pages, fn, *args)

    async def _in_a_lane(
        self,
        key: tuple[str, ...],
        size: int,
        pages: int,
        fn: Callable[..., T],
        *args: Any,
    ) -> T:
        if self._quarantine is None or key not in self._hostile:
            try:
                return await self._sandbox.run(fn, *args, budget=self._budgets.budget(size, pages))
            except SandboxExhausted as error:
                if self._quarantine is None:
                    raise
                log.warning("%s exhausted the shared lane (%s); quarantined", key, error.message)
                self._hostile[key] = None
                while len(self._hostile) > REMEMBERED:
                    self._hostile.popitem(last=False)
        else:
            self._hostile.move_to_end(key)
        if self._aside.locked():  # every aside slot taken: wait holding the pull slot
            return await self._quarantined(size, pages, fn, *args)
        async with self._aside:
            step_aside()  # ordinary jobs are pulled while this one is in quarantine
            return await self._quarantined(size, pages, fn, *args)

    async def _quarantined(self, size: int, pages: int, fn: Callable[..., T], *args: Any) -> T:
        assert self._quarantine is not None
        return await self._quarantine.run(
            fn,
            *args,
            budget=self._budgets.quarantine(size, pages),
            wait_seconds=self._budgets.quarantine_wait_seconds,
        )

    def _retry_later(self, attempt: int) -> bool:
        """Whether an exhausted sandbox is worth another delivery."""
        return self._quarantine is None and attempt < STRIKES

    async def evaluate(
        self,
        task: queue_pb2.JobTask,
        ruleset: Ruleset,
        *,
        attempt: int = STRIKES,
        store_repairs: bool = True,
    ) -> Evaluation:
        """The ruleset over the task's sources. Repaired sources' rewrites are
        stored for later stages unless ``store_repairs`` is False (a shadow
        evaluation, which records nothing)."""
        async with AttemptFiles(
            self._blobs, in_memory_bytes=self._sandbox.in_memory_bytes
        ) as files:
            return await self._evaluate(task, ruleset, attempt, files, store_repairs)

    async def _evaluate(
        self,
        task: queue_pb2.JobTask,
        ruleset: Ruleset,
        attempt: int,
        files: AttemptFiles,
        store_repairs: bool,
    ) -> Evaluation:
        limits = replace(
            self._limits,
            allow_active_content=ruleset.allows_active_content,
            review_ambiguity=ruleset.repair_policy == "review",
        )
        findings: list[dict[str, object]] = []
        documents: list[Document] = []
        repairs: list[tuple[job_pb2.SourceRepair, Document]] = []
        disagreements: list[job_pb2.PageDisagreement] = []
        # Every source is inspected at once (in one sandbox call, or each in its
        # own); the outcomes are then read in manifest order, so the verdict, the
        # findings recorded and any error raised are those of the first source
        # that fails.
        looked: list[tuple[Finding, Document] | BaseException] | None
        looked = await self._look_together(task, ruleset, limits, files)
        if looked is None:
            looked = await asyncio.gather(
                *(self._look(source, ruleset, limits, attempt, files) for source in task.sources),
                return_exceptions=True,
            )
        for source, seen in zip(task.sources, looked, strict=True):
            if isinstance(seen, BaseException):
                raise seen
            finding, document = seen
            if finding.repaired:
                repairs.append((_repair_of(source, finding), document))
            if reads_two_ways(finding):
                disagreements.append(_disagreement_of(source, finding))
            findings.append(
                {"position": source.position, "sha256": source.sha256, **finding.as_record()}
            )
            if finding.reason:
                return Evaluation(
                    Verdict.REJECTED,
                    finding.reason,
                    findings,
                    [],
                    finding.detail,
                    disagreements=disagreements[-1:] if finding.detail in TWO_READINGS else [],
                )
            documents.append(document)
        evaluation = await self._judge(task, ruleset, attempt, documents, findings)
        if evaluation.verdict is Verdict.REJECTED or not (repairs or disagreements):
            return evaluation
        for repair, clean in repairs if store_repairs else []:
            key = normalized_key(task.tenant, repair.normalized_sha256)
            await asyncio.to_thread(keep, self._blobs, clean, key)
        decisions = list(evaluation.decisions)
        outcome, reason = evaluation.verdict, evaluation.reason
        if ruleset.repair_policy == "review":
            decisions += [
                Decision(
                    rule="repair",
                    outcome="review",
                    reason_code=ReasonCode.REVIEW_REQUIRED,
                    detail=" ".join(repair.warnings) or "REWRITTEN",
                    position=repair.position,
                )
                for repair, _rewrite in repairs
            ]
            # An intact file that reads two ways: parked too, its pages named.
            repaired = {repair.position for repair, _rewrite in repairs}
            decisions += [
                Decision(
                    rule="faithfulness",
                    outcome="review",
                    reason_code=ReasonCode.REVIEW_REQUIRED,
                    detail=disagreement.detail,
                    position=disagreement.position,
                )
                for disagreement in disagreements
                if disagreement.position not in repaired
            ]
            outcome, reason = Verdict.NEEDS_REVIEW, reason or ReasonCode.REVIEW_REQUIRED
        return replace(
            evaluation,
            verdict=outcome,
            reason=reason,
            decisions=decisions,
            repairs=[repair for repair, _rewrite in repairs],
            disagreements=disagreements,
        )

    async def _look_together(
        self,
        task: queue_pb2.JobTask,
        ruleset: Ruleset,
        limits: PdfLimits,
        files: AttemptFiles,
    ) -> list[tuple[Finding, Document] | BaseException] | None:
        """Each source's finding and document (as ``_look``), from one sandbox
        call for them all: when there are several, each held in memory and
        none known to exhaust the shared lane. None otherwise, or when that
        call does not come back with every finding: each source is then
        looked at on its own, so that a hostile one costs only itself (and is
        known for it) and errors come as a lone source's would."""
        sources = list(task.sources)
        if len(sources) < 2 or any((s.sha256,) in self._hostile for s in sources):
            return None
        try:
            documents = await files.documents([(s.blob_key, s.sha256) for s in sources])
        except PermanentError:
            return None  # an unreadable source is judged on its own
        if not in_memory(documents):
            return None
        rewrites = [
            None
            if ruleset.repair_policy == "refuse"
            else await files.output("clean", in_memory=True)
            for _ in sources
        ]
        inputs = [
            (document, s.sha256, s.content_type, limits, _rewrite_argument(rewrite))
            for document, s, rewrite in zip(documents, sources, rewrites, strict=True)
        ]
        # What the sources may use each, together.
        each = [self._budgets.budget(size_of(document), 0) for document in documents]
        budget = Budget(
            cpu_seconds=sum(b.cpu_seconds for b in each),
            wall_seconds=sum(b.wall_seconds for b in each),
        )
        with phase("validate"):
            try:
                findings: list[Finding] = await self._sandbox.run(
                    inspect_sources, inputs, budget=budget
                )
            except Exception:  # noqa: BLE001 - each source alone says what went wrong
                return None
        return [
            (finding, written(rewrite) if finding.repaired and rewrite is not None else document)
            for finding, document, rewrite in zip(findings, documents, rewrites, strict=True)
        ]

    async def _look(
        self,
        source: job_pb2.SourceRef,
        ruleset: Ruleset,
        limits: PdfLimits,
        attempt: int,
        files: AttemptFiles,
    ) -> tuple[Finding, Document]:
        """One source's finding, and the document later checks read: its
        clean rewrite when it was repaired, else the upload."""
        try:
            document = await files.document(source.blob_key, source.sha256)
        except PermanentError as error:
            if error.reason not in UNREADABLE_SOURCE:
                raise  # DATA_SHREDDED and the like end the job as they are
            return Finding("", 0, error.reason), ""
        # Where a repair writes its clean rewrite (in memory beside a source
        # held in memory); none when the ruleset refuses repairs.
        rewrite = (
            None
            if ruleset.repair_policy == "refuse"
            else await files.output("clean", in_memory=isinstance(document, InMemory))
        )
        finding = await self._inspect(document, source, limits, attempt, rewrite)
        if finding.repaired and rewrite is not None:
            return finding, written(rewrite)
        return finding, document

    async def _judge(
        self,
        task: queue_pb2.JobTask,
        ruleset: Ruleset,
        attempt: int,
        documents: list[Document],
        findings: list[dict[str, object]],
    ) -> Evaluation:
        """The ruleset's rules over sources that passed inspection."""
        if not ruleset.reads_content:
            return Evaluation(Verdict.PASSED, "", findings, [])
        inputs = [
            (document, s.position, s.content_type)
            for document, s in zip(documents, task.sources, strict=True)
        ]
        key = tuple(s.sha256 for s in task.sources)
        size = sum(size_of(document) for document in documents)
        pages = sum(int(str(f.get("page_count") or 0)) for f in findings)
        try:
            decisions: list[Decision] = await self.run_sandboxed(
                key, size, pages, judge, inputs, ruleset
            )
        except SandboxExhausted:
            if self._retry_later(attempt):
                raise
            return Evaluation(Verdict.REJECTED, ReasonCode.PARSER_LIMIT_EXCEEDED, findings, [])
        outcome, reason = verdict(decisions)
        return Evaluation(outcome, reason, findings, decisions)

    async def _inspect(
        self,
        document: Document,
        source: job_pb2.SourceRef,
        limits: PdfLimits,
        attempt: int,
        rewrite: Output | None,
    ) -> Finding:
        try:
            return await self.run_sandboxed(
                (source.sha256,),
                size_of(document),
                0,  # unknown before the file is opened
                inspect_source,
                document,
                source.sha256,
                source.content_type,
                limits,
                _rewrite_argument(rewrite),
            )
        except SandboxExhausted:
            if self._retry_later(attempt):
                raise  # transient: the machine may have been busy; try once more
            return Finding("", 0, ReasonCode.PARSER_LIMIT_EXCEEDED)
