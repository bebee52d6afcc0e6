"""A job's small sources are inspected in one sandbox call, with the findings
each would have had alone; a call that does not come back (a hostile source
exhausting the shared lane, a crash) sends each source to be looked at on its
own, so the hostile one costs only itself and is known for it."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from quire.blobstore import source_key
from quire.localblobs import LocalBlobStore
from quire.reasons import ReasonCode
from quire.sandbox import SandboxExhausted, SandboxPool
from quire.settings import SandboxSettings
from quire.testing.damaged import EVERYDAY
from quire.testing.pdfs import write_text_pdf
from quire.testing.sealedstore import sealed_store
from quire.type import job_pb2, queue_pb2
from quire.validator.evaluation import Evaluator
from quire.validator.pdfchecks import PdfLimits
from quire.validator.rulesets import Ruleset

TENANT = "acme"
RULESET = Ruleset.from_body({"name": "t", "version": "1", "rules": []})


class _Counted(SandboxPool):
    """The real pool, counting its calls; ``failing`` makes a call of several
    sources fail as an exhausted worker would."""

    calls: list[str]
    failing = False

    async def run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(fn.__name__)
        if self.failing and fn.__name__ == "inspect_sources":
            raise SandboxExhausted("CPU limit reached")
        return await super().run(fn, *args, **kwargs)


@pytest.fixture
async def pool() -> AsyncIterator[_Counted]:
    counted = _Counted(SandboxSettings(workers=2, cpu_seconds=20, wall_seconds=30), name="t")
    counted.calls = []
    await counted.warm()
    counted.calls.clear()
    try:
        yield counted
    finally:
        counted.close()


def _source(blobs: LocalBlobStore, path: Path, position: int) -> job_pb2.SourceRef:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    upload = path.with_suffix(".upload")
    shutil.copy(path, upload)
    blobs.promote_file(upload, source_key(TENANT, digest))
    return job_pb2.SourceRef(
        position=position,
        document_id=f"d{position}",
        sha256=digest,
        content_type="application/pdf",
        size_bytes=path.stat().st_size,
        blob_key=source_key(TENANT, digest),
    )


def _task(blobs: LocalBlobStore, tmp_path: Path) -> queue_pb2.JobTask:
    """Three sources: intact, damaged (repaired), intact."""
    build, _code = EVERYDAY["xref-missing"]
    paths = [
        write_text_pdf(tmp_path / "a.pdf", ["first"]),
        build(tmp_path / "b.pdf"),
        write_text_pdf(tmp_path / "c.pdf", ["third", "page"]),
    ]
    return queue_pb2.JobTask(
        job="jobs/j1",
        tenant=TENANT,
        sources=[_source(blobs, path, n) for n, path in enumerate(paths)],
    )


def _seen(evaluation: Any) -> tuple[Any, ...]:
    return (
        evaluation.verdict,
        evaluation.reason,
        evaluation.findings,
        [(r.position, r.normalized_sha256, list(r.warnings)) for r in evaluation.repairs],
    )


async def test_a_jobs_sources_are_inspected_in_one_call_as_each_alone_would_be(
    pool: _Counted, tmp_path: Path
) -> None:
    blobs = sealed_store(tmp_path / "blobs")
    evaluator = Evaluator(blobs=blobs, sandbox=pool, limits=PdfLimits())
    task = _task(blobs, tmp_path)
    together = await evaluator.evaluate(task, RULESET, store_repairs=False)
    assert pool.calls == ["inspect_sources"]
    assert together.verdict == "PASSED" and len(together.repairs) == 1

    pool.calls.clear()
    pool.failing = True  # the call of them all fails: each is looked at alone
    alone = await evaluator.evaluate(task, RULESET, store_repairs=False)
    assert pool.calls == ["inspect_sources", *["inspect_source"] * 3]
    assert _seen(alone) == _seen(together)


async def test_a_hostile_source_exhausts_only_its_own_call(pool: _Counted, tmp_path: Path) -> None:
    """A source that exhausts the worker takes the call of all with it; alone,
    the others pass inspection and the hostile one is refused for the limit."""
    blobs = sealed_store(tmp_path / "blobs")
    evaluator = Evaluator(blobs=blobs, sandbox=pool, limits=PdfLimits())
    task = _task(blobs, tmp_path)
    hostile = task.sources[1].sha256

    original = SandboxPool.run

    async def exhausting(self: SandboxPool, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if fn.__name__ == "inspect_sources" or (
            fn.__name__ == "inspect_source" and args[1] == hostile
        ):
            raise SandboxExhausted("CPU limit reached")
        return await original(self, fn, *args, **kwargs)

    pool.run = exhausting.__get__(pool)  # type: ignore[method-assign]
    evaluation = await evaluator.evaluate(task, RULESET, attempt=99, store_repairs=False)
    assert evaluation.verdict == "REJECTED"
    assert evaluation.reason == ReasonCode.PARSER_LIMIT_EXCEEDED
    [first, second] = evaluation.findings
    assert first["reason"] == "" and second["reason"] == ReasonCode.PARSER_LIMIT_EXCEEDED
