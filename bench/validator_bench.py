"""Validator benchmark: documents validated per second on the shared corpus
and on the standard 12-page packet, in-process against the sandbox (one
worker, like for like; and the default two workers), with the ratios.

    make bench-validator
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from quire.blobstore import sha256_file  # noqa: E402
from quire.sandbox import SandboxPool  # noqa: E402
from quire.settings import SandboxSettings  # noqa: E402
from quire.testing.pdfs import write_text_pdf  # noqa: E402
from quire.validator.inspection import inspect_source  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus"
PRELOAD = ("magic", "pikepdf")


def _inputs(paths: list[Path]) -> list[tuple[str, str]]:
    return [(str(p), sha256_file(p)[0]) for p in paths]


def in_process(inputs: list[tuple[str, str]], rounds: int) -> float:
    started = time.perf_counter()
    for _ in range(rounds):
        for path, digest in inputs:
            inspect_source(path, digest, "application/pdf")
    return len(inputs) * rounds / (time.perf_counter() - started)


async def sandboxed(inputs: list[tuple[str, str]], rounds: int, workers: int) -> float:
    pool = SandboxPool(SandboxSettings(workers=workers), preload=PRELOAD)
    try:
        await pool.warm()
        started = time.perf_counter()
        for _ in range(rounds):
            await asyncio.gather(
                *(
                    pool.run(inspect_source, path, digest, "application/pdf")
                    for path, digest in inputs
                )
            )
        return len(inputs) * rounds / (time.perf_counter() - started)
    finally:
        pool.close()


def report(label: str, inputs: list[tuple[str, str]], rounds: int) -> None:
    inspect_source(*inputs[0], "application/pdf")  # load libraries before timing
    bare = in_process(inputs, rounds)
    one = asyncio.run(sandboxed(inputs, rounds, 1))
    two = asyncio.run(sandboxed(inputs, rounds, 2))
    print(
        f"{label}: in-process {bare:.0f} docs/s; sandbox 1 worker {one:.0f} docs/s "
        f"(ratio {one / bare:.2f}); sandbox 2 workers {two:.0f} docs/s (ratio {two / bare:.2f})"
    )


def main() -> None:
    if CORPUS.is_dir():
        files = sorted(p for p in CORPUS.rglob("*.pdf"))
        report(f"corpus ({len(files)} PDFs)", _inputs(files), rounds=2)
    with tempfile.TemporaryDirectory() as temp:
        packet = [
            write_text_pdf(Path(temp) / f"d{i}.pdf", [f"doc {i} page {p}" for p in range(n)])
            for i, n in enumerate((4, 5, 3))
        ]
        report("12-page packet (3 PDFs)", _inputs(packet), rounds=100)


if __name__ == "__main__":
    main()
