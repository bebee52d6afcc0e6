"""Bombs read from the raw bytes of a file no reader can parse (issue 36):
each Flate layer capped, filters read from the stream's own /Filter, and
no shape of dictionary or stray keyword hides one."""

from __future__ import annotations

import zlib
from pathlib import Path

from quire.validator.rawbombs import inflates_past

CAP = 8 * 1024 * 1024


def _bomb(layers: int = 2) -> bytes:
    data = bytes(4 * CAP)
    for _ in range(layers):
        data = zlib.compress(data, 9)
    return data


def _file(tmp_path: Path, body: bytes) -> str:
    path = tmp_path / "raw.pdf"
    path.write_bytes(b"%PDF-1.7\n" + body + b"\n%%EOF\n")
    return str(path)


def _stream(dictionary: bytes, data: bytes) -> bytes:
    return b"6 0 obj\n" + dictionary + b"\nstream\n" + data + b"\nendstream\nendobj\n"


def test_a_plain_bomb_is_found_and_a_small_stream_is_not(tmp_path: Path) -> None:
    bomb = _stream(b"<< /Filter [/FlateDecode /FlateDecode] >>", _bomb())
    assert inflates_past(_file(tmp_path, bomb), CAP)
    small = _stream(b"<< /Filter /FlateDecode >>", zlib.compress(b"x" * 1000))
    assert not inflates_past(_file(tmp_path, small), CAP)


def test_what_a_dictionary_or_a_stray_keyword_holds_hides_nothing(tmp_path: Path) -> None:
    bomb = _bomb()
    shapes = {
        "stray endstream before": b"% endstream\n"
        + _stream(b"<< /Filter [/FlateDecode /FlateDecode] >>", bomb),
        "other keys naming Fl": _stream(b"<< /X /Fl /Filter [/Fl /Fl] >>", bomb),
        "(obj) in a string": _stream(b"<< /T (obj) /Filter [/Fl /Fl] >>", bomb),
    }
    for name, body in shapes.items():
        assert inflates_past(_file(tmp_path, body), CAP), name


def test_a_middle_layer_past_the_cap_counts(tmp_path: Path) -> None:
    """The last layer small, the one before it huge (a tiny member, then
    zeros the inflater reads through as junk): every layer is capped."""
    middle = zlib.compress(b"tiny") + bytes(2 * CAP)
    body = _stream(b"<< /Filter [/FlateDecode /FlateDecode] >>", zlib.compress(middle, 9))
    assert inflates_past(_file(tmp_path, body), CAP)


def test_endless_filter_chains_are_not_followed(tmp_path: Path) -> None:
    names = b"/Fl" * 1300
    body = _stream(b"<< /Filter [" + names + b"] >>", b"x") + names * 5 + b" stream\nxendstream"
    assert not inflates_past(_file(tmp_path, body), CAP)
