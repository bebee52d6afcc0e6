"""Builders of filter-encoded data and decompression bombs, for the decoding
tests (small bombs) and ``bench/decoding_bench.py`` (bombs past the real cap).

Encoders here are written for building test data, not for speed; the
``*_repeat`` / ``*_zeros`` builders make large outputs without holding them.
"""

from __future__ import annotations

import base64
import zlib
from pathlib import Path
from typing import Any

import pikepdf

PIECE = 1 << 20


class _LzwCodes:
    """PDF LZW code packing: MSB first, 9 to 12 bits a code."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.bits = 0
        self.nbits = 0
        self.width = 9

    def emit(self, code: int) -> None:
        self.bits = (self.bits << self.width) | code
        self.nbits += self.width
        while self.nbits >= 8:
            self.nbits -= 8
            self.out.append((self.bits >> self.nbits) & 0xFF)
        self.bits &= (1 << self.nbits) - 1

    def finish(self) -> bytes:
        self.emit(257)
        if self.nbits:
            self.out.append((self.bits << (8 - self.nbits)) & 0xFF)
        return bytes(self.out)


def lzw_encode(data: bytes, early_change: int = 1) -> bytes:
    """PDF LZW: clear code first, 9-12 bit codes, EOD at the end."""
    codes = _LzwCodes()

    def reset() -> dict[bytes, int]:
        return {bytes((i,)): i for i in range(256)}

    table = reset()
    codes.emit(256)
    current = b""
    for byte in data:
        candidate = current + bytes((byte,))
        if candidate in table:
            current = candidate
            continue
        codes.emit(table[current])
        table[candidate] = len(table) + 2
        # The decoder's table runs one entry behind the encoder's.
        if len(table) + 1 + early_change >= (1 << codes.width) and codes.width < 12:
            codes.width += 1
        if len(table) + 2 >= 4096 - 1:
            codes.emit(256)
            table = reset()
            codes.width = 9
        current = bytes((byte,))
    if current:
        codes.emit(table[current])
        # The decoder adds an entry for this code too; keep widths in step.
        if len(table) + 2 + early_change >= (1 << codes.width) and codes.width < 12:
            codes.width += 1
    return codes.finish()


def lzw_zeros(count: int) -> bytes:
    """PDF LZW (EarlyChange 1) of ``count`` zero bytes: the encoder's phrases
    are runs of zeros one longer each time, so it is built phrase by phrase."""
    codes = _LzwCodes()

    def code(length: int) -> int:
        return 0 if length == 1 else 258 + length - 2

    codes.emit(256)
    entries, longest, remaining = 256, 1, count
    while remaining > longest:
        codes.emit(code(longest))
        remaining -= longest
        entries += 1
        longest += 1
        if entries + 2 >= (1 << codes.width) and codes.width < 12:
            codes.width += 1
        if entries + 2 >= 4096 - 1:
            codes.emit(256)
            entries, longest, codes.width = 256, 1, 9
    if remaining:
        codes.emit(code(remaining))
        if entries + 3 >= (1 << codes.width) and codes.width < 12:
            codes.width += 1
    return codes.finish()


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


def run_length_encode(data: bytes) -> bytes:
    out = bytearray()
    i = 0
    while i < len(data):
        run = 1
        while i + run < len(data) and run < 128 and data[i + run] == data[i]:
            run += 1
        if run > 1:
            out += bytes((257 - run, data[i]))
            i += run
        else:
            literal = data[i : i + 128]
            out += bytes((len(literal) - 1,)) + literal
            i += len(literal)
    return bytes(out + b"\x80")


def run_length_zeros(count: int) -> bytes:
    """RunLengthDecode data of ``count`` zero bytes (a multiple of 128)."""
    return b"\x81\x00" * (count // 128) + b"\x80"


def run_length_literal(data: bytes) -> bytes:
    """RunLengthDecode data of literal runs only."""
    runs = (data[i : i + 128] for i in range(0, len(data), 128))
    return b"".join(bytes((len(run) - 1,)) + run for run in runs) + b"\x80"


def hex_encode(data: bytes) -> bytes:
    text = data.hex().encode()
    return b"\n".join(text[i : i + 64] for i in range(0, len(text), 64)) + b">"


def a85_encode(data: bytes) -> bytes:
    return base64.a85encode(data, wrapcol=72) + b"~>"


def pdf_with_stream(path: Path, data: bytes, names: list[str], **extra: Any) -> Path:
    """A one-page PDF whose page thumbnail is a stream of ``data`` (as it is,
    not re-encoded) under the filters ``names``, plus ``extra`` dictionary keys."""
    pdf = pikepdf.new()
    pdf.add_blank_page(page_size=(200, 200))
    stream = pikepdf.Stream(pdf, data)
    filters = [pikepdf.Name(name) for name in names]
    stream.stream_dict.Filter = filters[0] if len(filters) == 1 else pikepdf.Array(filters)
    for key, value in extra.items():
        stream.stream_dict[f"/{key}"] = value
    pdf.pages[0].obj.Thumb = pdf.make_indirect(stream)
    pdf.save(path, compress_streams=False, stream_decode_level=pikepdf.StreamDecodeLevel.none)
    return path
