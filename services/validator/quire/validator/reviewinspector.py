"""What staff see of a parked job's sources, computed on request: why each
decision was made, with the values behind it (ExplainReview), and a page of
a source drawn as an image (RenderPage).

Both read the tenant's sealed blobs and decrypt them in memory only
(``BlobStore.plain_bytes``, digest checked), up to ``max_source_bytes`` per
call, and hand them to the validator's sandbox workers as bytes, where they
are in-memory files (``quire.memoryfiles``): no plaintext file is written,
whatever the size of the source (a larger one is refused,
``RENDER_LIMIT_EXCEEDED``). The work runs under the sandbox's limits, in the
pool the stage uses, one staff call at a time so that staff never hold more
than one of its workers. Nothing computed here is stored or logged: the
values and images are document content, and go back to the one call that
asked.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from quire.blobstore import BlobStore, normalized_key
from quire.errors import FailedPrecondition, FieldViolation, InvalidInput, NotFound
from quire.memoryfiles import InMemory
from quire.reasons import ReasonCode
from quire.sandbox import Budget, SandboxBusy, SandboxPool
from quire.type import job_pb2, queue_pb2
from quire.validator.budgets import BudgetRule
from quire.validator.explaining import Explained, explain
from quire.validator.pageimages import PageImage, render_page
from quire.validator.reviews import ReviewRow
from quire.validator.reviewsources import SourceSeen
from quire.validator.rulesets import RulesetBook

__all__ = ["ReviewInspector", "MAX_SOURCE_BYTES", "DEFAULT_WIDTH", "checked_width"]

T = TypeVar("T")
MAX_SOURCE_BYTES = 64 * 1024 * 1024
"""Plaintext one staff call may hold in memory, every source it reads together."""
STAFF_FLOOR_SECONDS = 5.0
"""The least CPU time a staff call's sandbox task gets (the pool's limits cap it)."""
WAIT_SECONDS = 30.0
"""How long a staff call waits for the one staff slot (then UNAVAILABLE)."""
PDF = "application/pdf"
DEFAULT_WIDTH = 800
MIN_WIDTH, MAX_WIDTH = 200, 1600
STORED_FINDINGS = ("repair", "faithfulness")
"""Decisions of the validator's own, not the ruleset's: explained from what
inspection stored, not computed again."""


def checked_width(width: int) -> int:
    """A RenderPage width: 0 means ``DEFAULT_WIDTH``; 200 to 1600 else INVALID_ARGUMENT."""
    width = width or DEFAULT_WIDTH
    if not MIN_WIDTH <= width <= MAX_WIDTH:
        raise InvalidInput(
            ReasonCode.WIDTH_OUT_OF_RANGE,
            f"width must be {MIN_WIDTH} to {MAX_WIDTH} pixels (0: {DEFAULT_WIDTH})",
            (FieldViolation("width", f"{MIN_WIDTH} to {MAX_WIDTH}, or 0"),),
        )
    return width


def _stored(decision: dict[str, Any], seen: dict[int, SourceSeen]) -> Explained:
    """A repair or faithfulness decision, as inspection recorded it."""
    position = int(decision.get("position", -1))
    source = seen.get(position)
    pages = " ".join(str(p) for p in source.differing_pages) if source else ""
    faithful = decision.get("rule") == "faithfulness"
    return Explained(
        rule=str(decision.get("rule", "")),
        outcome=str(decision.get("outcome", "")),
        reason_code=str(decision.get("reason_code", "")),
        position=position,
        subject="pages" if faithful else "rewrite",
        expected="",
        found=pages if faithful else "",
    )


def _source_at(task: queue_pb2.JobTask, position: int) -> job_pb2.SourceRef:
    for source in task.sources:
        if source.position == position:
            return source
    raise NotFound("the job has no source at this position")


class ReviewInspector:
    """Explains a review's decisions and draws its sources' pages, in the sandbox."""

    def __init__(
        self,
        *,
        blobs: BlobStore,
        sandbox: SandboxPool,
        book: RulesetBook,
        budgets: BudgetRule | None = None,
        max_source_bytes: int = MAX_SOURCE_BYTES,
        wait_seconds: float = WAIT_SECONDS,
    ) -> None:
        self._blobs = blobs
        self._sandbox = sandbox
        self._book = book
        self._budgets = budgets or BudgetRule()
        self._max_bytes = max_source_bytes
        self._wait = wait_seconds
        self._slot = asyncio.Semaphore(1)

    async def explain(self, review: ReviewRow, seen: list[SourceSeen]) -> list[Explained]:
        """The ruleset's decisions over the job's sources (a repaired source's
        rewrite, as the ruleset read it), each with its values, then the
        validator's own repair and faithfulness decisions."""
        ruleset = await self._book.find(review.ruleset)
        if ruleset is None:
            raise NotFound("the review's ruleset is not published here")
        by_position = {source.position: source for source in seen}
        stored = [
            _stored(d, by_position) for d in review.decisions if d.get("rule") in STORED_FINDINGS
        ]
        if not ruleset.reads_content:
            return stored
        task = queue_pb2.JobTask.FromString(review.next_task)
        async with self._staff_slot():
            documents = await self._plain([_read_by_rules(task.tenant, s) for s in task.sources])
            inputs = [
                (document, source.position, source.content_type)
                for document, source in zip(documents, task.sources, strict=True)
            ]
            pages = sum(source.page_count for source in seen)
            size = sum(len(document) for document in documents)
            explained: list[Explained] = await self._sandboxed(
                size, pages, explain, inputs, ruleset
            )
        return explained + stored

    async def render(
        self, review: ReviewRow, *, position: int, rewrite: bool, page: int, width: int
    ) -> PageImage:
        """Page ``page`` (1-based) of the source at ``position``, as uploaded or,
        with ``rewrite``, as the validator rewrote it, ``width`` pixels wide."""
        task = queue_pb2.JobTask.FromString(review.next_task)
        source = _source_at(task, position)
        if rewrite and not source.repair.normalized_sha256:
            raise NotFound(
                "the source was not repaired: it has no rewrite", ReasonCode.SOURCE_NOT_REPAIRED
            )
        if source.content_type != PDF or page < 1:
            raise InvalidInput(
                ReasonCode.PAGE_OUT_OF_RANGE,
                "pages count from 1, and only a PDF source has pages",
                (FieldViolation("page", "1 to the source's page count"),),
            )
        key = (
            (
                normalized_key(task.tenant, source.repair.normalized_sha256),
                source.repair.normalized_sha256,
            )
            if rewrite
            else (source.blob_key, source.sha256)
        )
        async with self._staff_slot():
            (document,) = await self._plain([key])
            image: PageImage = await self._sandboxed(
                len(document), 1, render_page, document, page, width
            )
        return image

    async def _plain(self, keys: list[tuple[str, str]]) -> list[InMemory]:
        """Each (blob key, digest)'s plaintext, decrypted and checked in memory;
        RENDER_LIMIT_EXCEEDED past ``max_source_bytes`` in all."""
        documents: list[InMemory] = []
        room = self._max_bytes
        for key, sha256 in keys:
            data = await asyncio.to_thread(self._blobs.plain_bytes, key, sha256, room)
            if data is None:
                raise FailedPrecondition(
                    ReasonCode.RENDER_LIMIT_EXCEEDED,
                    f"the sources are larger than the {self._max_bytes} bytes shown in memory",
                )
            room -= len(data)
            documents.append(InMemory(data))
        return documents

    @asynccontextmanager
    async def _staff_slot(self) -> AsyncIterator[None]:
        """The one staff call at a time, from decrypting to the worker's answer:
        staff hold at most one sandbox worker and ``max_source_bytes`` of plaintext."""
        try:
            async with asyncio.timeout(self._wait):
                await self._slot.acquire()
        except TimeoutError:
            raise SandboxBusy("another staff read holds the sandbox; try again") from None
        try:
            yield
        finally:
            self._slot.release()

    async def _sandboxed(self, size: int, pages: int, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a sandbox worker, under a budget for ``size`` bytes
        over ``pages`` pages, never less than ``STAFF_FLOOR_SECONDS``."""
        budget = self._budgets.budget(size, pages)
        seconds = max(budget.cpu_seconds, STAFF_FLOOR_SECONDS)
        budget = Budget(cpu_seconds=seconds, wall_seconds=self._budgets.wall_factor * seconds)
        return await self._sandbox.run(fn, *args, budget=budget)


def _read_by_rules(tenant: str, source: job_pb2.SourceRef) -> tuple[str, str]:
    """Where the ruleset read the source: its rewrite when it was repaired."""
    if source.repair.normalized_sha256:
        return normalized_key(
            tenant, source.repair.normalized_sha256
        ), source.repair.normalized_sha256
    return source.blob_key, source.sha256
