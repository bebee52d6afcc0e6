"""Totals, recomputed: each list's summed amounts and each declared total.

Read from the rendered text (``path: value`` rows, as the renderer draws
them) and from the source itself, so a renderer that drops, repeats or
misprints a number changes a total, and the two readings disagree.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path

__all__ = ["rendered_totals", "source_totals"]

ROW = re.compile(r"^(?P<path>[A-Za-z0-9_.\[\]-]+): (?P<value>\S.*)$")
SUMMED = ("amount", "tax")
"""Fields of a list's items whose sum is a total."""
DECLARED = ("total",)
"""Fields that declare a total."""
INDEX = re.compile(r"\[\d+\]")


def _totals(rows: list[tuple[str, str]]) -> dict[str, str]:
    sums: dict[str, Decimal] = {}
    declared: dict[str, str] = {}
    for path, value in rows:
        field = path.rsplit(".", 1)[-1]
        if field in SUMMED and INDEX.search(path):
            try:
                amount = Decimal(value)
            except InvalidOperation:
                continue
            key = f"sum {INDEX.sub('[]', path)}"
            sums[key] = sums.get(key, Decimal(0)) + amount
        elif field in DECLARED:
            declared[path] = value.strip()
    return {**{key: format(total, "f") for key, total in sums.items()}, **declared}


def rendered_totals(text: str) -> dict[str, str]:
    """Totals read back from a rendering's extracted text."""
    rows = []
    for line in text.splitlines():
        match = ROW.match(line.strip())
        if match:
            rows.append((match["path"], match["value"]))
    return _totals(rows)


def _flatten(data: object, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(data, dict):
        return [row for key in sorted(data) for row in _flatten(data[key], _join(prefix, key))]
    if isinstance(data, list):
        return [row for i, item in enumerate(data) for row in _flatten(item, f"{prefix}[{i}]")]
    if isinstance(data, Decimal):
        return [(prefix, format(data, "f"))]
    return [(prefix, "" if data is None else str(data))]


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def source_totals(source: Path) -> dict[str, str]:
    """The same totals, recomputed from the structured source itself."""
    data = json.loads(source.read_bytes(), parse_float=Decimal, parse_int=Decimal)
    return _totals(_flatten(data))
