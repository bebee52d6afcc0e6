"""Assembly: structured sources rendered by profile, deterministically;
documents merged by position with a bookmark each; the manifest and every
source's digest recorded inside the PDF."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pikepdf
import pypdf
import pytest

from quire.assembler.merge import PacketSource, SourceDigestMismatch, assemble_packet
from quire.assembler.render import render_structured
from quire.blobstore import sha256_file
from quire.testing.pdfs import write_text_pdf

INVOICE = {
    "invoice_number": "INV-7",
    "currency": "EUR",
    "lines": [{"description": "freight", "quantity": "3", "unit_price": "0.10"}],
    "total": "0.30",
}


def _json(path: Path, body: dict[str, object]) -> Path:
    path.write_text(json.dumps(body))
    return path


@pytest.mark.parametrize("profile", ["simple", "strict"])
def test_the_same_structured_source_renders_to_the_same_bytes(tmp_path: Path, profile: str) -> None:
    source = _json(tmp_path / "invoice.json", INVOICE)
    render_structured(str(source), str(tmp_path / "a.pdf"), profile, "invoice")
    render_structured(str(source), str(tmp_path / "b.pdf"), profile, "invoice")
    assert (tmp_path / "a.pdf").read_bytes() == (tmp_path / "b.pdf").read_bytes()
    text = pypdf.PdfReader(tmp_path / "a.pdf").pages[0].extract_text()
    assert "total: 0.30" in text and "lines[0].unit_price: 0.10" in text


def test_the_strict_profile_embeds_its_font_and_simple_does_not(tmp_path: Path) -> None:
    source = _json(tmp_path / "invoice.json", INVOICE)
    fonts = {}
    for profile in ("simple", "strict"):
        out = tmp_path / f"{profile}.pdf"
        render_structured(str(source), str(out), profile, "invoice")
        with pikepdf.open(out) as pdf:
            embedded = [
                "/FontFile2" in font.get("/FontDescriptor", {})
                for font in pdf.pages[0].Resources.Font.values()
            ]
        fonts[profile] = embedded
    assert fonts == {"simple": [False], "strict": [True]}


def _sources(tmp_path: Path) -> list[PacketSource]:
    cover = write_text_pdf(tmp_path / "cover.pdf", ["cover page"])
    terms = write_text_pdf(tmp_path / "terms.pdf", ["terms page 1", "terms page 2"])
    invoice = _json(tmp_path / "invoice.json", INVOICE)
    items = [
        ("terms", terms, "application/pdf"),
        ("invoice", invoice, "application/json"),
        ("cover", cover, "application/pdf"),
    ]
    positions = {"cover": 0, "invoice": 1, "terms": 2}
    return [
        PacketSource(positions[name], name, sha256_file(path)[0], kind, str(path))
        for name, path, kind in items
    ]


@pytest.mark.parametrize("profile", ["simple", "strict"])
def test_a_mixed_packet_is_merged_by_position_with_bookmarks_and_provenance(
    tmp_path: Path, profile: str
) -> None:
    sources = _sources(tmp_path)
    out = tmp_path / "packet.pdf"
    packet = assemble_packet(
        sources, str(out), profile=profile, manifest_digest="m" * 64, workdir=str(tmp_path)
    )
    assert packet.page_count == 4
    pages = [p.extract_text() for p in pypdf.PdfReader(out).pages]
    assert pages[0].strip() == "cover page"
    assert "invoice_number: INV-7" in pages[1]
    assert [p.strip() for p in pages[2:]] == ["terms page 1", "terms page 2"]
    with pikepdf.open(out) as pdf:
        with pdf.open_outline() as outline:
            marks = [(item.title, pdf.pages.index(item.destination[0])) for item in outline.root]
        assert marks == [("cover", 0), ("invoice", 1), ("terms", 2)]
        assert str(pdf.docinfo["/QuireManifestDigest"]) == "m" * 64
        recorded = json.loads(str(pdf.docinfo["/QuireSources"]))
    assert recorded == [
        {"position": s.position, "sha256": s.sha256}
        for s in sorted(sources, key=lambda s: s.position)
    ]
    again = tmp_path / "again.pdf"
    assemble_packet(
        sources, str(again), profile=profile, manifest_digest="m" * 64, workdir=str(tmp_path)
    )
    assert hashlib.sha256(again.read_bytes()).hexdigest() == packet.sha256


def test_a_source_whose_bytes_changed_is_refused(tmp_path: Path) -> None:
    sources = _sources(tmp_path)
    Path(sources[0].path).write_bytes(b"%PDF-1.7 tampered")
    with pytest.raises(SourceDigestMismatch):
        assemble_packet(
            sources,
            str(tmp_path / "x.pdf"),
            profile="simple",
            manifest_digest="m" * 64,
            workdir=str(tmp_path),
        )
