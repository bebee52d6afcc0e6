"""A field shows in the packet as it shows in its source (issue 36): qpdf
lays every value out again on one line once any field needs an appearance,
so a multi-line value would be cut; a source that does not ask viewers to
regenerate keeps the appearances it came with."""

from __future__ import annotations

import hashlib
from pathlib import Path

from quire.assembler.merge import PacketSource, assemble_packet
from quire.testing.hostile import FONT, raw_pdf
from quire.validator.secondreader import visible_change


def _form(path: Path) -> Path:
    """Two text fields: a filled multi-line one with its own three-line
    appearance, and an empty one with none (which makes qpdf generate)."""
    lines = b" ".join(
        b"BT /F1 10 Tf 4 %d Td (line %d of the tenant's terms) Tj ET" % (48 - 14 * n, n + 1)
        for n in range(3)
    )
    return raw_pdf(
        path,
        [
            b"<< /Type /Catalog /Pages 2 0 R /AcroForm << /Fields [4 0 R 6 0 R] "
            b"/DA (/F1 10 Tf 0 g) /DR << /Font << /F1 5 0 R >> >> >> >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Annots [4 0 R 6 0 R] >>",
            b"<< /Type /Annot /Subtype /Widget /FT /Tx /Ff 4096 /T (terms) /P 3 0 R "
            b"/V (line 1 of the tenant's terms line 2 line 3) /DA (/F1 10 Tf 0 g) "
            b"/Rect [72 600 372 660] /AP << /N 7 0 R >> >>",
            FONT,
            b"<< /Type /Annot /Subtype /Widget /FT /Tx /T (empty) /P 3 0 R "
            b"/DA (/F1 10 Tf 0 g) /Rect [72 500 372 520] >>",
            b"<< /Type /XObject /Subtype /Form /BBox [0 0 300 60] "
            b"/Resources << /Font << /F1 5 0 R >> >> /Length %d >>\nstream\n"
            % len(lines)
            + lines
            + b"\nendstream",
        ],
    )


def test_a_multi_line_appearance_survives_the_merge(tmp_path: Path) -> None:
    source = _form(tmp_path / "form.pdf")
    packet = tmp_path / "packet.pdf"
    assemble_packet(
        [
            PacketSource(
                position=0,
                document_id="d",
                sha256=hashlib.sha256(source.read_bytes()).hexdigest(),
                content_type="application/pdf",
                path=str(source),
            )
        ],
        str(packet),
        profile="",
        manifest_digest="0" * 64,
        workdir=str(tmp_path),
    )
    assert visible_change(str(source), str(packet)) == (0.0,)
