"""Decoded size of a PDF stream, measured by streaming decoders under a byte cap.

Every standard filter is decoded incrementally: the raw bytes are fed in
slices of at most ``INPUT_CHUNK`` and each stage yields pieces of bounded
size, so a chain of filters never holds a whole decoded stream in memory and
never runs past the cap. Every loop in here consumes input or produces output
on each turn (or stops), so a hostile stream cannot make the measurement spin.
The one shortcut: a stream under a lone Flate filter that is one intact zlib
member, and is small (``WHOLE_MEMBER_INPUT``, ``WHOLE_MEMBER_OUTPUT``), is
inflated in one call (most content streams are); any other is left to the
incremental decoder, which then measures it as it always did.

The image codecs are not decoded: they end a chain, and their output is
bounded by the image dictionary (``/Width`` × ``/Height`` × bits per component
× components), which is counted when present; otherwise their input is.
"""

from __future__ import annotations

import base64
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

__all__ = [
    "DecodeError",
    "UnsupportedFilter",
    "measure",
    "decoded_size",
    "whole_member_size",
    "inflate",
    "capped",
    "Exceeded",
    "FLATE_CHECKSUM_WRONG",
    "lzw_decode",
    "ascii_hex_decode",
    "ascii85_decode",
    "run_length_decode",
    "ascii_hex_size",
    "ascii85_size",
    "run_length_size",
]

INPUT_CHUNK = 16 * 1024
OUTPUT_CHUNK = 64 * 1024
"""Largest piece a decoder yields (and so the most any stage holds at once)."""
SIZE_CHUNK = 1024 * 1024
"""Slice the size-only last stages read at a time: they hold no output."""
WHOLE_MEMBER_OUTPUT = 1024 * 1024
"""The most a lone Flate stream is inflated to in one call (``whole_member_size``)."""
WHOLE_MEMBER_INPUT = 256 * 1024
"""The most raw data inflated in one call: zlib copies what a call leaves
unread, so a larger stream is sliced by the incremental decoder instead."""
MAX_FILTERS = 32
"""A longer /Filter array is not something any writer produces: refused as malformed."""

FLATE = frozenset({"/FlateDecode", "/Fl"})
LZW = frozenset({"/LZWDecode", "/LZW"})
ASCII_HEX = frozenset({"/ASCIIHexDecode", "/AHx"})
ASCII_85 = frozenset({"/ASCII85Decode", "/A85"})
RUN_LENGTH = frozenset({"/RunLengthDecode", "/RL"})
CRYPT = frozenset({"/Crypt"})
IMAGE_CODECS = frozenset(
    {"/DCTDecode", "/DCT", "/JPXDecode", "/JBIG2Decode", "/CCITTFaxDecode", "/CCF"}
)
BILEVEL_CODECS = frozenset({"/JBIG2Decode", "/CCITTFaxDecode", "/CCF"})

_WHITESPACE = b" \t\n\r\f\v\x00"
_HEX_DIGITS = b"0123456789abcdefABCDEF"
_Z_RUN = re.compile(rb"z+")
_A85_DIGITS = bytes(range(33, 118))  # '!' .. 'u'


class DecodeError(ValueError):
    """The stream's data is corrupt for its filter."""


class UnsupportedFilter(ValueError):
    """A filter name that is not one of the PDF standard filters."""


class Exceeded(Exception):
    """More bytes went by than a cap allowed (``capped``)."""


def _slices(chunks: Iterable[bytes], size: int = INPUT_CHUNK) -> Iterator[bytes]:
    for chunk in chunks:
        for start in range(0, len(chunk), size):
            yield chunk[start : start + size]


# --- FlateDecode ---------------------------------------------------------------


def _is_zlib_header(data: bytes) -> bool:
    return len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0


FLATE_CHECKSUM_WRONG = "FLATE_CHECKSUM_WRONG"
"""Damage code: Flate data that decodes to its end with a wrong or missing
Adler-32 check. qpdf, pdfium and poppler all use the data as decoded."""


