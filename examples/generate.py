"""Regenerates the example packet in examples/lease-renewal (run from the repository root).

.venv/bin/python examples/generate.py
"""

from __future__ import annotations

from pathlib import Path

from quire.testing.pdfs import write_text_pdf

PACKET = {
    "cover-letter.pdf": ["Lease renewal - cover letter"],
    "renewal-terms.pdf": [
        "Lease renewal - terms, page 1 of 2",
        "Lease renewal - terms, page 2 of 2",
    ],
    "signature-page.pdf": ["Lease renewal - signature page"],
}

if __name__ == "__main__":
    folder = Path(__file__).resolve().parent / "lease-renewal"
    for name, pages in PACKET.items():
        write_text_pdf(folder / name, pages)
