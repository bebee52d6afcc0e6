"""Structured sources rendered to PDF pages, in a sandbox worker.

Only the source's normalised values are drawn (numbers as exact decimals,
keys in sorted order, nested objects as dotted paths), never its raw text.
Two renderings: ``simple`` uses the standard Helvetica; ``strict`` embeds its
font (Bitstream Vera, shipped with ReportLab) and a fixed layout, for
documents that must look the same forever. The profile also says what the
merge does with PDF sources' form fields: ``simple`` and ``strict`` flatten
them into page content (a signed legal packet shows the values, and nobody
can change them afterwards); ``simple-fillable`` and ``strict-fillable`` keep
them as interactive fields, renamed per source (see ``merge.py``). ReportLab's invariant mode fixes
dates and ids, so the same source and profile always give the same bytes.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

__all__ = ["render_structured", "form_mode", "PROFILES"]

PROFILES = ("simple", "strict", "simple-fillable", "strict-fillable")
FILLABLE = "-fillable"
PAGE_WIDTH, PAGE_HEIGHT = 595.27, 841.89  # A4 in points
MARGIN = 56
LINE = 14
WRAP = 90


def _normalise(value: Any) -> str:
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return str(value)


def _rows(data: Any, prefix: str = "") -> list[tuple[str, str]]:
    """(dotted path, normalised value), depth first, keys sorted."""
    if isinstance(data, dict):
        rows: list[tuple[str, str]] = []
        for key in sorted(data):
            rows += _rows(data[key], f"{prefix}.{key}" if prefix else str(key))
        return rows
    if isinstance(data, list):
        rows = []
        for index, item in enumerate(data):
            rows += _rows(item, f"{prefix}[{index}]")
        return rows
    return [(prefix, _normalise(data))]


def form_mode(profile: str) -> str:
    """``flatten`` (the default) or ``merge``: what the packet does with form fields."""
    return "merge" if profile.endswith(FILLABLE) else "flatten"


def _font(profile: str) -> str:
    if profile.removesuffix(FILLABLE) != "strict":
        return "Helvetica"
    import reportlab
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.ttfonts import TTFont

    if "QuireVera" not in pdfmetrics.getRegisteredFontNames():
        path = Path(reportlab.__file__).parent / "fonts" / "Vera.ttf"
        pdfmetrics.registerFont(TTFont("QuireVera", str(path)))
    return "QuireVera"


def render_structured(json_path: str, output_path: str, profile: str, title: str) -> int:
    """Render one JSON source; returns the number of pages written."""
    from reportlab.pdfgen import canvas

    with open(json_path, "rb") as handle:
        data = json.load(handle, parse_float=Decimal, parse_int=Decimal)
    font = _font(profile)
    page = canvas.Canvas(
        output_path, pagesize=(PAGE_WIDTH, PAGE_HEIGHT), invariant=1, initialFontName=font
    )
    page.setTitle(title)
    page.setCreator("Quire")
    pages = 1
    y = PAGE_HEIGHT - MARGIN
    page.setFont(font, 13)
    page.drawString(MARGIN, y, title[:WRAP])
    y -= 2 * LINE
    page.setFont(font, 9)
    for path, value in _rows(data):
        text = f"{path}: {value}"
        for start in range(0, max(len(text), 1), WRAP):
            if y < MARGIN:
                page.showPage()
                page.setFont(font, 9)
                pages += 1
                y = PAGE_HEIGHT - MARGIN
            page.drawString(MARGIN, y, text[start : start + WRAP])
            y -= LINE
    page.showPage()
    page.save()
    return pages
