"""The validator's streaming decoders: each standard filter and chain is
measured under a byte cap, ends at the end of its data, and cannot spin.

Fast unit tests: no stack, no sandbox. Bombs are built small (a few KiB that
decode past a small cap) so every test is bounded by design, not by a timer.
"""

from __future__ import annotations

import random
import zlib
from pathlib import Path
from typing import Any

import pikepdf
import pytest

from quire.testing.bombs import (
    a85_encode,
    hex_encode,
    lzw_encode,
    pdf_with_stream,
    run_length_encode,
    run_length_zeros,
)
from quire.validator import decoding
from quire.validator.decoding import (
    FLATE_CHECKSUM_WRONG,
    DecodeError,
    UnsupportedFilter,
    ascii85_decode,
    ascii_hex_decode,
    inflate,
    lzw_decode,
    measure,
    run_length_decode,
)
from quire.validator.pdfchecks import PdfLimits, check_pdf

SAMPLE = b"".join(b"line %d of a lease renewal, signed twice\n" % i for i in range(3000))


def joined(pieces: Any) -> bytes:
    return b"".join(pieces)


# --- FlateDecode ----------------------------------------------------------------


def test_trailing_byte_after_a_large_zlib_stream_ends_with_the_right_size() -> None:
    data = zlib.compress(bytes(200_000)) + b"X"  # > 64 KiB decoded, one junk byte
    assert measure(data, ["/FlateDecode"], [], 10**9) == 200_000
    assert joined(inflate([data])) == bytes(200_000)


@pytest.mark.parametrize("junk", [b"\n", b"\r\n", b"endstream", bytes(5000)])
def test_any_trailing_junk_is_data_not_input(junk: bytes) -> None:
    data = zlib.compress(SAMPLE) + junk
    assert joined(inflate([data])) == SAMPLE


def test_a_stream_split_at_every_boundary_gives_the_same_size() -> None:
    small = SAMPLE[:3000]
    data = zlib.compress(small) + b"\n"
    for cut in range(len(data) + 1):
        assert joined(inflate([data[:cut], data[cut:]])) == small, cut
    assert joined(inflate(data[i : i + 1] for i in range(len(data)))) == small


def test_concatenated_zlib_members_are_all_counted() -> None:
    members = [zlib.compress(bytes(100_000)), zlib.compress(SAMPLE), zlib.compress(b"tail")]
    data = b"".join(members)
    assert joined(inflate([data])) == bytes(100_000) + SAMPLE + b"tail"
    assert joined(inflate(data[i : i + 7] for i in range(0, len(data), 7))) == (
        bytes(100_000) + SAMPLE + b"tail"
    )


def test_a_truncated_flate_stream_counts_what_it_holds() -> None:
    data = zlib.compress(SAMPLE)[:-40]
    size = measure(data, ["/FlateDecode"], [], 10**9)
    assert 0 < size <= len(SAMPLE)


def test_corrupt_flate_data_is_a_decode_error() -> None:
    with pytest.raises(DecodeError):
        measure(b"\x78\x9c\xff\xff\xff\xff" * 10, ["/FlateDecode"], [], 10**9)


def test_pieces_stay_bounded() -> None:
    bomb = zlib.compress(bytes(5_000_000), 9)
    assert max(len(piece) for piece in inflate([bomb])) <= decoding.OUTPUT_CHUNK


def test_flate_with_a_predictor_counts_the_inflated_bytes() -> None:
    parms = pikepdf.Dictionary(Predictor=12, Columns=10)
    assert measure(zlib.compress(SAMPLE), ["/FlateDecode"], [parms], 10**9) == len(SAMPLE)


def _incremental(data: bytes, budget: int) -> tuple[int | str, set[str]]:
    """What the incremental decoder alone measures: size (or "error") and damage."""
    damage: set[str] = set()
    try:
        pieces = decoding.capped(inflate([data], damage), budget)
        size = sum(map(len, pieces))
    except decoding.Exceeded:
        return budget + 1, damage
    except DecodeError:
        return "error", damage
    return size, damage


def _measured(data: bytes, budget: int) -> tuple[int | str, set[str]]:
    damage: set[str] = set()
    try:
        return measure(data, ["/FlateDecode"], [], budget, damage=damage), damage
    except DecodeError:
        return "error", damage