def _member(data: bytes) -> tuple[Any, bytes, bool]:
    """A fresh inflater for a zlib member starting at ``data``: raw deflate
    past the two header bytes (the Adler-32 check is ours to compare, as
    viewers do not), or zlib's own when the header asks for a preset
    dictionary or is no zlib header at all (it then raises, as corrupt)."""
    # Raw deflate only for the windows zlib itself accepts (CINFO <= 7) and
    # no preset dictionary; anything else goes to zlib, which refuses it.
    if _is_zlib_header(data) and data[0] >> 4 <= 7 and not data[1] & 0x20:
        return zlib.decompressobj(-15), data[2:], True
    return zlib.decompressobj(), data, False


def whole_member_size(raw: bytes, budget: int) -> int | None:
    """Bytes ``raw`` inflates to when it is one intact zlib member and
    nothing else, inflated in one call of at most ``WHOLE_MEMBER_OUTPUT``
    bytes; None at any doubt (corrupt data, a wrong check, a member that does
    not end, bytes after it, more output than that), which ``inflate``
    then decides. Most content streams are such a member, and one call costs a
    tenth of the incremental decoder's turns."""
    if len(raw) > WHOLE_MEMBER_INPUT:
        return None
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(raw, min(budget, WHOLE_MEMBER_OUTPUT) + 1)
    except zlib.error:
        return None
    if not inflater.eof or inflater.unused_data or inflater.unconsumed_tail:
        return None
    return min(len(out), budget + 1)


def inflate(chunks: Iterable[bytes], damage: set[str] | None = None) -> Iterator[bytes]:
    """Inflate zlib data, one member after another, yielding at most
    ``OUTPUT_CHUNK`` bytes at a time.

    Each member ends at its own end (``eof``); the bytes after it are data,
    never more input for that member (zlib keeps a stale ``unconsumed_tail``
    there, and feeding it again returns ``b''`` for ever). If they start like
    another zlib member it is inflated too (counted, never hidden); anything
    else is trailing junk and ignored, as viewers do. Corrupt data in the first
    member raises ``DecodeError``; corrupt data after it ends the stream. A
    member that decodes to its end with a wrong or missing Adler-32 check is
    used as decoded, as every viewer does, and ``FLATE_CHECKSUM_WRONG`` is
    added to ``damage``.
    """
    inflater: Any = None
    checked = False  # the member's Adler-32 trailer is ours to compare
    trailer_due = False
    adler = 1
    first = True
    done = False
    data = b""

    def compare(trailer: bytes) -> None:
        if damage is not None and trailer != (adler & 0xFFFFFFFF).to_bytes(4, "big"):
            damage.add(FLATE_CHECKSUM_WRONG)

    for chunk in _slices(chunks):
        if done:
            continue  # trailing junk: read through, not decoded
        data += chunk
        while data:
            if inflater is None or inflater.eof:
                if trailer_due:
                    if len(data) < 4:
                        break  # wait for the rest of the check
                    compare(data[:4])
                    data, trailer_due = data[4:], False
                    continue
                if len(data) < 2:
                    break  # wait for more: it may be a member's header
                if inflater is not None:
                    if not _is_zlib_header(data):
                        done = True
                        break
                    first = False
                inflater, data, checked = _member(data)
                adler = 1
                if not data:
                    break
            try:
                out = inflater.decompress(data, OUTPUT_CHUNK)
            except zlib.error as error:
                if first:
                    raise DecodeError(str(error)) from error
                done = True
                break
            if out:
                adler = zlib.adler32(out, adler)
                yield out
            if inflater.eof:
                data = inflater.unused_data
                trailer_due = checked
                continue
            tail = inflater.unconsumed_tail
            if not out and len(tail) >= len(data):
                done = True  # no progress: never spin
                break
            data = tail
            # Output may still be pending inside zlib with all input consumed.
            while not data and len(out) == OUTPUT_CHUNK and not inflater.eof:
                out = inflater.decompress(b"", OUTPUT_CHUNK)
                if out:
                    adler = zlib.adler32(out, adler)
                    yield out
                if inflater.eof:
                    data = inflater.unused_data
                    trailer_due = checked
                else:
                    data = inflater.unconsumed_tail
        if done:
            data = b""
    if trailer_due and not done:
        compare(data[:4])  # a check cut short is as wrong as a wrong one


# --- LZWDecode -----------------------------------------------------------------


