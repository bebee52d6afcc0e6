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


def write_form_pdf(path: Path, page_texts: list[str], fields: dict[str, str]) -> Path:
    """Text pages plus an AcroForm of filled text fields on the first page."""
    with text_pdf(page_texts) as pdf:
        page = pdf.pages[0]
        widgets = []
        for index, (name, value) in enumerate(fields.items()):
            widget = pdf.make_indirect(
                pikepdf.Dictionary(
                    Type=pikepdf.Name.Annot,
                    Subtype=pikepdf.Name.Widget,
                    FT=pikepdf.Name.Tx,
                    T=pikepdf.String(name),
                    V=pikepdf.String(value),
                    Rect=[72, 600 - 30 * index, 300, 620 - 30 * index],
                    P=page.obj,
                )
            )
            widgets.append(widget)
        page.obj.Annots = pdf.make_indirect(pikepdf.Array(widgets))
        pdf.Root.AcroForm = pdf.make_indirect(pikepdf.Dictionary(Fields=pikepdf.Array(widgets)))
        pdf.save(path, deterministic_id=True)
    return path
