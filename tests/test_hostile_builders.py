"""The hostile-file builders are what they claim: a bomb inflates to exactly
its size in zeros, through a stream whose checksum holds, though it is built
without compressing every byte."""

from __future__ import annotations

import zlib
from pathlib import Path

import pikepdf
import pytest

from quire.testing.hostile import _deflated_zeros, flate_bomb


@pytest.mark.parametrize(("chunks", "chunk"), [(1, 1024), (2, 1024), (7, 4096), (3, 65536)])
def test_deflated_zeros_inflate_to_exactly_that_many_zeros(chunks: int, chunk: int) -> None:
    stream = _deflated_zeros(chunks * chunk, chunk=chunk)
    inflater = zlib.decompressobj()
    inflated = inflater.decompress(stream)
    assert inflater.eof, "the stream ends, and its Adler-32 matched (zlib checks it)"
    assert inflated == bytes(chunks * chunk)


def test_a_flate_bomb_is_small_and_its_outer_layer_holds_the_deflated_zeros(
    tmp_path: Path,
) -> None:
    bomb = flate_bomb(tmp_path / "bomb.pdf", gibibytes=2)
    assert bomb.stat().st_size < 64 * 1024
    with pikepdf.open(bomb) as pdf:
        stream = pdf.pages[0].obj["/Thumb"]
        assert [str(f) for f in stream.Filter] == ["/FlateDecode", "/FlateDecode"]
        inner = zlib.decompress(stream.read_raw_bytes())
    # The inner stream is what the test above inflates exactly, at 2 GiB.
    assert inner == _deflated_zeros(2 * 1024**3)
