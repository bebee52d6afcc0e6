"""Decompression bombs found in the raw bytes of a file no reader can parse.

A bomb behind damage that defeats even qpdf's recovery (no trailer, no root,
no page tree) is still a bomb: its refusal must say so
(``DECOMPRESSED_SIZE_EXCEEDED``), not hide it under ``MALFORMED_PDF``. Here
each ``stream``...``endstream`` span whose dictionary's ``/Filter`` names
only Flate filters (at most ``MAX_FILTERS``) is inflated, layer after layer,
each layer's output capped as the strict checks cap it (``decoding``), and
the decoded sizes are summed against the same cap. Nothing is kept but the
count; corrupt data ends that stream's count, as it would a viewer's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from quire.validator.decoding import MAX_FILTERS, DecodeError, Exceeded, capped, inflate

__all__ = ["inflates_past"]

_STREAM = re.compile(rb"(?<!end)stream\r?\n")
_END = re.compile(rb"endstream")
_OBJECT = re.compile(rb"\d+\s+\d+\s+obj\b")
_FILTER = re.compile(rb"/Filter\s*(\[[^\]]*\]|/[^\s/\[\]<>()]+)")
_NAME = re.compile(rb"/([^\s/\[\]<>()]+)")
_FLATE = frozenset({b"FlateDecode", b"Fl"})
_DICTIONARY_WINDOW = 4096


def _layers(head: bytes) -> int:
    """How many Flate filters the dictionary before a stream names, if it
    names Flate filters only (and no more than ``MAX_FILTERS``); else 0."""
    objects = list(_OBJECT.finditer(head))
    if objects:
        head = head[objects[-1].end() :]
    found = _FILTER.search(head)
    if found is None:
        return 0
    names = _NAME.findall(found.group(1))
    if not names or len(names) > MAX_FILTERS or any(n not in _FLATE for n in names):
        return 0
    return len(names)


def _flate_streams(data: bytes) -> Iterator[tuple[bytes, int]]:
    """(raw stream bytes, number of Flate layers) for each Flate-only stream."""
    at = 0
    while (start := _STREAM.search(data, at)) is not None:
        at = start.end()
        end = _END.search(data, start.end())
        if end is None:
            return
        layers = _layers(data[max(0, start.start() - _DICTIONARY_WINDOW) : start.start()])
        if layers:
            at = end.end()
            yield data[start.end() : end.start()], layers


def _decoded(raw: bytes, layers: int, budget: int) -> Iterable[bytes]:
    pieces: Iterable[bytes] = (raw,)
    for _ in range(layers):
        pieces = capped(inflate(pieces), budget)
    return pieces


def inflates_past(path: str, cap: int) -> bool:
    """Whether the file's Flate streams, read from its raw bytes, decode to
    more than ``cap`` bytes in all (any one layer past it counts)."""
    with open(path, "rb") as handle:
        data = handle.read()
    total = 0
    for raw, layers in _flate_streams(data):
        try:
            for piece in _decoded(raw, layers, cap - total):
                total += len(piece)
                if total > cap:
                    return True
        except Exceeded:
            return True
        except DecodeError:
            continue
    return False
