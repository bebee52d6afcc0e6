"""Generated work shaped like the real thing, one builder per workload class.

- ``contract``: a 3-document packet, a few text pages each.
- ``lease``: one long document (200 pages by default).
- ``scan``: image-heavy pages, each a full-page greyscale JPEG (DCTDecode image
  XObject) with a line of text on top, as a scanner would produce.
- ``invoice``: a structured JSON invoice, ruleset ``logistics-invoice``; a small
  share carries a wrong total and is rejected by the rules (TOTAL_MISMATCH).
- ``malformed``: damaged and hostile PDFs from tests/damaged.py and
  tests/hostile.py that a validator must refuse (the AMBIGUOUS damage, active
  content, a page-tree loop).

Every job gets its own bytes (the text carries the class and index), so no
job is served by another's upload.
"""

from __future__ import annotations

import io
import json
import random
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from pathlib import Path

import pikepdf

from quire.pipeline import State
from quire.testing import damaged, hostile
from quire.testing.pdfs import text_pdf, write_text_pdf

__all__ = ["CLASSES", "Source", "Work", "Shape", "build"]

CLASSES = ("contract", "lease", "scan", "invoice", "malformed")
PDF = "application/pdf"
JSON = "application/json"


@dataclass(frozen=True)
class Shape:
    """Sizes of the generated work; the tiny profile shrinks them."""

    lease_pages: int = 200
    scan_pages: int = 4
    scan_pixels: tuple[int, int] = (850, 1100)  # ~100 dpi letter
    invoice_lines: tuple[int, int] = (20, 200)
    wrong_total_share: float = 0.05


@dataclass(frozen=True)
class Source:
    document_id: str
    path: Path
    content_type: str


@dataclass(frozen=True)
class Work:
    cls: str
    index: int
    sources: tuple[Source, ...]
    ruleset: str = ""
    expect: str = State.COMPLETED  # what a correct pipeline ends this job in


def build(cls: str, index: int, folder: Path, shape: Shape) -> Work:
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(f"{cls}-{index}")
    builder = {
        "contract": _contract,
        "lease": _lease,
        "scan": _scan,
        "invoice": _invoice,
        "malformed": _malformed,
    }[cls]
    return builder(index, folder, shape, rng)


def _contract(index: int, folder: Path, _shape: Shape, rng: random.Random) -> Work:
    sources = []
    for doc, title in enumerate(("agreement", "schedule", "signature page")):
        pages = rng.randint(2, 6)
        texts = [f"contract {index} {title} page {p + 1} of {pages}" for p in range(pages)]
        path = write_text_pdf(folder / f"contract-{index}-{doc}.pdf", texts)
        sources.append(Source(f"doc-{doc}", path, PDF))
    return Work("contract", index, tuple(sources))


def _lease(index: int, folder: Path, shape: Shape, _rng: random.Random) -> Work:
    texts = [
        f"lease {index} clause page {p + 1} of {shape.lease_pages}"
        for p in range(shape.lease_pages)
    ]
    path = write_text_pdf(folder / f"lease-{index}.pdf", texts)
    return Work("lease", index, (Source("lease", path, PDF),))


@cache
def _scan_image(variant: int, size: tuple[int, int]) -> bytes:
    """A greyscale JPEG that compresses like a scanned page: paper noise,
    ruled text-like bands and a darker margin."""
    from PIL import Image, ImageDraw, ImageFilter

    width, height = size
    rng = random.Random(variant)
    noise = Image.effect_noise((width, height), 24 + variant).point(lambda v: 200 + v // 5)
    draw = ImageDraw.Draw(noise)
    y = 80
    while y < height - 80:
        length = rng.randint(width // 3, width - 160)
        draw.rectangle((80, y, 80 + length, y + 9), fill=rng.randint(20, 70))
        y += rng.randint(18, 30)
    draw.rectangle((0, 0, 24, height), fill=120)
    image = noise.filter(ImageFilter.GaussianBlur(0.7))
    out = io.BytesIO()
    image.save(out, "JPEG", quality=75)
    return out.getvalue()


def _scan(index: int, folder: Path, shape: Shape, _rng: random.Random) -> Work:
    width, height = shape.scan_pixels
    texts = [f"scan {index} page {p + 1}" for p in range(shape.scan_pages)]
    path = folder / f"scan-{index}.pdf"
    with text_pdf(texts) as pdf:
        for number, page in enumerate(pdf.pages):
            jpeg = _scan_image((index + number) % 4, shape.scan_pixels)
            image = pdf.make_stream(
                jpeg,
                Type=pikepdf.Name.XObject,
                Subtype=pikepdf.Name.Image,
                Width=width,
                Height=height,
                ColorSpace=pikepdf.Name.DeviceGray,
                BitsPerComponent=8,
                Filter=pikepdf.Name.DCTDecode,
            )
            page.Resources.XObject = pikepdf.Dictionary(Im0=image)
            drawn = b"q 612 0 0 792 0 0 cm /Im0 Do Q\n" + page.Contents.read_bytes()
            page.Contents = pdf.make_stream(drawn)
        pdf.save(path, deterministic_id=True)
    return Work("scan", index, (Source("scan", path, PDF),))


def _invoice(index: int, folder: Path, shape: Shape, rng: random.Random) -> Work:
    lines = []
    total = Decimal("0")
    for number in range(rng.randint(*shape.invoice_lines)):
        quantity = Decimal(rng.randint(1, 5))
        unit_price = Decimal(rng.randint(5, 300)) / 100
        total += quantity * unit_price
        lines.append(
            {
                "description": f"freight leg {number} pallet {rng.randint(1, 999)}",
                "quantity": str(quantity),
                "unit_price": str(unit_price),
            }
        )
    wrong = rng.random() < shape.wrong_total_share
    if wrong:
        total += Decimal("0.01")
    body = {
        "invoice_number": f"INV-{index:06d}",
        "currency": rng.choice(("EUR", "USD", "GBP", "CHF")),
        "seller": {"name": "Carrier GmbH", "tax_id": "DE123456789"},
        "lines": lines,
        "tax_rate": "0",
        "total": str(total),
    }
    path = folder / f"invoice-{index}.json"
    path.write_text(json.dumps(body))
    expect = State.REJECTED if wrong else State.COMPLETED
    return Work("invoice", index, (Source("invoice", path, JSON),), "logistics-invoice", expect)


MALFORMED = (
    *damaged.AMBIGUOUS.items(),
    ("javascript-on-open", (hostile.javascript_on_open, "ACTIVE_CONTENT")),
    ("page-tree-loop", (hostile.page_tree_loop, "MALFORMED_PDF")),
)


def _malformed(index: int, folder: Path, _shape: Shape, _rng: random.Random) -> Work:
    name, (builder, _reason) = MALFORMED[index % len(MALFORMED)]
    path = builder(folder / f"malformed-{index}-{name}.pdf")
    return Work("malformed", index, (Source(name, path, PDF),), expect=State.REJECTED)
