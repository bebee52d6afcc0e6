"""Only the document's own encryption makes a source ENCRYPTED_PDF (issue
36): an attachment-only encryption is an attachment, under the attachment
policy, and a malformed encryption dictionary is damage."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pikepdf

from quire.reasons import ReasonCode
from quire.testing.hostile import FONT, raw_pdf
from quire.testing.pdfs import write_text_pdf
from quire.validator.encryption import ENCRYPTED_ATTACHMENT, ENCRYPTION_MALFORMED
from quire.validator.inspection import inspect_source
from quire.validator.pdfchecks import PdfLimits

ATTACHMENT_ONLY = (
    "pyhanko/internal/common-test-utils/src/pyhanko_testing_commons/test_data/data/pdf/"
    "embedded-encrypted-nocf.pdf"
)


def _verdict(path: Path, limits: PdfLimits | None = None) -> tuple[str, str]:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    finding = inspect_source(
        str(path), digest, "application/pdf", limits, str(path.with_suffix(".clean"))
    )
    return str(finding.reason), finding.detail


def _with_trailer_encrypt(path: Path, encrypt: bytes) -> Path:
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
        FONT,
    ]
    data = raw_pdf(path, objects).read_bytes()
    path.write_bytes(data.replace(b"/Root 1 0 R", b"/Root 1 0 R /Encrypt " + encrypt, 1))
    return path


def test_a_document_encrypted_with_a_password_is_encrypted_pdf(tmp_path: Path) -> None:
    plain = write_text_pdf(tmp_path / "plain.pdf", ["secret"])
    locked = tmp_path / "locked.pdf"
    with pikepdf.open(plain) as pdf:
        pdf.save(locked, encryption=pikepdf.Encryption(owner="o", user="u", aes=True, R=6))
    assert _verdict(locked) == (ReasonCode.ENCRYPTED_PDF, "")


def test_an_encryption_of_attachments_only_is_an_attachment(tmp_path: Path) -> None:
    """Strings and streams in the clear, a filter for embedded files only:
    viewers show the pages without a password."""
    key = b"<" + b"11" * 48 + b">"
    encrypt = (
        b"<< /Filter /Standard /V 4 /R 4 /Length 128 /P -4 /O %s /U %s "
        b"/CF << /StdCF << /CFM /AESV2 /AuthEvent /EFOpen /Length 16 >> >> "
        b"/StmF /Identity /StrF /Identity /EFF /StdCF >>"
    ) % (key, key)
    path = _with_trailer_encrypt(tmp_path / "attachment.pdf", encrypt)
    assert _verdict(path) == (ReasonCode.ACTIVE_CONTENT, ENCRYPTED_ATTACHMENT)
    allowed = _verdict(path, PdfLimits(allow_active_content=True))
    assert allowed == (ReasonCode.ENCRYPTED_PDF, ENCRYPTED_ATTACHMENT), (
        "allowed attachments, but one that cannot be opened cannot be checked"
    )


def test_a_corpus_file_whose_only_encrypted_part_is_an_attachment(corpus: Path) -> None:
    assert _verdict(corpus / ATTACHMENT_ONLY) == (ReasonCode.ACTIVE_CONTENT, ENCRYPTED_ATTACHMENT)


def test_an_encrypt_entry_that_is_not_a_dictionary_is_damage(tmp_path: Path) -> None:
    path = _with_trailer_encrypt(tmp_path / "broken.pdf", b"42")
    assert _verdict(path) == (ReasonCode.MALFORMED_PDF, ENCRYPTION_MALFORMED)
