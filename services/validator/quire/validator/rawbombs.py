"""Decompression bombs found in the raw bytes of a file no reader can parse.

A bomb behind damage that defeats even qpdf's recovery (no trailer, no root,
no page tree) is still a bomb: its refusal must say so
(``DECOMPRESSED_SIZE_EXCEEDED``), not hide it under ``MALFORMED_PDF``. Here
each ``stream``...``endstream`` span whose dictionary names only Flate
filters is inflated, chained as named, through the capped inflater
(``decoding.inflate``), and the decoded sizes are summed against the same
cap the strict checks use. Nothing is kept but the count; corrupt data ends
that stream's count, as it would a viewer's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from quire.validator.decoding import DecodeError, inflate

__all__ = ["inflates_past"]

_STREAM = re.compile(rb"stream\r?\n")
_END = re.compile(rb"endstream")
_DICTIONARY_WINDOW = 4096
_FILTERS = re.compile(rb"/(FlateDecode|Fl)\b")
_OTHER_FILTER = re.compile(
    rb"/(LZWDecode|LZW|ASCIIHexDecode|AHx|ASCII85Decode|A85|RunLengthDecode|RL|DCTDecode|DCT"
    rb"|JPXDecode|JBIG2Decode|CCITTFaxDecode|CCF|Crypt)\b"
)


def _flate_streams(data: bytes) -> Iterator[tuple[bytes, int]]:
    """(raw stream bytes, number of Flate layers) for each Flate-only stream."""
    at = 0
    while (start := _STREAM.search(data, at)) is not None:
        end = _END.search(data, start.end())
        if end is None:
            return
        # "endstream" itself matches "stream": step past it.
        at = end.end()
        if data[start.start() - 3 : start.start()] == b"end":
            continue
        head = data[max(0, start.start() - _DICTIONARY_WINDOW) : start.start()]
        head = head[head.rfind(b"obj") + 3 :] if b"obj" in head else head
        layers = len(_FILTERS.findall(head))
        if layers and not _OTHER_FILTER.search(head):
            yield data[start.end() : end.start()], layers


def inflates_past(path: str, cap: int) -> bool:
    """Whether the file's Flate streams, read from its raw bytes, decode to
    more than ``cap`` bytes in all."""
    with open(path, "rb") as handle:
        data = handle.read()
    total = 0
    for raw, layers in _flate_streams(data):
        pieces: Iterator[bytes] = iter((raw,))
        for _ in range(layers):
            pieces = inflate(pieces)
        try:
            for piece in pieces:
                total += len(piece)
                if total > cap:
                    return True
        except DecodeError:
            continue
    return False
