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

from quire.validator.pdfchecks import PdfLimits, check_pdf

AIM_SECONDS = 2.0
CAP = PdfLimits().max_decompressed_bytes
SIZE = CAP + 4 * 1024 * 1024  # decoded size of every bomb: a multiple of 4 and of 128
PIECE = 1 << 20


def deflate_repeat(unit: bytes, count: int, tail: bytes = b"") -> bytes:
    """zlib of ``unit * count + tail``, built without holding it whole."""
    compressor = zlib.compressobj(9)
    block = unit * max(1, PIECE // len(unit))
    per_block = len(block) // len(unit)
    parts = []
    whole, rest = divmod(count, per_block)
    for _ in range(whole):
        parts.append(compressor.compress(block))
    parts.append(compressor.compress(unit * rest + tail))
    parts.append(compressor.flush())
    return b"".join(parts)


def lzw_zeros(count: int) -> bytes:
    """PDF LZW (EarlyChange 1) of ``count`` zero bytes: the encoder's phrases
    are runs of zeros one longer each time, so it is built phrase by phrase."""
    out = bytearray()
    bits = nbits = 0
    width = 9

    def emit(code: int) -> None:
        nonlocal bits, nbits
        bits = (bits << width) | code
        nbits += width
        while nbits >= 8:
            nbits -= 8
            out.append((bits >> nbits) & 0xFF)
        bits &= (1 << nbits) - 1

    def code(length: int) -> int:
        return 0 if length == 1 else 258 + length - 2

    emit(256)
    entries, longest, remaining = 256, 1, count
    while remaining > longest:
        emit(code(longest))
        remaining -= longest
        entries += 1
        longest += 1
        if entries + 2 >= (1 << width) and width < 12:
            width += 1
        if entries + 2 >= 4096 - 1:
            emit(256)
            entries, longest, width = 256, 1, 9
    if remaining:
        emit(code(remaining))
        if entries + 3 >= (1 << width) and width < 12:
            width += 1
    emit(257)
    if nbits:
        out.append((bits << (8 - nbits)) & 0xFF)
    return bytes(out)


def run_length_zeros(count: int) -> bytes:
    return b"\x81\x00" * (count // 128) + b"\x80"


def run_length_literal(data: bytes) -> bytes:
    """RunLengthDecode data of literal runs only."""
    runs = (data[i : i + 128] for i in range(0, len(data), 128))
    return b"".join(bytes((len(run) - 1,)) + run for run in runs) + b"\x80"


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


def write_pdf(path: Path, data: bytes, names: list[str]) -> None:
    pdf = pikepdf.new()
    pdf.add_blank_page(page_size=(200, 200))
    stream = pikepdf.Stream(pdf, data)
    filters = [pikepdf.Name(name) for name in names]
    stream.stream_dict.Filter = filters[0] if len(filters) == 1 else pikepdf.Array(filters)
    pdf.pages[0].obj.Thumb = pdf.make_indirect(stream)
    pdf.save(path, compress_streams=False, stream_decode_level=pikepdf.StreamDecodeLevel.none)


def main() -> None:
    limits = PdfLimits()
    print(f"cap {CAP} bytes, each bomb decodes to {SIZE}; aim {AIM_SECONDS:.1f} s")
    print(f"{'chain':<26}{'file':>12}{'seconds':>10}{'ratio':>8}  reason")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for name, build in bombs().items():
            data, names = build()
            path = Path(tmp) / "bomb.pdf"
            write_pdf(path, data, names)
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
