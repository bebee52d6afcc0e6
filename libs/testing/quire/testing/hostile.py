"""Hostile PDFs built byte by byte for tests: bombs, loops and deep nesting.

Written directly (objects, then a cross-reference table with exact offsets),
so that no PDF library repairs or normalises what the test means to send.
"""

from __future__ import annotations

import zlib
from pathlib import Path

__all__ = [
    "raw_pdf",
    "flate_bomb",
    "nested_arrays",
    "page_tree_loop",
    "many_pages",
    "javascript_on_open",
    "embedded_file",
    "uri_link",
    "many_objects",
    "slow_lzw",
]

FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


def raw_pdf(
    path: Path,
    objects: list[bytes],
    root: int | bytes = 1,
    *,
    tail: bytes = b"",
    entry: bytes = b"%010d 00000 n \n",
    named_in_tail: int | None = None,
) -> Path:
    """Objects numbered from 1 in order; object ``root`` is the catalog, or
    ``root`` is the catalog itself, written directly in the trailer.
    ``tail`` is written after them, before the table, which names none of
    it, except that the entry of object ``named_in_tail`` names the tail's
    start instead of that object's body. ``entry`` formats each entry (20
    bytes as the standard says, or a malformed length)."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    if named_in_tail is not None:
        offsets[named_in_tail - 1] = len(out)
    out += tail
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += entry % offset
    catalog = root if isinstance(root, bytes) else b"%d 0 R" % root
    out += b"trailer\n<< /Size %d /Root %s >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        catalog,
        xref,
    )
    path.write_bytes(bytes(out))
    return path


def _stream(data: bytes, extra: bytes = b"") -> bytes:
    return b"<< /Length %d %s >>\nstream\n" % (len(data), extra) + data + b"\nendstream"


def _one_page(
    contents: bytes = b"BT /F1 12 Tf 72 720 Td (page) Tj ET", page_extra: bytes = b""
) -> list[bytes]:
    return [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R "
        + page_extra
        + b">>",
        _stream(contents),
        FONT,
    ]


def flate_bomb(path: Path, gibibytes: int = 2) -> Path:
    """A few KiB that inflate to gigabytes: zeros compressed twice."""
    outer = zlib.compress(_deflated_zeros(gibibytes * 1024**3), 9)
    objects = _one_page(page_extra=b"/Thumb 6 0 R ")
    objects.append(_stream(outer, b"/Filter [/FlateDecode /FlateDecode]"))
    return raw_pdf(path, objects)


def _deflated_zeros(size: int, chunk: int = 64 * 1024 * 1024) -> bytes:
    """A zlib stream of ``size`` zero bytes (a multiple of ``chunk``), built
    without compressing all of them: after a full flush the compressor starts
    afresh, so every chunk after the first compresses to the same bytes, and
    the Adler-32 of n zeros is (n mod 65521) << 16 | 1."""
    zeros = bytes(chunk)
    raw = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = raw.compress(zeros) + raw.flush(zlib.Z_FULL_FLUSH)
    again = raw.compress(zeros) + raw.flush(zlib.Z_FULL_FLUSH)
    adler32 = ((size % 65521) << 16) | 1
    body = first + again * (size // chunk - 1) + raw.flush()
    return b"\x78\xda" + body + adler32.to_bytes(4, "big")


def nested_arrays(path: Path, depth: int = 100_000) -> Path:
    objects = _one_page(page_extra=b"/Nested 6 0 R ")
    objects.append(b"[" * depth + b"]" * depth)
    return raw_pdf(path, objects)


def page_tree_loop(path: Path) -> Path:
    """The page tree's only kid is an intermediate node whose kid is the root again."""
    return raw_pdf(
        path,
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Pages /Parent 2 0 R /Kids [2 0 R] /Count 1 >>",
        ],
    )


def many_pages(path: Path, pages: int) -> Path:
    kids = b" ".join(b"%d 0 R" % (4 + n) for n in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages,
        _stream(b""),
    ]
    objects += [
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << >> /Contents 3 0 R >>"
    ] * pages
    return raw_pdf(path, objects)


def javascript_on_open(path: Path) -> Path:
    objects = _one_page()
    objects[0] = (
        b"<< /Type /Catalog /Pages 2 0 R /OpenAction << /S /JavaScript /JS (app.alert(1)) >> >>"
    )
    return raw_pdf(path, objects)


def embedded_file(path: Path) -> Path:
    objects = _one_page()
    objects[0] = (
        b"<< /Type /Catalog /Pages 2 0 R /Names << /EmbeddedFiles << /Names [(a.exe) 6 0 R] >> >> >>"
    )
    objects.append(b"<< /Type /Filespec /F (a.exe) /EF << /F 7 0 R >> >>")
    objects.append(_stream(b"MZ payload", b"/Type /EmbeddedFile"))
    return raw_pdf(path, objects)


def uri_link(path: Path) -> Path:
    """An ordinary hyperlink: not active content."""
    objects = _one_page(page_extra=b"/Annots [6 0 R] ")
    objects.append(
        b"<< /Type /Annot /Subtype /Link /Rect [72 700 200 720] /A << /S /URI /URI (https://example.org/) >> >>"
    )
    return raw_pdf(path, objects)


def javascript_in_annotation_array(path: Path) -> Path:
    """A link that runs JavaScript, held as a direct dictionary in the page's
    /Annots array, the array an indirect object of its own."""
    objects = _one_page(page_extra=b"/Annots 6 0 R ")
    objects.append(
        b"[<< /Type /Annot /Subtype /Link /Rect [72 700 200 720]"
        b" /A << /S /JavaScript /JS (app.alert(1)) >> >>]"
    )
    return raw_pdf(path, objects)