FLATE_SHAPES = {
    "intact": zlib.compress(SAMPLE),
    "intact, empty": zlib.compress(b""),
    "no data": b"",
    "wrong check": zlib.compress(SAMPLE)[:-4] + b"\0\0\0\0",
    "check cut off": zlib.compress(SAMPLE)[:-2],
    "truncated": zlib.compress(SAMPLE)[:-40],
    "trailing junk": zlib.compress(SAMPLE) + b"\r\nendstream",
    "two members": zlib.compress(SAMPLE) + zlib.compress(b"tail"),
    "preset dictionary": zlib.compressobj(zdict=b"lease").compress(SAMPLE)
    + zlib.compressobj(zdict=b"lease").flush(),
    "window zlib refuses": bytes([0x88, 0x1C]) + zlib.compress(b"hello" * 20)[2:],
    "corrupt": b"\x78\x9c\xff\xff\xff\xff" * 10,
    "past the one-call bound": zlib.compress(bytes(2 * decoding.WHOLE_MEMBER_OUTPUT)),
    "past the one-call input": zlib.compress(random.Random(5).randbytes(300 * 1024)),
    "bomb": zlib.compress(bytes(5_000_000), 9),
}


@pytest.mark.parametrize("shape", sorted(FLATE_SHAPES))
@pytest.mark.parametrize("budget", [0, 100, len(SAMPLE), len(SAMPLE) + 1, 10**9])
def test_a_lone_flate_stream_measures_as_the_incremental_decoder_does(
    shape: str, budget: int
) -> None:
    """A lone Flate stream is inflated in one call when it is one intact
    member; whatever the data, the size, the damage named and the refusal
    are the incremental decoder's."""
    data = FLATE_SHAPES[shape]
    assert _measured(data, budget) == _incremental(data, budget)


def test_only_an_intact_lone_member_is_inflated_in_one_call() -> None:
    whole = decoding.whole_member_size
    assert whole(FLATE_SHAPES["intact"], 10**9) == len(SAMPLE)
    assert whole(FLATE_SHAPES["intact"], 100) is None  # past the budget: the decoder says
    for shape in ("wrong check", "check cut off", "truncated", "trailing junk", "two members"):
        assert whole(FLATE_SHAPES[shape], 10**9) is None, shape
    for shape in (
        "preset dictionary",
        "corrupt",
        "past the one-call bound",
        "past the one-call input",
        "no data",
    ):
        assert whole(FLATE_SHAPES[shape], 10**9) is None, shape


def test_a_stream_dictionary_read_by_the_graph_gives_the_same_size(tmp_path: Path) -> None:
    """``decoded_size`` takes a lone Flate filter from the graph's reading of
    the dictionary; the size and damage are those pikepdf's reading gives."""
    for shape, data in FLATE_SHAPES.items():
        path = pdf_with_stream(tmp_path / "s.pdf", data, ["/FlateDecode"])
        with pikepdf.open(path) as pdf:
            stream = pdf.pages[0].obj.Thumb
            outcomes = []
            for written in (None, {"/Filter": "/FlateDecode"}):
                damage: set[str] = set()
                try:
                    size: int | str = decoding.decoded_size(stream, 10**8, damage, written)
                except DecodeError:
                    size = "error"
                outcomes.append((size, damage))
            assert outcomes[0] == outcomes[1], shape


