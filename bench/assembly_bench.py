"""Assembly and signing benchmark: pages assembled per second, signatures per
second, and the assembler's peak memory for 100- and 500-page packets (each
measured in a fresh process, so the figure is that packet's alone).

    make bench-assembly
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from quire.assembler.merge import PacketSource, assemble_packet  # noqa: E402
from quire.blobstore import sha256_file  # noqa: E402
from quire.testing.pdfs import write_text_pdf  # noqa: E402

PAGES_PER_DOCUMENT = 100


def _documents(folder: Path, pages: int) -> list[PacketSource]:
    sources = []
    for index in range(pages // PAGES_PER_DOCUMENT):
        path = write_text_pdf(
            folder / f"doc-{index}.pdf",
            [
                f"document {index} page {p} " + os.urandom(3000).hex()
                for p in range(PAGES_PER_DOCUMENT)
            ],
        )
        sources.append(
            PacketSource(index, f"doc-{index}", sha256_file(path)[0], "application/pdf", str(path))
        )
    return sources


def _assemble(sources: list[PacketSource], out: str, workdir: str, results) -> None:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    packet = assemble_packet(
        sources, out, profile="simple", manifest_digest="0" * 64, workdir=workdir
    )
    elapsed = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    results.put((packet.page_count, elapsed, peak_kib, packet.size_bytes))


def measure(folder: Path, pages: int) -> tuple[int, float, int, int]:
    sources = _documents(folder, pages)
    context = multiprocessing.get_context("forkserver")
    results = context.Queue()
    worker = context.Process(
        target=_assemble, args=(sources, str(folder / f"packet-{pages}.pdf"), str(folder), results)
    )
    worker.start()
    outcome = results.get(timeout=600)
    worker.join()
    return outcome


def signatures_per_second(folder: Path, rounds: int) -> float:
    from quire.database import Database
    from quire.signer import tables
    from quire.signer.keystore import GeneratedKeys, KeyStore
    from quire.signer.signing import sign_packet

    database = Database(f"sqlite:///{folder / 'signer.db'}", tables.metadata)
    database.create_schema()
    key = KeyStore(database, GeneratedKeys(folder / "keys")).ensure_active_key()
    packet = folder / "packet-100.pdf"
    digest = sha256_file(packet)[0]
    sign_packet(str(packet), digest, str(folder / "warm.pdf"), key.key_path, key.cert_path)
    started = time.perf_counter()
    for index in range(rounds):
        sign_packet(str(packet), digest, str(folder / f"s{index}.pdf"), key.key_path, key.cert_path)
    return rounds / (time.perf_counter() - started)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="quire-assembly-") as temp:
        folder = Path(temp)
        figures = {}
        for pages in (100, 500):
            (folder / str(pages)).mkdir()
            figures[pages] = measure(folder / str(pages), pages)
            count, elapsed, peak_kib, size = figures[pages]
            print(
                f"{count}-page packet ({size / 1e6:.1f} MB): {count / elapsed:.0f} pages/s, "
                f"peak RSS {peak_kib / 1024:.0f} MiB"
            )
        ratio = figures[500][2] / figures[100][2]
        print(f"peak memory 500 pages / 100 pages: {ratio:.2f} (5x the pages)")
        (folder / "packet-100.pdf").symlink_to(folder / "100" / "packet-100.pdf")
        print(f"signatures: {signatures_per_second(folder, 20):.1f} per second (100-page packet)")


if __name__ == "__main__":
    main()
