"""Sniffing as viewers do: a PDF header anywhere in the first 1,024 bytes, with
or without the dash, is a PDF at both gates (admission's first look and the
validator's content sniff); ``%PDF`` further in, or without a version, is not.
qpdf opens such files, and the assembled packet starts with a clean header."""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
from pathlib import Path

import pytest

from quire.admission.uploads.typesniff import check_declared_type, looks_like
from quire.assembler.merge import PacketSource, assemble_packet
from quire.blobstore import sha256_file
from quire.client import AdmissionClient, PacketItem
from quire.errors import InvalidInput
from quire.jobs import state_name
from quire.pdfheader import HEADER_WINDOW, has_pdf_header, pdf_header_offset
from quire.reasons import ReasonCode
from quire.testing.pdfs import text_pdf
from quire.validator.inspection import PDF_TYPE, inspect_source

PDF = "application/pdf"
JSON = "application/json"


def _pdf_bytes(text: str = "sniffed") -> bytes:
    buffer = io.BytesIO()
    with text_pdf([text]) as pdf:
        pdf.save(buffer, deterministic_id=True)
    return buffer.getvalue()


def _without_dash(raw: bytes) -> bytes:
    """``%PDF-1.3\\n`` becomes ``%PDF1.3\\n\\n``: same length, so every offset holds."""
    assert raw.startswith(b"%PDF-1.3\n")
    return b"%PDF1.3\n\n" + raw[len(b"%PDF-1.3\n") :]


def _write(path: Path, data: bytes) -> tuple[str, str]:
    path.write_bytes(data)
    return str(path), hashlib.sha256(data).hexdigest()


HEADER_VARIANTS = [
    b"%PDF-1.7\n",
    b"%PDF1.4\n",
    b"%PDF-2.0\r\n",
    b"\xef\xbb\xbf%PDF-1.4\n",
    b" \t\r\n%PDF-1.4\n",
    b"\x00\x01\x02junk\n%PDF-1.5\n",
    b"J" * (HEADER_WINDOW - len(b"%PDF-1.4")) + b"%PDF-1.4",
    b"J" * (HEADER_WINDOW - len(b"%PDF1.4")) + b"%PDF1.4",
    b"%PDF-14\n",
    b"%PDF.1.4\r\n",
    b"%PDF-2.0%\xe2\xe3\xcf\xd3\n",
]

NOT_PDF = [
    b"",
    b"%PDF",
    b"%PDF-",
    b"%PDF--1.4\n",
    b"%PDF-X.Y\n",
    b"hello %pdf-1.4\n",
    b"J" * (HEADER_WINDOW - len(b"%PDF-1.4") + 1) + b"%PDF-1.4",
    b"J" * 1030 + b"%PDF-1.4\n",
]


@pytest.mark.parametrize("head", HEADER_VARIANTS)
def test_the_header_variants_viewers_open_pass_the_door(head: bytes) -> None:
    assert has_pdf_header(head)
    assert looks_like(PDF, head + b"rest of the file")
    check_declared_type(PDF, head)


@pytest.mark.parametrize("head", NOT_PDF)
def test_what_is_no_pdf_header_is_refused_at_the_door(head: bytes) -> None:
    assert not has_pdf_header(head)
    with pytest.raises(InvalidInput) as refused:
        check_declared_type(PDF, head)
    assert refused.value.reason == ReasonCode.TYPE_MISMATCH


def test_the_header_offset_is_where_the_header_starts() -> None:
    assert pdf_header_offset(b"%PDF-1.4") == 0
    assert pdf_header_offset(b"abc%PDF1.7") == 3
    assert pdf_header_offset(b"abc%PDF-x %PDF-1.7") == 10
    assert pdf_header_offset(b"no header") is None


def test_random_binary_with_pdf_deep_inside_is_no_pdf_at_either_gate(tmp_path: Path) -> None:
    data = bytearray(random.Random(7).randbytes(4096))
    data = data.replace(b"%PDF", b"%PDx")
    data[2000:2008] = b"%PDF-1.4"
    head = bytes(data[:HEADER_WINDOW])
    assert not looks_like(PDF, head)
    path, digest = _write(tmp_path / "random.bin", bytes(data))
    finding = inspect_source(path, digest, PDF)
    assert finding.reason == ReasonCode.TYPE_MISMATCH
    assert finding.detected_type != PDF_TYPE


def test_json_is_still_json_at_both_gates(tmp_path: Path) -> None:
    body = b'\xef\xbb\xbf \n{"note": "%PDF-1.4 inside a string is not a header... far in"}'
    assert looks_like(JSON, body)
    assert looks_like(JSON, b"[1, 2]") and not looks_like(JSON, b"%PDF-1.4\n")
    plain = json.dumps({"invoice": "INV-1", "text": "%PDF-1.4"}).encode()
    path, digest = _write(tmp_path / "invoice.json", plain)
    finding = inspect_source(path, digest, JSON)
    assert (finding.detected_type, finding.reason) == (JSON, "")


def test_json_declared_but_a_pdf_is_a_type_mismatch(tmp_path: Path) -> None:
    path, digest = _write(tmp_path / "x.json", b"junk\n" + _pdf_bytes())
    assert inspect_source(path, digest, JSON) == inspect_source(path, digest, JSON)
    finding = inspect_source(path, digest, JSON)
    assert (finding.detected_type, finding.reason) == (PDF_TYPE, ReasonCode.TYPE_MISMATCH)