def test_a_stream_that_is_no_whole_member_is_read_and_tried_in_one_call_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone Flate stream the one call cannot take (here a wrong check) costs
    one try of it and one read of its raw data before the incremental decoder
    measures it: never a second try or read."""
    tries: list[int] = []
    real = decoding.whole_member_size

    def counted(raw: bytes, budget: int) -> int | None:
        tries.append(len(raw))
        return real(raw, budget)

    monkeypatch.setattr(decoding, "whole_member_size", counted)
    data = FLATE_SHAPES["wrong check"]
    path = pdf_with_stream(tmp_path / "s.pdf", data, ["/FlateDecode"])
    reads: list[int] = []

    class Counted:
        """The stream, its raw reads counted."""

        def __init__(self, stream: Any) -> None:
            self._stream = stream

        def read_raw_bytes(self) -> bytes:
            reads.append(1)
            return bytes(self._stream.read_raw_bytes())

        def __getattr__(self, name: str) -> Any:
            return getattr(self._stream, name)

    with pikepdf.open(path) as pdf:
        stream = Counted(pdf.pages[0].obj.Thumb)
        damage: set[str] = set()
        size = decoding.decoded_size(stream, 10**8, damage, {"/Filter": "/FlateDecode"})
    assert (size, damage) == (len(SAMPLE), {FLATE_CHECKSUM_WRONG})
    assert tries == [len(data)] and reads == [1]


# --- the other standard filters ------------------------------------------------


@pytest.mark.parametrize("early_change", [1, 0])
@pytest.mark.parametrize("data", [b"", b"a", SAMPLE, bytes(range(256)) * 40, bytes(50_000)])
def test_lzw_round_trips(early_change: int, data: bytes) -> None:
    encoded = lzw_encode(data, early_change)
    assert joined(lzw_decode([encoded], early_change)) == data
    split = (encoded[i : i + 3] for i in range(0, len(encoded), 3))
    assert joined(lzw_decode(split, early_change)) == data


def test_lzw_reads_early_change_from_decode_parms() -> None:
    encoded = lzw_encode(SAMPLE, 0)
    parms = pikepdf.Dictionary(EarlyChange=0)
    assert measure(encoded, ["/LZWDecode"], [parms], 10**9) == len(SAMPLE)


def test_lzw_code_beyond_the_table_is_a_decode_error() -> None:
    with pytest.raises(DecodeError):
        joined(lzw_decode([b"\x80\x7f\xff\xff\xff"]))


def test_ascii_hex_round_trips_with_whitespace_and_odd_digits() -> None:
    assert joined(ascii_hex_decode([hex_encode(SAMPLE)])) == SAMPLE
    assert joined(ascii_hex_decode([b"4 1\n4", b"2 7>ignored"])) == b"ABp"
    with pytest.raises(DecodeError):
        joined(ascii_hex_decode([b"4G>"]))


def test_ascii85_round_trips_split_anywhere() -> None:
    encoded = a85_encode(SAMPLE[:2000] + bytes(40) + b"xyz")
    expected = SAMPLE[:2000] + bytes(40) + b"xyz"
    for cut in range(0, len(encoded), 37):
        assert joined(ascii85_decode([encoded[:cut], encoded[cut:]])) == expected
    assert joined(ascii85_decode([b"<~" + encoded])) == expected


def test_run_length_round_trips_split_anywhere() -> None:
    data = SAMPLE[:1000] + bytes(1000) + b"xy" * 300
    encoded = run_length_encode(data)
    for cut in range(len(encoded) + 1):
        assert joined(run_length_decode([encoded[:cut], encoded[cut:]])) == data, cut


# --- caps, per filter and per chain ---------------------------------------------

CAP = 100_096


def _bombs() -> dict[str, tuple[bytes, list[str]]]:
    zeros = bytes(CAP * 5)  # a multiple of 128 and of 4: every encoding is exact
    return {
        "flate": (zlib.compress(zeros, 9), ["/FlateDecode"]),
        "flate-twice": (zlib.compress(zlib.compress(zeros, 9)), ["/Fl", "/Fl"]),
        "lzw": (lzw_encode(zeros), ["/LZWDecode"]),
        "ascii85": (b"z" * (len(zeros) // 4) + b"~>", ["/ASCII85Decode"]),
        "ascii-hex": (b"00" * len(zeros) + b">", ["/ASCIIHexDecode"]),
        "run-length": (run_length_zeros(len(zeros)), ["/RunLengthDecode"]),
        "hex-flate": (hex_encode(zlib.compress(zeros)), ["/AHx", "/Fl"]),
        "a85-rl-flate": (
            a85_encode(run_length_encode(zlib.compress(zeros))),
            ["/A85", "/RL", "/FlateDecode"],
        ),
        "flate-rl": (
            zlib.compress(run_length_zeros(len(zeros))),
            ["/FlateDecode", "/RunLengthDecode"],
        ),
        "flate-lzw": (zlib.compress(lzw_encode(zeros)), ["/FlateDecode", "/LZWDecode"]),
    }


BOMBS = _bombs()


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_each_filter_and_chain_stops_at_the_cap(name: str) -> None:
    data, names = BOMBS[name]
    assert measure(data, names, [], CAP) == CAP + 1
    assert measure(data, names, [], CAP * 5) == CAP * 5


def test_an_intermediate_stage_past_the_cap_ends_the_measurement() -> None:
    # Inflates to 4x the cap (+1), then hex-decodes to half of that: with a
    # cap of 3x, the first stage's output alone is past it.
    data = zlib.compress(b"00" * CAP * 2 + b">")
    assert measure(data, ["/FlateDecode", "/ASCIIHexDecode"], [], CAP * 3) == CAP * 3 + 1
    assert measure(data, ["/FlateDecode", "/ASCIIHexDecode"], [], CAP * 5) == CAP * 2


def test_unknown_filters_are_refused_before_any_work() -> None:
    with pytest.raises(UnsupportedFilter):
        measure(b"", ["/FlateDecode", "/NoSuchDecode"], [], CAP)
    with pytest.raises(UnsupportedFilter):
        measure(b"", ["/DCTDecode", "/FlateDecode"], [], CAP)  # a codec ends a chain
    with pytest.raises(UnsupportedFilter):
        measure(b"", ["/Crypt"] * (decoding.MAX_FILTERS + 1), [], CAP)


def test_image_codecs_count_their_bound_or_their_raw_size() -> None:
    image = pikepdf.Dictionary(
        Width=100, Height=50, BitsPerComponent=8, ColorSpace=pikepdf.Name.DeviceRGB
    )
    assert measure(b"jpeg" * 10, ["/DCTDecode"], [], CAP, image) == 15_000
    assert measure(b"jpeg" * 10, ["/DCTDecode"], [], CAP) == 40
    huge = pikepdf.Dictionary(Width=100_000, Height=100_000, BitsPerComponent=8)
    assert measure(b"jpeg", ["/JPXDecode"], [], CAP, huge) == CAP + 1
    fax = pikepdf.Dictionary(Width=17, Height=10)
    assert measure(b"fax", ["/CCITTFaxDecode"], [], CAP, fax) == 30
    wrapped = hex_encode(b"jpeg" * 10)
    assert measure(wrapped, ["/AHx", "/DCT"], [], CAP, image) == 15_000


# --- through check_pdf, on real PDFs ---------------------------------------------


def _reason(path: Path, limits: PdfLimits) -> str:
    with pikepdf.open(path, attempt_recovery=False) as pdf:
        return str(check_pdf(pdf, limits)[1])


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_a_bomb_in_any_filter_or_chain_is_decompressed_size_exceeded(
    name: str, tmp_path: Path
) -> None:
    data, names = BOMBS[name]
    path = pdf_with_stream(tmp_path / f"{name}.pdf", data, names)
    assert _reason(path, PdfLimits(max_decompressed_bytes=CAP)) == "DECOMPRESSED_SIZE_EXCEEDED"
    assert _reason(path, PdfLimits(max_decompressed_bytes=CAP * 10)) == ""


def test_an_image_bomb_by_its_dimensions_is_decompressed_size_exceeded(tmp_path: Path) -> None:
    path = pdf_with_stream(
        tmp_path / "image.pdf",
        b"\xff\xd8\xff\xd9",
        ["/DCTDecode"],
        Type=pikepdf.Name.XObject,
        Subtype=pikepdf.Name.Image,
        Width=60_000,
        Height=60_000,
        BitsPerComponent=8,
        ColorSpace=pikepdf.Name.DeviceRGB,
    )
    assert _reason(path, PdfLimits(max_decompressed_bytes=CAP)) == "DECOMPRESSED_SIZE_EXCEEDED"


def test_the_trailing_byte_file_passes(tmp_path: Path) -> None:
    data = zlib.compress(bytes(200_000)) + b"X"
    path = pdf_with_stream(tmp_path / "trailing.pdf", data, ["/FlateDecode"])
    assert _reason(path, PdfLimits()) == ""
    assert _reason(path, PdfLimits(max_decompressed_bytes=150_000)) == (
        "DECOMPRESSED_SIZE_EXCEEDED"
    )


def test_an_unknown_filter_stays_malformed(tmp_path: Path) -> None:
    path = pdf_with_stream(tmp_path / "unknown.pdf", b"abc", ["/NoSuchDecode"])
    assert _reason(path, PdfLimits()) == "MALFORMED_PDF"


# --- size-only last stages --------------------------------------------------------


def _outcome(stage: Any, chunks: list[bytes]) -> int | str:
    try:
        return sum(p if isinstance(p, int) else len(p) for p in stage(chunks))
    except DecodeError:
        return "error"


SIZE_PAIRS = [
    (decoding.ascii85_decode, decoding.ascii85_size, b"!#su8W-zz \n~ts9s8W-!<>v"),
    (decoding.ascii_hex_decode, decoding.ascii_hex_size, b"0aFg >\n9x"),
    (decoding.run_length_decode, decoding.run_length_size, bytes(range(256))),
]


@pytest.mark.parametrize(("decode", "size", "alphabet"), SIZE_PAIRS)
def test_size_only_stages_match_the_decoder_on_random_input(
    decode: Any, size: Any, alphabet: bytes
) -> None:
    import random

    rng = random.Random(7)
    for length in [0, 1, 2, 3, 4, 5, 6, 9, 10, 11, 40, 300, 40_000]:
        for _ in range(40 if length < 1000 else 3):
            data = bytes(rng.choice(alphabet) for _ in range(length))
            cut = rng.randrange(length + 1)
            chunks = [data[:cut], data[cut:]]
            assert _outcome(size, chunks) == _outcome(decode, chunks), (data, cut)


@pytest.mark.parametrize(
    ("decode", "size", "data"),
    [
        (ascii85_decode, decoding.ascii85_size, a85_encode(SAMPLE + bytes(4000) + b"\xff" * 99)),
        (ascii85_decode, decoding.ascii85_size, b"<~" + a85_encode(bytes(70_000) + b"x")),
        (ascii85_decode, decoding.ascii85_size, b's8W-!s8W-!zs8W-"~>'),  # overflow
        (ascii85_decode, decoding.ascii85_size, b"ab!!z!!!!!zq~>"),  # z ends a partial group
        (ascii85_decode, decoding.ascii85_size, b"!!!!!s~>"),
        (ascii85_decode, decoding.ascii85_size, b"!!!v!~>"),
        (ascii_hex_decode, decoding.ascii_hex_size, hex_encode(SAMPLE)),
        (ascii_hex_decode, decoding.ascii_hex_size, b"abc"),
        (ascii_hex_decode, decoding.ascii_hex_size, b"00" * 40_000 + b"0g>"),
        (run_length_decode, decoding.run_length_size, run_length_encode(SAMPLE + bytes(999))),
        (run_length_decode, decoding.run_length_size, b"\x05abc"),
        (run_length_decode, decoding.run_length_size, b"\x81"),
    ],
)
def test_size_only_stages_match_the_decoder_on_edge_cases(
    decode: Any, size: Any, data: bytes
) -> None:
    for cut in [0, 1, len(data) // 2, len(data) - 1, len(data)]:
        chunks = [data[:cut], data[cut:]]
        assert _outcome(size, chunks) == _outcome(decode, chunks), cut


def test_invalid_text_in_a_last_stage_is_still_a_decode_error() -> None:
    with pytest.raises(DecodeError):
        measure(b"00 4G>", ["/ASCIIHexDecode"], [], 10**9)
    with pytest.raises(DecodeError):
        measure(b"!!!v!~>", ["/ASCII85Decode"], [], 10**9)
    with pytest.raises(DecodeError):
        measure(zlib.compress(b's8W-"~>'), ["/FlateDecode", "/A85"], [], 10**9)
    assert measure(zlib.compress(b"z" * 1000 + b"~>"), ["/Fl", "/A85"], [], 10**9) == 4000


def test_flate_data_with_a_wrong_checksum_decodes_whole_and_is_named() -> None:
    """Viewers use Flate data whose Adler-32 is wrong or cut off as decoded;
    so does the measurement, and it names the damage."""
    plain = b"the whole text " * 5000
    good = zlib.compress(plain)
    for data, damaged in ((good, False), (good[:-4] + b"\0\0\0\0", True), (good[:-2], True)):
        damage: set[str] = set()
        assert b"".join(inflate([data], damage)) == plain
        assert damage == ({FLATE_CHECKSUM_WRONG} if damaged else set())
    damage = set()
    split = [good[:-3], good[-3:]]  # the check arrives in the next chunk
    assert b"".join(inflate(split, damage)) == plain and not damage


def test_a_zlib_header_with_a_window_zlib_refuses_stays_undecodable() -> None:
    """CINFO 8 (a 64 KiB window) is no zlib stream: zlib, qpdf and pdfium
    refuse it, and the measurement must not decode it raw."""
    body = zlib.compress(b"hello" * 20)[2:]
    header = bytes([0x88, 0x1C])
    assert (0x88 << 8 | 0x1C) % 31 == 0
    with pytest.raises(DecodeError):
        b"".join(inflate([header + body]))