def attachment_in_annotation_array(path: Path) -> Path:
    """A file attachment annotation, held as a direct dictionary in an indirect
    /Annots array."""
    objects = _one_page(page_extra=b"/Annots 6 0 R ")
    objects.append(
        b"[<< /Type /Annot /Subtype /FileAttachment /Rect [72 700 90 720]"
        b" /FS << /Type /Filespec /F (a.exe) >> >>]"
    )
    return raw_pdf(path, objects)


def form(content: bytes, resources: bytes = b"") -> bytes:
    """A form XObject drawing ``content``, with ``resources`` (none when empty)."""
    extra = b"/Resources << %s >>" % resources if resources else b""
    return _stream(content, b"/Type /XObject /Subtype /Form /BBox [0 0 10 10] " + extra)


def drawing_bomb(path: Path, levels: int = 40, times: int = 2, separator: bytes = b" ") -> Path:
    """A page drawing a form that draws the next ``times`` times, ``levels``
    deep: ``times ** levels`` draws, and no loop. ``separator`` is the white
    space between each name and its operator."""
    objects = _one_page(b"/X Do")
    objects[2] = objects[2].replace(b"/Resources <<", b"/Resources << /XObject << /X 6 0 R >>")
    for level in range(levels):
        if level + 1 < levels:
            drawing = b" ".join([b"q /X" + separator + b"Do Q"] * times)
            objects.append(form(drawing, b"/XObject << /X %d 0 R >>" % (7 + level)))
        else:
            objects.append(form(b"0 0 1 1 re f"))
    return raw_pdf(path, objects)


def form_drawing_itself_through_the_page(path: Path) -> Path:
    """A form without resources of its own, drawing the name the page's
    resources give the form itself (viewers draw it from the page's)."""
    objects = _one_page(b"/X Do")
    objects[2] = objects[2].replace(b"/Resources <<", b"/Resources << /XObject << /X 6 0 R >>")
    objects.append(form(b"/X Do"))
    return raw_pdf(path, objects)


def javascript_in_direct_catalog(path: Path) -> Path:
    """A catalog written directly in the trailer, not as an object, whose
    additional actions run JavaScript as the document closes."""
    objects = _one_page()
    objects[0] = b"null"
    return raw_pdf(
        path,
        objects,
        root=b"<< /Type /Catalog /Pages 2 0 R"
        b" /AA << /WC << /S /JavaScript /JS (app.alert(1)) >> >> >>",
    )


def plain_direct_catalog(path: Path) -> Path:
    """A catalog written directly in the trailer, holding nothing active."""
    objects = _one_page()
    objects[0] = b"null"
    return raw_pdf(path, objects, root=b"<< /Type /Catalog /Pages 2 0 R >>")


def link_in_annotation_array(path: Path) -> Path:
    """An ordinary hyperlink, held as a direct dictionary in an indirect
    /Annots array: not active content."""
    objects = _one_page(page_extra=b"/Annots 6 0 R ")
    objects.append(
        b"[<< /Type /Annot /Subtype /Link /Rect [72 700 200 720]"
        b" /A << /S /URI /URI (https://example.org/) >> >>]"
    )
    return raw_pdf(path, objects)


def many_objects(path: Path, count: int) -> Path:
    """A valid page plus ``count`` small objects hanging off it (slow to walk)."""
    first = 7
    objects = _one_page(page_extra=b"/Extra 6 0 R ")
    objects.append(b"[" + b" ".join(b"%d 0 R" % n for n in range(first, first + count)) + b"]")
    objects += [b"<< /N %d >>" % n for n in range(count)]
    return raw_pdf(path, objects)


def chained_javascript(path: Path, depth: int = 70) -> Path:
    """JavaScript at the end of a long chain of direct /Next actions."""
    action = b"<< /S /JavaScript /JS (app.alert(1)) >>"
    for _ in range(depth):
        action = b"<< /S /GoTo /D [3 0 R /Fit] /Next " + action + b" >>"
    objects = _one_page()
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R /OpenAction " + action + b" >>"
    return raw_pdf(path, objects)


def _lzw_codes(codes: list[int]) -> bytes:
    """9-bit LZW codes, most significant bit first (a whole number of bytes)."""
    value = 0
    for code in codes:
        value = (value << 9) | code
    assert len(codes) % 8 == 0
    return value.to_bytes(len(codes) * 9 // 8, "big")


def slow_lzw(path: Path, mebibytes: int = 96) -> Path:
    """A one-page PDF of a few KiB with one valid stream filtered
    ``[/FlateDecode /FlateDecode /LZWDecode]``: the flate layers inflate to
    ``mebibytes`` MiB of LZW codes (a literal, then a clear-table code, over
    and over) that decode to under half that. Every size stays under the
    validator's decompressed-size cap (256 MiB), so nothing refuses it early,
    but measuring it means running the pure-Python LZW decoder over every
    input byte: about 8 MiB a second on one core, so ~12 s of CPU by default,
    past the shared lane's budget (1 s base for a file this small) and the
    quarantine lane's (3x that) alike."""
    unit = _lzw_codes([65, 256] * 4)  # 'A', clear: 9 bytes
    inner = zlib.compressobj(9)
    block = unit * (1024 * 1024 // len(unit) + 1)
    layer = b"".join(inner.compress(block) for _ in range(mebibytes)) + inner.flush()
    outer = zlib.compress(layer, 9)
    objects = _one_page(page_extra=b"/Thumb 6 0 R ")
    objects.append(_stream(outer, b"/Filter [/FlateDecode /FlateDecode /LZWDecode]"))
    return raw_pdf(path, objects)
