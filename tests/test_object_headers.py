"""``repair.object_headers`` finds an object header from its ``obj`` keyword
back, where a scan for the number in front would try the pattern at every
byte. It must find exactly what that scan finds: a header it missed would
hide an object defined twice from the second-reading check."""

from __future__ import annotations

import random
import re
from pathlib import Path

from conftest import CORPUS

from quire.validator.repair import UNKNOWN, object_header_spans, object_headers

_GAP = rb"(?:[\x00\t\n\x0c\r ]|%[^\r\n]*[\r\n])+"
SPECIFICATION = re.compile(
    rb"(?<![0-9])([0-9]{1,20})" + _GAP + rb"([0-9]{1,20})" + _GAP + rb"obj(?![A-Za-z0-9_])"
)
"""The header as a forward scan reads it, as readers take it: N (not part
of a longer number, leading zeros allowed), G, the keyword, each apart by
PDF white space (NUL among it) or comments."""


def _as_scanned(data: bytes) -> None:
    """Every header the forward scan finds is found, at the same place, with
    the same numbers or marked unknown; every header found with numbers is
    one the forward scan finds (a ``%`` earlier on a line, which only a
    forward reader can tell from a comment, marks a header unknown)."""
    found = {
        after: (number, generation) for number, generation, _s, after in object_header_spans(data)
    }
    specified = {m.end(): (int(m.group(1)), int(m.group(2))) for m in SPECIFICATION.finditer(data)}
    for after, numbers in specified.items():
        assert found.get(after) in (numbers, (UNKNOWN, UNKNOWN)), (data, after)
    for after, numbers in found.items():
        assert numbers == (UNKNOWN, UNKNOWN) or specified.get(after) == numbers, (data, after)


def _specified(data: bytes) -> list[tuple[bytes, bytes, int]]:
    return [
        (b"%d" % int(m.group(1)), b"%d" % int(m.group(2)), m.end())
        for m in SPECIFICATION.finditer(data)
    ]


def test_the_corpus_headers_are_found_as_the_forward_scan_finds_them() -> None:
    files = sorted(p for p in CORPUS.rglob("*") if p.is_file())[::4] if CORPUS.is_dir() else []
    for path in files:
        data = path.read_bytes()
        assert list(object_headers(data)) == _specified(data), path.name


def test_made_up_bytes_are_read_alike() -> None:
    """Numbers too long for a header, keywords inside words, every kind of
    whitespace, headers back to back and at either end of the data."""
    pieces = [
        b"0",
        b"7",
        b"12",
        b"99999",
        b"123456",
        b"12345678901",
        b" ",
        b"\n",
        b"\t",
        b"\r\n",
        b"\x0c",
        b"obj",
        b"endobj",
        b"objx",
        b"xobj",
        b"_",
        b"R",
        b"\x00",
        b"%",
        b"%c\n",
        b"\x0b",
        b"00012",
    ]
    chance = random.Random(37)
    for _ in range(20_000):
        data = b"".join(chance.choice(pieces) for _ in range(chance.randint(0, 24)))
        _as_scanned(data)


def test_a_header_is_where_the_bodies_compared_begin(tmp_path: Path) -> None:
    data = b"%PDF-1.7\n1 0 obj\n<< >>\nendobj\n 1  0\n\nobj (x) endobj 2 0 objx 3 0 obj"
    assert list(object_headers(data)) == [
        (b"1", b"0", data.index(b"obj") + 3),
        (b"1", b"0", data.index(b"\n\nobj") + 5),
        (b"3", b"0", len(data)),
    ]
