"""What rules may read from a document, extracted in a sandbox worker: the
text of a PDF (bounded), its filled form fields, or a structured source's
data (numbers as exact decimals). Nothing here is ever logged."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

__all__ = ["DocumentFacts", "extract_facts", "MAX_TEXT_CHARS"]

MAX_TEXT_CHARS = 2_000_000
MAX_PAGES_READ = 2000


@dataclass(frozen=True)
class DocumentFacts:
    """What rules may read of the source at ``position``: a PDF's text and form
    fields, or a structured source's ``data``."""

    position: int
    content_type: str
    text: str = ""
    fields: dict[str, str] = field(default_factory=dict)
    data: Any = None


def _pdf_facts(path: str) -> tuple[str, dict[str, str]]:
    from pypdf import PdfReader  # lazy: only the sandbox reads content

    reader = PdfReader(path, strict=False)
    parts: list[str] = []
    size = 0
    for page in reader.pages[:MAX_PAGES_READ]:
        text = page.extract_text() or ""
        parts.append(text)
        size += len(text)
        if size >= MAX_TEXT_CHARS:
            break
    fields: dict[str, str] = {}
    for name, value in (reader.get_fields() or {}).items():
        filled = value.get("/V") if hasattr(value, "get") else None
        fields[str(name)] = "" if filled is None else str(filled)
    return "\n".join(parts)[:MAX_TEXT_CHARS], fields


def extract_facts(path: str, position: int, content_type: str) -> DocumentFacts:
    if content_type == "application/json":
        with open(path, "rb") as handle:
            data = json.load(handle, parse_float=Decimal, parse_int=Decimal)
        return DocumentFacts(position, content_type, data=data)
    text, fields = _pdf_facts(path)
    return DocumentFacts(position, content_type, text=text, fields=fields)