def lzw_decode(chunks: Iterable[bytes], early_change: int = 1) -> Iterator[bytes]:
    """PDF LZW (variable 9–12-bit codes, MSB first, 256 clear, 257 end),
    with /EarlyChange. A full table stops growing; corrupt codes raise."""
    early = 1 if early_change else 0
    table: list[bytes] = [bytes((i,)) for i in range(256)] + [b"", b""]
    width = 9
    previous: bytes | None = None
    bits = 0
    nbits = 0
    out = bytearray()
    for chunk in _slices(chunks):
        for byte in chunk:
            bits = (bits << 8) | byte
            nbits += 8
            if nbits < width:
                continue
            nbits -= width
            code = bits >> nbits
            bits &= (1 << nbits) - 1
            if code == 256:
                del table[258:]
                width = 9
                previous = None
                continue
            if code == 257:
                if out:
                    yield bytes(out)
                return
            size = len(table)
            if code < size:
                entry = table[code]
                if previous is not None and size < 4096:
                    table.append(previous + entry[:1])
            elif code == size and previous is not None:
                entry = previous + previous[:1]
                if size < 4096:
                    table.append(entry)
            else:
                raise DecodeError(f"LZW code {code} beyond table of {size}")
            if previous is not None and len(table) + early >= (1 << width) and width < 12:
                width += 1
            previous = entry
            out += entry
            if len(out) >= OUTPUT_CHUNK:
                yield bytes(out)
                out.clear()
    if out:
        yield bytes(out)


# --- ASCIIHexDecode ------------------------------------------------------------


def ascii_hex_decode(chunks: Iterable[bytes]) -> Iterator[bytes]:
    carry = b""
    for chunk in _slices(chunks):
        text = chunk.translate(None, _WHITESPACE)
        end = text.find(b">")
        if end >= 0:
            text = text[:end]
        if text.translate(None, _HEX_DIGITS):
            raise DecodeError("non-hex character in ASCIIHexDecode data")
        text = carry + text
        even = len(text) & ~1
        carry = text[even:]
        if even:
            yield bytes.fromhex(text[:even].decode("ascii"))
        if end >= 0:
            break
    if carry:
        yield bytes.fromhex(carry.decode("ascii") + "0")


# --- ASCII85Decode -------------------------------------------------------------


