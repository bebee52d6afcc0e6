"""The evaluator's repair policy over a real sealed store and a real sandbox
pool (issue 13): normalize stores the rewrite and reports it, review parks
the job with the damage codes, refuse rejects with a sub-code, and a shadow
evaluation stores nothing."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from quire.blobstore import normalized_key, source_key
from quire.localblobs import LocalBlobStore
from quire.reasons import ReasonCode
from quire.sandbox import SandboxPool
from quire.settings import SandboxSettings
from quire.testing.damaged import EVERYDAY
from quire.testing.sealedstore import sealed_store
from quire.type import job_pb2, queue_pb2
from quire.validator.evaluation import Evaluator
from quire.validator.pdfchecks import PdfLimits
from quire.validator.rulesets import Ruleset

TENANT = "acme"


@pytest.fixture
async def evaluator(tmp_path: Path) -> AsyncIterator[tuple[Evaluator, LocalBlobStore]]:
    blobs = sealed_store(tmp_path / "blobs")
    pool = SandboxPool(
        SandboxSettings(workers=1, cpu_seconds=20, wall_seconds=30), name="repair-test"
    )
    await pool.warm()
    try:
        yield Evaluator(blobs=blobs, sandbox=pool, limits=PdfLimits()), blobs
    finally:
        pool.close()


def _task(blobs: LocalBlobStore, tmp_path: Path, name: str) -> queue_pb2.JobTask:
    build, _code = EVERYDAY[name]
    source = build(tmp_path / f"{name}.pdf")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    upload = tmp_path / f"{name}.upload"
    shutil.copy(source, upload)
    blobs.promote_file(upload, source_key(TENANT, digest))
    return queue_pb2.JobTask(
        job="jobs/j1",
        tenant=TENANT,
        sources=[
            job_pb2.SourceRef(
                position=0,
                document_id="d",
                sha256=digest,
                content_type="application/pdf",
                size_bytes=source.stat().st_size,
                blob_key=source_key(TENANT, digest),
            )
        ],
    )


def _ruleset(policy: str | None) -> Ruleset:
    body: dict[str, object] = {"name": "t", "version": "1", "rules": []}
    if policy:
        body["repair"] = policy
    return Ruleset.from_body(body)


async def test_normalize_stores_the_rewrite_and_reports_it(evaluator, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    evaluator_, blobs = evaluator
    task = _task(blobs, tmp_path, "xref-missing")
    evaluation = await evaluator_.evaluate(task, _ruleset(None))
    assert evaluation.verdict == "PASSED", evaluation
    [repair] = evaluation.repairs
    assert repair.position == 0 and repair.sha256 == task.sources[0].sha256
    assert "XREF_RECONSTRUCTED" in repair.warnings
    stored = b"".join(blobs.read_plain(normalized_key(TENANT, repair.normalized_sha256)))
    assert hashlib.sha256(stored).hexdigest() == repair.normalized_sha256
    assert len(stored) == repair.normalized_size_bytes
    assert evaluation.findings[0]["normalized_sha256"] == repair.normalized_sha256


async def test_review_parks_the_job_showing_the_damage(evaluator, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    evaluator_, blobs = evaluator
    task = _task(blobs, tmp_path, "stream-without-length")
    evaluation = await evaluator_.evaluate(task, _ruleset("review"))
    assert (evaluation.verdict, evaluation.reason) == ("NEEDS_REVIEW", ReasonCode.REVIEW_REQUIRED)
    [decision] = [d for d in evaluation.decisions if d.rule == "repair"]
    assert decision.outcome == "review" and "STREAM_LENGTH_RECOVERED" in decision.detail
    [repair] = evaluation.repairs
    assert blobs.exists(normalized_key(TENANT, repair.normalized_sha256)), (
        "an approval hands on the rewrite, so it is kept"
    )


async def test_refuse_rejects_with_a_sub_code_and_stores_nothing(evaluator, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    evaluator_, blobs = evaluator
    task = _task(blobs, tmp_path, "trailer-size-wrong")
    evaluation = await evaluator_.evaluate(task, _ruleset("refuse"))
    assert (evaluation.verdict, evaluation.reason, evaluation.detail) == (
        "REJECTED",
        ReasonCode.MALFORMED_PDF,
        "REPAIR_NOT_ALLOWED",
    )
    assert evaluation.repairs == []
    assert not (tmp_path / "blobs" / "normalized").exists()


async def test_a_shadow_evaluation_stores_no_rewrite(evaluator, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    evaluator_, blobs = evaluator
    task = _task(blobs, tmp_path, "page-listed-twice")
    evaluation = await evaluator_.evaluate(task, _ruleset(None), store_repairs=False)
    assert evaluation.verdict == "PASSED" and len(evaluation.repairs) == 1
    assert not blobs.exists(normalized_key(TENANT, evaluation.repairs[0].normalized_sha256))
