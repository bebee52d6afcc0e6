"""Decompression-bomb benchmark: for each standard filter and chain, a bomb
that decodes past the default cap (``PdfLimits.max_decompressed_bytes``),
timed through ``check_pdf``, with the ratio to the 2 s aim (<= 1.00 meets it).

    make bench-decoding

Not a timed test: timings depend on the machine.
"""

from __future__ import annotations

import base64
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import pikepdf

ROOT = Path(__file__).resolve().parent.parent

from quire.testing.bombs import (  # noqa: E402
    deflate_repeat,
    lzw_zeros,
    pdf_with_stream,
    run_length_literal,
    run_length_zeros,
)
from quire.validator.pdfchecks import PdfLimits, check_pdf  # noqa: E402

AIM_SECONDS = 2.0
CAP = PdfLimits().max_decompressed_bytes
SIZE = CAP + 4 * 1024 * 1024  # decoded size of every bomb: a multiple of 4 and of 128


def bombs() -> dict[str, Callable[[], tuple[bytes, list[str]]]]:
    text = b"abcd" * 64
    a85_text = base64.a85encode(text)  # no 'z': every group through the decoder
    return {
        "flate": lambda: (deflate_repeat(b"\0", SIZE), ["/FlateDecode"]),
        "flate-flate": lambda: (
            zlib.compress(deflate_repeat(b"\0", SIZE), 9),
            ["/FlateDecode", "/FlateDecode"],
        ),
        "lzw": lambda: (lzw_zeros(SIZE), ["/LZWDecode"]),
        "run-length": lambda: (run_length_zeros(SIZE), ["/RunLengthDecode"]),
        "ascii85 (z)": lambda: (b"z" * (SIZE // 4) + b"~>", ["/ASCII85Decode"]),
        "flate-ascii85": lambda: (
            deflate_repeat(a85_text, SIZE // len(text), b"~>"),
            ["/FlateDecode", "/ASCII85Decode"],
        ),
        "flate-ascii85 (z)": lambda: (
            deflate_repeat(b"z", SIZE // 4, b"~>"),
            ["/FlateDecode", "/ASCII85Decode"],
        ),
        "flate-asciihex": lambda: (
            deflate_repeat(b"00", SIZE, b">"),
            ["/FlateDecode", "/ASCIIHexDecode"],
        ),
        "flate-runlength": lambda: (
            deflate_repeat(b"\x81\x00", SIZE // 128, b"\x80"),
            ["/FlateDecode", "/RunLengthDecode"],
        ),
        "flate-lzw": lambda: (zlib.compress(lzw_zeros(SIZE), 9), ["/FlateDecode", "/LZWDecode"]),
        "asciihex-flate": lambda: (
            deflate_repeat(b"\0", SIZE).hex().encode() + b">",
            ["/ASCIIHexDecode", "/FlateDecode"],
        ),
        "ascii85-flate": lambda: (
            base64.a85encode(deflate_repeat(b"\0", SIZE)) + b"~>",
            ["/ASCII85Decode", "/FlateDecode"],
        ),
        "ascii85-runlength-flate": lambda: (
            base64.a85encode(run_length_literal(deflate_repeat(b"\0", SIZE))) + b"~>",
            ["/ASCII85Decode", "/RunLengthDecode", "/FlateDecode"],
        ),
    }


def main() -> None:
    limits = PdfLimits()
    print(f"cap {CAP} bytes, each bomb decodes to {SIZE}; aim {AIM_SECONDS:.1f} s")
    print(f"{'chain':<26}{'file':>12}{'seconds':>10}{'ratio':>8}  reason")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for name, build in bombs().items():
            data, names = build()
            path = Path(tmp) / "bomb.pdf"
            pdf_with_stream(path, data, names)
            del data
            with pikepdf.open(path, attempt_recovery=False) as pdf:
                start = time.perf_counter()
                reason = str(check_pdf(pdf, limits)[1])
                elapsed = time.perf_counter() - start
            worst = max(worst, elapsed)
            ratio = elapsed / AIM_SECONDS
            size = path.stat().st_size
            print(f"{name:<26}{size:>12}{elapsed:>10.2f}{ratio:>8.2f}  {reason or '(passed)'}")
    print(f"worst {worst:.2f} s, ratio {worst / AIM_SECONDS:.2f}")


if __name__ == "__main__":
    main()