def _a85_whole(text: bytes) -> Iterator[bytes]:
    """Complete groups: runs of ``z`` (four zero bytes each) without decoding
    them one by one, the rest through ``base64``."""
    at = 0
    for run in _Z_RUN.finditer(text):
        if run.start() > at:
            yield _a85(text[at : run.start()])
        zeros = 4 * (run.end() - run.start())
        for _ in range(zeros // OUTPUT_CHUNK):
            yield bytes(OUTPUT_CHUNK)
        if zeros % OUTPUT_CHUNK:
            yield bytes(zeros % OUTPUT_CHUNK)
        at = run.end()
    if at < len(text):
        yield _a85(text[at:])


def _a85(text: bytes) -> bytes:
    try:
        return base64.a85decode(text)
    except ValueError as error:
        raise DecodeError(str(error)) from error


def _a85_texts(slices: Iterable[bytes]) -> Iterator[tuple[bytes, bool]]:
    """The ASCII85 text in ``slices`` (after an optional '<~', up to '~'), white
    space removed, cut where groups end: ``(text, True)`` for each run of whole
    5-digit groups and 'z's, then ``(text, False)`` for a final partial group."""
    carry = b""
    start = True
    for chunk in slices:
        text = chunk.translate(None, _WHITESPACE)
        if start and text:
            if text.startswith(b"<~"):
                text = text[2:]
            start = False
        end = text.find(b"~")
        if end >= 0:
            text = text[:end]
        text = carry + text
        last_z = text.rfind(b"z")
        keep = (len(text) - last_z - 1) % 5
        whole, carry = text[: len(text) - keep], text[len(text) - keep :]
        if whole:
            yield whole, True
        if end >= 0:
            break
    if len(carry) > 1:
        yield carry, False


def ascii85_decode(chunks: Iterable[bytes]) -> Iterator[bytes]:
    for text, whole in _a85_texts(_slices(chunks)):
        if whole:
            yield from _a85_whole(text)
        else:
            yield _a85(text)


# --- RunLengthDecode -----------------------------------------------------------


def run_length_decode(chunks: Iterable[bytes]) -> Iterator[bytes]:
    out = bytearray()
    carry = b""
    for chunk in _slices(chunks):
        data = carry + chunk if carry else chunk
        i = 0
        n = len(data)
        while i < n:
            length = data[i]
            if length < 128:
                if i + length + 2 > n:
                    break
                out += data[i + 1 : i + length + 2]
                i += length + 2
            elif length > 128:
                if i + 2 > n:
                    break
                out += data[i + 1 : i + 2] * (257 - length)
                i += 2
            else:
                if out:
                    yield bytes(out)
                return
            if len(out) >= OUTPUT_CHUNK:
                yield bytes(out)
                out.clear()
        carry = data[i:]
    if carry:
        out += carry[1:]  # a truncated literal run: what is there
    if out:
        yield bytes(out)


# --- Size only, for a last stage ------------------------------------------------
#
# A last stage's output is never used, only its size, so the text filters and
# RunLengthDecode count it without decoding, with the same slicing and carries
# as the decoders above: the size is the decoder's, and data the decoder would
# refuse is handed to the decoder itself, which raises.


def _flags(low: int, high: int = 255) -> bytes:
    """A translation table: 1 for bytes in ``low`` .. ``high``, 0 for the rest."""
    return bytes(1 if low <= b <= high else 0 for b in range(256))


_IS_S = _flags(ord("s"), ord("s"))
_IS_Z = _flags(ord("z"), ord("z"))
_A85_MAX = b"s8W-!"  # 0xFFFFFFFF: a group above it overflows
_GT = [_flags(c + 1) for c in _A85_MAX]
_EQ = [_flags(c, c) for c in _A85_MAX]


def _column(text: bytes, index: int, table: bytes) -> int:
    return int.from_bytes(text[index::5].translate(table), "big")


def _a85_overflows(groups: bytes) -> bool:
    """Whether any 5-character group of ``groups`` (digits only, a multiple of
    5 long) is above ``s8W-!``, compared column by column on flag bytes."""
    firsts = groups[0::5]
    if b"t" in firsts or b"u" in firsts:
        return True
    if b"s" not in firsts:
        return False
    above = _column(groups, 4, _GT[4])
    for index in (3, 2, 1):
        above = _column(groups, index, _GT[index]) | (_column(groups, index, _EQ[index]) & above)
    return bool(_column(groups, 0, _IS_S) & above)


def _a85_z_aligned(text: bytes) -> bool:
    """Whether every 'z' of ``text`` (digits and 'z' only) starts a group, and
    the digits end one: with each 'z' widened to five, no group then mixes
    'z' and digits."""
    wide = text.replace(b"z", b"zzzzz")
    if len(wide) % 5:
        return False
    first = _column(wide, 0, _IS_Z)
    return all(_column(wide, index, _IS_Z) == first for index in (1, 2, 3, 4))


def _a85_whole_size(text: bytes) -> Iterator[int]:
    """Bytes ``_a85_whole(text)`` yields, or its own error."""
    zeros = text.count(b"z")
    digits = text.replace(b"z", b"") if zeros else text
    if (
        digits.translate(None, _A85_DIGITS)  # not a digit: the decoder says which
        or (zeros and digits and not _a85_z_aligned(text))  # a 'z' ends a partial group
        or _a85_overflows(digits[: len(digits) - len(digits) % 5])
    ):
        for piece in _a85_whole(text):
            yield len(piece)
        return
    tail = len(digits) % 5  # only when ``text`` has no 'z' after it
    if tail:
        _a85(digits[-tail:])  # its padding may overflow
    yield 4 * zeros + 4 * (len(digits) // 5) + max(tail - 1, 0)


def ascii85_size(chunks: Iterable[bytes]) -> Iterator[int]:
    """Sizes of what ``ascii85_decode`` yields for ``chunks``, summing to its total."""
    for text, whole in _a85_texts(_slices(chunks, SIZE_CHUNK)):
        if whole:
            yield from _a85_whole_size(text)
        else:
            yield len(_a85(text))


def ascii_hex_size(chunks: Iterable[bytes]) -> Iterator[int]:
    """Sizes of what ``ascii_hex_decode`` yields for ``chunks``, summing to its total."""
    odd = 0
    for chunk in _slices(chunks, SIZE_CHUNK):
        text = chunk.translate(None, _WHITESPACE)
        end = text.find(b">")
        if end >= 0:
            text = text[:end]
        if text.translate(None, _HEX_DIGITS):
            # The decoder yields what comes before the bad digit, then raises.
            for piece in ascii_hex_decode(_slices([b"0" * odd + text + b">"])):
                yield len(piece)
            raise DecodeError("non-hex character in ASCIIHexDecode data")  # pragma: no cover
        digits = odd + len(text)
        odd = digits & 1
        if digits >> 1:
            yield digits >> 1
        if end >= 0:
            break
    if odd:
        yield 1


def run_length_size(chunks: Iterable[bytes]) -> Iterator[int]:
    """Sizes of what ``run_length_decode`` yields for ``chunks``, summing to its total."""
    carry = b""
    for chunk in _slices(chunks, SIZE_CHUNK):
        data = carry + chunk if carry else chunk
        size = 0
        i = 0
        n = len(data)
        while i < n:
            length = data[i]
            if length < 128:
                if i + length + 2 > n:
                    break
                size += length + 1
                i += length + 2
            elif length > 128:
                if i + 2 > n:
                    break
                size += 257 - length
                i += 2
            else:
                if size:
                    yield size
                return
        if size:
            yield size
        carry = data[i:]
    if len(carry) > 1:
        yield len(carry) - 1  # a truncated literal run: what is there


# --- Chains ----------------------------------------------------------------------


def capped(pieces: Iterable[bytes], budget: int) -> Iterator[bytes]:
    """Pass ``pieces`` through, raising ``Exceeded`` once more than ``budget``
    bytes went by."""
    total = 0
    for piece in pieces:
        total += len(piece)
        if total > budget:
            raise Exceeded()
        yield piece


def _image_size(dictionary: Any, codec: str) -> int | None:
    """Bytes an image decodes to, from its dictionary, or None when it does not say."""
    width, height = _int(dictionary.get("/Width")), _int(dictionary.get("/Height"))
    if width is None or height is None or width < 0 or height < 0:
        return None
    if codec in BILEVEL_CODECS or _truthy(dictionary.get("/ImageMask")):
        bpc, components = 1, 1
    else:
        bpc = _int(dictionary.get("/BitsPerComponent")) or 8
        components = _components(dictionary.get("/ColorSpace"))
    return (width * bpc * components + 7) // 8 * height


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _truthy(value: Any) -> bool:
    try:
        return bool(value)
    except (TypeError, ValueError):
        return False


def _components(space: Any) -> int:
    """Colour components of a colour space; 4 (the most of any standard space)
    when it cannot be told, so the bound stays an upper bound."""
    try:
        if space is None:
            return 4
        operand: Any = None
        if not isinstance(space, _array_types()):
            family = str(space)
        else:
            items: list[Any] = list(space)  # type: ignore[call-overload]
            if not items:
                return 4
            family = str(items[0])
            operand = items[1] if len(items) > 1 else None
        if family in {"/DeviceGray", "/G", "/CalGray", "/Indexed", "/I", "/Separation"}:
            return 1
        if family in {"/DeviceRGB", "/RGB", "/CalRGB", "/Lab"}:
            return 3
        if family in {"/DeviceCMYK", "/CMYK"}:
            return 4
        if family == "/ICCBased" and operand is not None and hasattr(operand, "get"):
            components = _int(operand.get("/N"))
            return components if components and 0 < components <= 32 else 4
        if family == "/DeviceN" and operand is not None and hasattr(operand, "__len__"):
            return max(1, min(len(operand), 32))
    except (TypeError, ValueError, AttributeError):
        pass
    return 4


def _array_types() -> tuple[type, ...]:
    try:
        import pikepdf
    except ImportError:  # pragma: no cover - pikepdf is a dependency
        return (list, tuple)
    return (list, tuple, pikepdf.Array)


def _stage(
    name: str, parms: Any, damage: set[str] | None = None
) -> Callable[[Iterable[bytes]], Iterator[bytes]]:
    if name in FLATE:
        return lambda chunks: inflate(chunks, damage)
    if name in LZW:
        early = _int(parms.get("/EarlyChange")) if parms is not None else None
        early_change = 1 if early is None else early
        return lambda chunks: lzw_decode(chunks, early_change)
    if name in ASCII_HEX:
        return ascii_hex_decode
    if name in ASCII_85:
        return ascii85_decode
    if name in RUN_LENGTH:
        return run_length_decode
    if name in CRYPT:
        return _slices  # decrypted by qpdf, or refused as encrypted before this
    raise UnsupportedFilter(name)


def _size_stage(name: str) -> Callable[[Iterable[bytes]], Iterator[int]] | None:
    """Counts a last stage's output without decoding it, for the filters that can."""
    if name in ASCII_HEX:
        return ascii_hex_size
    if name in ASCII_85:
        return ascii85_size
    if name in RUN_LENGTH:
        return run_length_size
    return None


def measure(
    raw: bytes,
    names: list[str],
    parms: list[Any],
    budget: int,
    dictionary: Any = None,
    damage: set[str] | None = None,
) -> int:
    """Bytes ``raw`` decodes to through ``names`` (with their decode
    parameters), counting no further than ``budget`` + 1: each stage's output
    is capped at ``budget`` too, so an intermediate bomb ends the measurement.

    Raises ``UnsupportedFilter`` for a name that is not a standard filter and
    ``DecodeError`` for corrupt data. Damage decoders tolerate, as viewers
    do, is added to ``damage`` by its code.
    """
    if len(names) > MAX_FILTERS:
        raise UnsupportedFilter(f"{len(names)} filters in one chain")
    for index, name in enumerate(names):  # refuse unknown names before any work
        if name in IMAGE_CODECS:
            if index != len(names) - 1:
                raise UnsupportedFilter(f"{name} is not the last filter")
        else:
            _stage(name, None)
    budget = max(budget, 0)
    if len(names) == 1 and names[0] in FLATE:
        whole = whole_member_size(raw, budget)
        if whole is not None:
            return whole
    pieces: Iterable[bytes] = (raw,)
    sizes: Iterable[int] | None = None
    final_codec: str | None = None
    try:
        for index, name in enumerate(names):
            if name in IMAGE_CODECS:
                final_codec = name
                break
            counter = _size_stage(name) if index == len(names) - 1 else None
            if counter is not None:
                sizes = counter(pieces)
                break
            parm = parms[index] if index < len(parms) else None
            pieces = capped(_stage(name, parm, damage)(pieces), budget)
        size = 0
        for piece_size in sizes if sizes is not None else map(len, pieces):
            size += piece_size
            if size > budget:
                return budget + 1
    except Exceeded:
        return budget + 1
    if final_codec is not None and dictionary is not None:
        bound = _image_size(dictionary, final_codec)
        if bound is not None:
            return min(bound, budget + 1)
    return size


def decoded_size(
    stream: Any,
    budget: int,
    damage: set[str] | None = None,
    written: dict[str, Any] | None = None,
) -> int:
    """Bytes a pikepdf stream decodes to, counting no further than ``budget`` + 1
    (tolerated damage added to ``damage``). ``written``: the stream's
    dictionary as ``pdfgraph`` read it, whose lone Flate filter is taken
    from there rather than asked of pikepdf."""
    import pikepdf

    named = written.get("/Filter") if written is not None else None
    if type(named) is str and named in FLATE:
        # A lone Flate filter, whose parameters change no size: the raw data
        # is read once, and measured in one call when it can be (``measure``).
        return measure(stream.read_raw_bytes(), [named], [], budget, None, damage)

    filters = stream.get("/Filter")
    if filters is None:
        names: list[str] = []
    elif isinstance(filters, pikepdf.Array):
        names = [str(f) for f in filters]
    else:
        names = [str(filters)]
    raw_parms = stream.get("/DecodeParms")
    if raw_parms is None:
        parms: list[Any] = []
    elif isinstance(raw_parms, pikepdf.Array):
        parms = [p if isinstance(p, pikepdf.Dictionary) else None for p in raw_parms]
    else:
        parms = [raw_parms if isinstance(raw_parms, pikepdf.Dictionary) else None]
    if len(parms) == 1 and len(names) > 1 and not isinstance(raw_parms, pikepdf.Array):
        parms = parms + [None] * (len(names) - 1)
    return measure(stream.read_raw_bytes(), names, parms, budget, stream.stream_dict, damage)
