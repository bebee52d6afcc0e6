"""Assembling a packet, run inside a sandbox worker process.

Sources are re-hashed before use (a blob is trusted only under its digest),
structured ones rendered by the manifest's profile into the attempt's private
directory, everything appended strictly in manifest order, with one bookmark
per document and, in the document information, the manifest's digest and
every source's position and digest — so a verifier holding only the PDF can
tell which sources, in which order, made it. Saving is deterministic: the same
sources in the same order give the same bytes. qpdf streams page content from
the source files while writing, so memory does not grow with the packet.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from quire.assembler.forms import SourceCopy, carry_outline, finish_forms, kept_appearances
from quire.assembler.layers import carry_layers
from quire.assembler.render import form_mode, render_structured
from quire.filedigest import sha256_file
from quire.memoryfiles import InMemory, save_pdf

__all__ = ["MergedPacket", "PacketSource", "assemble_packet", "SourceDigestMismatch"]

PDF = "application/pdf"
MANIFEST_KEY = "/QuireManifestDigest"
SOURCES_KEY = "/QuireSources"


class SourceDigestMismatch(Exception):
    """A stored source no longer matches the digest it was accepted under."""


@dataclass(frozen=True)
class PacketSource:
    """One source as the merge reads it: at its manifest position, from ``path``."""

    position: int
    document_id: str
    sha256: str
    """The manifest's digest: of the uploaded bytes."""
    content_type: str
    path: str | InMemory
    """The file to read; sent as bytes (``InMemory``), it is an in-memory
    file's path by the time the worker reads it (``quire.memoryfiles``)."""
    normalized_sha256: str = ""
    """Set for a source the validator repaired: ``path`` holds its clean
    rewrite, whose digest this is."""

    @property
    def file(self) -> str:
        """``path`` in the worker, where it is always a path."""
        assert isinstance(self.path, str), "sent as bytes: read only in the worker"
        return self.path

    @property
    def read_sha256(self) -> str:
        """The digest of the bytes at ``path``."""
        return self.normalized_sha256 or self.sha256


@dataclass(frozen=True)
class MergedPacket:
    """The packet a merge wrote: its digest, size and pages."""

    sha256: str
    size_bytes: int
    page_count: int


def _as_pdf(source: PacketSource, profile: str, workdir: Path) -> str:
    if sha256_file(source.file)[0] != source.read_sha256:
        raise SourceDigestMismatch(source.read_sha256)
    if source.content_type == PDF:
        return source.file
    rendered = workdir / f"rendered-{source.position}.pdf"
    render_structured(source.file, str(rendered), profile, source.document_id)
    return str(rendered)


def _embedded(source: PacketSource) -> dict[str, object]:
    entry: dict[str, object] = {"position": source.position, "sha256": source.sha256}
    if source.normalized_sha256:
        entry["normalized_sha256"] = source.normalized_sha256
    return entry


def assemble_packet(
    sources: list[PacketSource],
    output_path: str,
    *,
    profile: str,
    manifest_digest: str,
    workdir: str,
) -> MergedPacket:
    import pikepdf  # lazy: heavy, and only needed in the sandbox

    ordered = sorted(sources, key=lambda s: s.position)
    with ExitStack() as open_sources, pikepdf.new() as packet:
        copies: list[tuple[str, SourceCopy]] = []
        for source in ordered:
            document = open_sources.enter_context(
                pikepdf.open(_as_pdf(source, profile, Path(workdir)))
            )
            copies.append(
                (source.document_id, SourceCopy.append(packet, document, source.position))
            )
        carry_layers(packet, (copy.source for _, copy in copies))
        finish_forms(
            packet,
            form_mode(profile),
            need_appearances=any(copy.need_appearances for _, copy in copies),
            kept=set().union(*(kept_appearances(packet, copy) for _, copy in copies)),
        )
        with packet.open_outline() as outline:
            for title, copy in copies:
                mark = pikepdf.OutlineItem(title, copy.start)
                mark.children.extend(carry_outline(copy))
                outline.root.append(mark)
        packet.docinfo[MANIFEST_KEY] = manifest_digest
        packet.docinfo[SOURCES_KEY] = json.dumps(
            [_embedded(s) for s in ordered],
            separators=(",", ":"),
        )
        page_count = len(packet.pages)
        save_pdf(packet, output_path, deterministic_id=True, compress_streams=True)
    digest, size = sha256_file(output_path)
    return MergedPacket(sha256=digest, size_bytes=size, page_count=page_count)