PREFIXES = {
    "junk": b"\x00\x01\x02 some junk a mailer left\r\n",
    "bom": b"\xef\xbb\xbf",
    "whitespace": b" \t\r\n\n",
    "junk-up-to-the-window": b"J" * (HEADER_WINDOW - len(b"%PDF-1.3")),
}


@pytest.mark.parametrize("prefix", list(PREFIXES), ids=list(PREFIXES))
def test_a_real_pdf_after_a_prefix_is_inspected_and_passes(tmp_path: Path, prefix: str) -> None:
    path, digest = _write(tmp_path / "prefixed.pdf", PREFIXES[prefix] + _pdf_bytes())
    finding = inspect_source(path, digest, PDF)
    assert (finding.detected_type, finding.page_count, finding.reason) == (PDF_TYPE, 1, "")


def test_a_real_pdf_after_too_much_junk_is_a_type_mismatch(tmp_path: Path) -> None:
    path, digest = _write(tmp_path / "late.pdf", b"J" * 1030 + _pdf_bytes())
    finding = inspect_source(path, digest, PDF)
    assert finding.reason == ReasonCode.TYPE_MISMATCH
    assert not looks_like(PDF, (tmp_path / "late.pdf").read_bytes()[:HEADER_WINDOW])


def test_a_real_pdf_without_the_dash_is_sniffed_as_a_pdf(tmp_path: Path) -> None:
    path, digest = _write(tmp_path / "nodash.pdf", _without_dash(_pdf_bytes()))
    finding = inspect_source(path, digest, PDF)
    assert finding.detected_type == PDF_TYPE
    assert finding.reason != ReasonCode.TYPE_MISMATCH


def test_a_file_that_begins_with_the_header_is_typed_without_libmagic(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """libmagic costs the validator as much as opening a small PDF. A body that
    begins with the header cannot be JSON (no JSON text begins with ``%``), the
    one verdict of libmagic's the sniff would take over the header, so it is
    not asked; a body with anything before the header still is."""
    from quire.validator import inspection

    real = inspection._magic()  # noqa: SLF001 - the libmagic handle the sniff asks
    asked: list[int] = []

    class Counting:
        def from_buffer(self, head: bytes) -> str:
            asked.append(len(head))
            return str(real.from_buffer(head))  # type: ignore[attr-defined]

    monkeypatch.setattr(inspection, "_magic", Counting)
    for name, data in {"dash": _pdf_bytes(), "nodash": _without_dash(_pdf_bytes())}.items():
        path, digest = _write(tmp_path / f"{name}.pdf", data)
        finding = inspect_source(path, digest, PDF)
        assert finding.detected_type == PDF_TYPE, name
        assert finding.reason != ReasonCode.TYPE_MISMATCH, name
        assert real.from_buffer(data) != JSON, "libmagic would not have said otherwise"  # type: ignore[attr-defined]
    assert asked == []
    path, digest = _write(tmp_path / "bom.pdf", PREFIXES["bom"] + _pdf_bytes())
    assert inspect_source(path, digest, PDF).reason == ""
    assert len(asked) == 1, "a header after other bytes is sniffed as before"


def test_qpdf_opens_the_variants(tmp_path: Path) -> None:
    import pikepdf

    raw = _pdf_bytes()
    for name, data in {
        "junk": PREFIXES["junk"] + raw,
        "window": PREFIXES["junk-up-to-the-window"] + raw,
        "nodash": _without_dash(raw),
    }.items():
        (tmp_path / f"{name}.pdf").write_bytes(data)
        with pikepdf.open(tmp_path / f"{name}.pdf") as pdf:
            assert len(pdf.pages) == 1, name


def test_the_assembled_packet_starts_with_a_clean_header(tmp_path: Path) -> None:
    import pikepdf

    raw = _pdf_bytes()
    sources = []
    for position, (name, data) in enumerate(
        [
            ("junk", PREFIXES["junk"] + raw),
            ("nodash", _without_dash(raw)),
            ("bom", b"\xef\xbb\xbf" + raw),
        ]
    ):
        path = tmp_path / f"{name}.pdf"
        path.write_bytes(data)
        sources.append(PacketSource(position, name, sha256_file(path)[0], PDF, str(path)))
    out = tmp_path / "packet.pdf"
    packet = assemble_packet(
        sources, str(out), profile="simple", manifest_digest="m" * 64, workdir=str(tmp_path)
    )
    assert packet.page_count == 3
    assert out.read_bytes().startswith(b"%PDF-1.")
    with pikepdf.open(out, attempt_recovery=False) as merged:
        assert len(merged.pages) == 3 and not merged.get_warnings()


@pytest.mark.stack
@pytest.mark.parametrize(
    "variant",
    [
        "junk-prefixed",
        "no-dash",
    ],
)
async def test_viewer_openable_headers_are_signed_with_a_clean_header(
    stack, client: AdmissionClient, tmp_path: Path, variant: str
) -> None:  # type: ignore[no-untyped-def]
    raw = _pdf_bytes(f"{variant} {os.getpid()}")
    data = PREFIXES["junk"] + raw if variant == "junk-prefixed" else _without_dash(raw)
    source = tmp_path / f"{variant}.pdf"
    source.write_bytes(data)
    digest = (await client.upload(source)).sha256
    job = await client.submit([PacketItem("d", digest)])
    final = await client.wait(job.name, timeout=60)
    assert state_name(final.state) == "COMPLETED", final
    signed = tmp_path / "signed.pdf"
    await client.download(job.name, signed)
    assert signed.read_bytes().startswith(b"%PDF-")
