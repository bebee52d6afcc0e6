"""A packet shows each source's layers as the source does (issue 36): a
group the source hides by default stays hidden after the merge, so the
signed packet never shows what the original hid."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pikepdf

from quire.assembler.merge import PacketSource, assemble_packet
from quire.testing.hostile import FONT, raw_pdf
from quire.testing.pdfs import write_text_pdf
from quire.validator.secondreader import visible_change

PDF = "application/pdf"


def _layered(path: Path, *, base_off: bool = False) -> Path:
    """A page that draws a large square in a layer its catalog hides."""
    hidden = b"/D << /BaseState /OFF >>" if base_off else b"/D << /OFF [6 0 R] >>"
    square = b"/OC /L1 BDC 0 g 50 50 500 700 re f EMC BT /F1 24 Tf 72 760 Td (visible) Tj ET"
    return raw_pdf(
        path,
        [
            b"<< /Type /Catalog /Pages 2 0 R /OCProperties << /OCGs [6 0 R] %s >> >>" % hidden,
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
            b"/Resources << /Font << /F1 5 0 R >> /Properties << /L1 6 0 R >> >> >>",
            b"<< /Length %d >>\nstream\n" % len(square) + square + b"\nendstream",
            FONT,
            b"<< /Type /OCG /Name (draft) >>",
        ],
    )


def _assemble(tmp_path: Path, sources: list[Path]) -> Path:
    packet = tmp_path / "packet.pdf"
    assemble_packet(
        [
            PacketSource(
                position=n,
                document_id=f"d{n}",
                sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
                content_type=PDF,
                path=str(path),
            )
            for n, path in enumerate(sources)
        ],
        str(packet),
        profile="",
        manifest_digest="0" * 64,
        workdir=str(tmp_path),
    )
    return packet


def test_a_layer_hidden_in_its_source_stays_hidden_in_the_packet(tmp_path: Path) -> None:
    source = _layered(tmp_path / "layered.pdf")
    packet = _assemble(tmp_path, [source])
    assert visible_change(str(source), str(packet)) == (0.0,)
    with pikepdf.open(packet) as pdf:
        [hidden] = pdf.Root.OCProperties.D.OFF
        assert str(hidden.Name) == "draft"


def test_layers_of_several_sources_merge_and_base_state_off_is_kept(tmp_path: Path) -> None:
    plain = write_text_pdf(tmp_path / "plain.pdf", ["cover"])
    first = _layered(tmp_path / "first.pdf")
    second = _layered(tmp_path / "second.pdf", base_off=True)
    packet = _assemble(tmp_path, [plain, first, second])
    with pikepdf.open(packet) as pdf:
        properties = pdf.Root.OCProperties
        assert len(properties.OCGs) == 2
        assert {group.objgen for group in properties.D.OFF} == {
            group.objgen for group in properties.OCGs
        }, "both sources' groups hidden: one by /OFF, one by /BaseState /OFF"


def test_group_lists_holding_numbers_or_names_do_not_stop_the_merge(tmp_path: Path) -> None:
    source = _layered(tmp_path / "odd.pdf")
    data = source.read_bytes().replace(
        b"/OCProperties << /OCGs [6 0 R] /D << /OFF [6 0 R] >> >>",
        b"/OCProperties << /OCGs [1 6 0 R /X] /D << /BaseState /OFF /ON [0 true] /OFF [6 0 R 7] >> >>",
    )
    source.write_bytes(data)
    packet = _assemble(tmp_path, [source])
    with pikepdf.open(packet) as pdf:
        assert [str(g.Name) for g in pdf.Root.OCProperties.D.OFF] == ["draft", "draft"]
