"""Small, real PDFs built for tests: each page carries a known line of text."""

from __future__ import annotations

from pathlib import Path

import pikepdf

__all__ = ["text_pdf", "write_text_pdf"]


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def text_pdf(page_texts: list[str]) -> pikepdf.Pdf:
    """A PDF with one page per text, each drawn in Helvetica."""
    pdf = pikepdf.new()
    font = pdf.make_indirect(
        pikepdf.Dictionary(
            Type=pikepdf.Name.Font, Subtype=pikepdf.Name.Type1, BaseFont=pikepdf.Name.Helvetica
        )
    )
    for text in page_texts:
        content = f"BT /F1 18 Tf 72 720 Td ({_escape(text)}) Tj ET".encode()
        page = pikepdf.Page(
            pikepdf.Dictionary(
                Type=pikepdf.Name.Page,
                MediaBox=[0, 0, 612, 792],
                Resources=pikepdf.Dictionary(Font=pikepdf.Dictionary(F1=font)),
                Contents=pdf.make_stream(content),
            )
        )
        pdf.pages.append(page)
    return pdf


def write_text_pdf(path: Path, page_texts: list[str]) -> Path:
    with text_pdf(page_texts) as pdf:
        pdf.save(path, deterministic_id=True)
    return path
