"""Merging sources into one PDF, run inside a sandbox worker process.

Sources are re-hashed before use (a blob is trusted only under its digest),
appended strictly in the order given (the manifest's positions), and saved
deterministically: the same sources in the same order give the same bytes.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass

from quire.blobstore import sha256_file

__all__ = ["MergedPacket", "merge_sources", "SourceDigestMismatch"]


class SourceDigestMismatch(Exception):
    """A stored source no longer matches the digest it was accepted under."""


@dataclass(frozen=True)
class MergedPacket:
    sha256: str
    size_bytes: int
    page_count: int


def merge_sources(sources: list[tuple[str, str]], output_path: str) -> MergedPacket:
    """Append each ``(path, sha256)`` in order into one PDF written to ``output_path``."""
    import pikepdf  # lazy: heavy, and only needed in the sandbox

    # qpdf copies stream data lazily, at save: sources stay open until then.
    with ExitStack() as open_sources, pikepdf.new() as packet:
        for path, sha256 in sources:
            if sha256_file(path)[0] != sha256:
                raise SourceDigestMismatch(sha256)
            source = open_sources.enter_context(pikepdf.open(path))
            packet.pages.extend(source.pages)
        page_count = len(packet.pages)
        packet.save(output_path, deterministic_id=True, compress_streams=True)
    digest, size = sha256_file(output_path)
    return MergedPacket(sha256=digest, size_bytes=size, page_count=page_count)
