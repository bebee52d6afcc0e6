"""One rendering measured: pages, each page's text, tile fingerprints of the
selected pages, and its totals.

The renderer is the assembler's own (``quire.assembler.render``), called as
its sandbox worker calls it. Text comes from ``pdftotext -raw`` (content
order, one drawn string per line); images from ``pdftoppm`` in grey without
anti-aliasing, at a low resolution, so a fingerprint moves only when drawn
pixels move. A page's image is cut into a grid of tiles, each hashed: a
changed tile says where on the page something moved.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.eval.totals import rendered_totals, source_totals
from quire.assembler.render import PAGE_HEIGHT, PAGE_WIDTH, render_structured

__all__ = ["Grid", "Measurement", "measure", "tile_box"]

TIMEOUT_SECONDS = 60
FONTS = Path(__file__).with_name("fonts.conf")
"""The only fonts the rasterizer sees (DejaVu): a font family installed
later on the machine does not change a fingerprint."""


@dataclass(frozen=True)
class Grid:
    rows: int
    columns: int
    dpi: int


@dataclass(frozen=True)
class Measurement:
    pages: int
    text: list[str]
    """Each page's text, sha256."""
    tiles: dict[int, list[str]]
    """Selected page (1-based) -> its tiles' hashes, row by row."""
    totals: dict[str, str]
    """Read back from the rendered text."""
    source_totals: dict[str, str]
    """Recomputed from the source."""

    def as_json(self) -> dict[str, object]:
        return {
            "pages": self.pages,
            "text": self.text,
            "tiles": {str(page): tiles for page, tiles in sorted(self.tiles.items())},
            "totals": self.totals,
            "source_totals": self.source_totals,
        }


def measure(
    source: Path, document: str, profile: str, image_pages: list[int], grid: Grid
) -> Measurement:
    with tempfile.TemporaryDirectory(prefix="quire-eval-") as folder:
        pdf = Path(folder) / "rendered.pdf"
        pages = render_structured(str(source), str(pdf), profile, document)
        text = _run(["pdftotext", "-raw", "-enc", "UTF-8", str(pdf), "-"]).decode()
        per_page = text.split("\f")[:pages]
        selected = sorted({page if page > 0 else pages + 1 + page for page in image_pages})
        tiles = {page: _tiles(pdf, page, grid, Path(folder)) for page in selected if page <= pages}
    return Measurement(
        pages=pages,
        text=[hashlib.sha256(page.encode()).hexdigest() for page in per_page],
        tiles=tiles,
        totals=rendered_totals(text),
        source_totals=source_totals(source),
    )


def _run(command: list[str], env: dict[str, str] | None = None) -> bytes:
    return subprocess.run(
        command, check=True, capture_output=True, timeout=TIMEOUT_SECONDS, env=env
    ).stdout


def _tiles(pdf: Path, page: int, grid: Grid, folder: Path) -> list[str]:
    prefix = folder / f"page{page}"
    _run(
        [
            "pdftoppm", "-r", str(grid.dpi), "-gray", "-aa", "no", "-aaVector", "no",
            "-f", str(page), "-l", str(page), "-singlefile", str(pdf), str(prefix),
        ],
        env={**os.environ, "FONTCONFIG_FILE": str(FONTS)},
    )  # fmt: skip
    width, height, pixels = _read_pgm((folder / f"page{page}.pgm").read_bytes())
    hashes = []
    for row in range(grid.rows):
        top, bottom = row * height // grid.rows, (row + 1) * height // grid.rows
        for column in range(grid.columns):
            left, right = column * width // grid.columns, (column + 1) * width // grid.columns
            tile = b"".join(
                pixels[y * width + left : y * width + right] for y in range(top, bottom)
            )
            hashes.append(hashlib.sha256(tile).hexdigest()[:16])
    return hashes


def _read_pgm(data: bytes) -> tuple[int, int, bytes]:
    """A binary PGM (P5, 8-bit): width, height, pixels."""
    fields: list[bytes] = []
    position = 0
    while len(fields) < 4:
        while data[position : position + 1].isspace():
            position += 1
        if data[position : position + 1] == b"#":
            position = data.index(b"\n", position) + 1
            continue
        end = position
        while not data[end : end + 1].isspace():
            end += 1
        fields.append(data[position:end])
        position = end
    if fields[0] != b"P5" or fields[3] != b"255":
        raise ValueError("pdftoppm did not write an 8-bit grey PGM")
    width, height = int(fields[1]), int(fields[2])
    pixels = data[position + 1 : position + 1 + width * height]
    return width, height, pixels


def tile_box(index: int, grid: Grid) -> tuple[float, float, float, float]:
    """Tile ``index`` (row by row) as (left, top, right, bottom) in points from
    the page's top-left corner."""
    row, column = divmod(index, grid.columns)
    width, height = PAGE_WIDTH / grid.columns, PAGE_HEIGHT / grid.rows
    return (column * width, row * height, (column + 1) * width, (row + 1) * height)
