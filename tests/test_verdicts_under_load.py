"""The same file gets the same verdict alone and with the stage full (issue
36): a sample of the shared corpus, with a few hostile files, inspected one
at a time on a quiet machine, then all at once beside processes that hold
both cores. Limits are CPU seconds and bytes; the wall clock is only a
backstop far above them, so the machine's load must not move a verdict."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from quire.sandbox import SandboxExhausted, SandboxPool
from quire.settings import SandboxSettings
from quire.testing.damaged import length_spans_objects, xref_missing
from quire.testing.hostile import flate_bomb, nested_arrays, page_tree_loop
from quire.validator.budgets import BudgetRule
from quire.validator.evaluation import Evaluator
from quire.validator.inspection import inspect_source
from quire.validator.pdfchecks import PdfLimits

EVERY = 25
"""One corpus file in this many (sorted), so every kind of file is there."""


@contextmanager
def _cores_held() -> Iterator[None]:
    """One spinning process per core for as long as the block runs (started
    with exec, never forked from this threaded process)."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 2)
    ]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def _sample(corpus: Path, tmp_path: Path) -> list[Path]:
    files = sorted(p for p in corpus.rglob("*") if p.is_file() and p.suffix.lower() == ".pdf")
    hostile = [
        flate_bomb(tmp_path / "bomb.pdf"),
        nested_arrays(tmp_path / "nested.pdf"),
        page_tree_loop(tmp_path / "loop.pdf"),
        xref_missing(tmp_path / "xref.pdf"),
        length_spans_objects(tmp_path / "masked.pdf"),
    ]
    return files[::EVERY] + hostile


async def _verdict(evaluator: Evaluator, path: Path, rewrites: Path) -> tuple[str, str]:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    rewrite = rewrites / f"{digest}.clean"
    try:
        finding = await evaluator.run_sandboxed(
            (digest,),
            path.stat().st_size,
            0,
            inspect_source,
            str(path),
            digest,
            "application/pdf",
            PdfLimits(),
            str(rewrite),
        )
    except SandboxExhausted:
        return ("PARSER_LIMIT_EXCEEDED", "")
    return (str(finding.reason), finding.detail)


async def test_a_sample_of_the_corpus_gets_the_same_verdicts_alone_and_under_load(
    corpus: Path, tmp_path: Path
) -> None:
    files = _sample(corpus, tmp_path)
    settings = SandboxSettings(workers=2, cpu_seconds=20, wall_seconds=60)
    # The quarantine lane at the shared lane's priority: beside processes that
    # spin at full priority, a niced lane would wait out the wall-clock backstop.
    quarantine_settings = SandboxSettings(workers=1, cpu_seconds=20, wall_seconds=60, nice=0)

    async def run(*, together: bool, name: str) -> dict[Path, tuple[str, str]]:
        # Fresh lanes each time: what one run learned (files sent straight to
        # quarantine) must not shape the other's verdicts.
        shared = SandboxPool(settings, name=f"{name}-shared")
        quarantine = SandboxPool(quarantine_settings, name=f"{name}-quarantine")
        await asyncio.gather(shared.warm(), quarantine.warm())
        evaluator = Evaluator(
            blobs=None,  # type: ignore[arg-type]  # not reached by run_sandboxed
            sandbox=shared,
            limits=PdfLimits(),
            quarantine=quarantine,
            budgets=BudgetRule(),
        )
        rewrites = tmp_path / name
        rewrites.mkdir()
        try:
            if together:
                verdicts = await asyncio.gather(
                    *(_verdict(evaluator, path, rewrites) for path in files)
                )
                return dict(zip(files, verdicts, strict=True))
            return {path: await _verdict(evaluator, path, rewrites) for path in files}
        finally:
            shared.close()
            quarantine.close()

    alone = await run(together=False, name="alone")
    with _cores_held():
        loaded = await run(together=True, name="loaded")
    moved = {
        str(path.relative_to(corpus) if path.is_relative_to(corpus) else path.name): (
            alone[path],
            loaded[path],
        )
        for path in files
        if alone[path] != loaded[path]
    }
    assert not moved, f"verdicts that moved with the load: {moved}"
    kinds = {verdict[0] for verdict in alone.values()}
    assert {"", "MALFORMED_PDF", "CYCLIC_STRUCTURE", "DECOMPRESSED_SIZE_EXCEEDED"} <= kinds, (
        "the sample holds accepted, damaged and hostile files alike"
    )
