"""Cycles in the structures readers walk are refused (CYCLIC_STRUCTURE)
before anything walks them; the same structures without a loop pass, and a
page listed twice (everyday damage, not a loop) is not taken for one."""

from __future__ import annotations

from pathlib import Path

import pikepdf
import pytest

from quire.testing.hostile import _one_page, page_tree_loop, raw_pdf
from quire.validator.inspection import inspect_source
from quire.validator.pdfcycles import find_cycle

PAGE = 3  # object number of the page in hostile._one_page


def _with(extra_objects: list[bytes], catalog: bytes = b"", page: bytes = b"") -> list[bytes]:
    objects = _one_page(page_extra=page)
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R " + catalog + b" >>"
    return objects + extra_objects  # extra objects are numbered from 6


def outline_loop(path: Path, *, loop: bool = True) -> Path:
    last = b"/Next 7 0 R" if loop else b""
    return raw_pdf(
        path,
        _with(
            [
                b"<< /Type /Outlines /First 7 0 R /Last 8 0 R /Count 2 >>",
                b"<< /Title (one) /Parent 6 0 R /Next 8 0 R /Dest [3 0 R /Fit] >>",
                b"<< /Title (two) /Parent 6 0 R /Prev 7 0 R %s /Dest [3 0 R /Fit] >>" % last,
            ],
            catalog=b"/Outlines 6 0 R",
        ),
    )


def reply_loop(path: Path, *, loop: bool = True) -> Path:
    back = b"/IRT 7 0 R" if loop else b""
    return raw_pdf(
        path,
        _with(
            [
                b"<< /Type /Annot /Subtype /Text /Rect [0 0 10 10] /Contents (a) /IRT 7 0 R >>",
                b"<< /Type /Annot /Subtype /Text /Rect [0 0 10 10] /Contents (b) %s >>" % back,
            ],
            page=b"/Annots [6 0 R 7 0 R]",
        ),
    )


def field_loop(path: Path, *, loop: bool = True) -> Path:
    kids = b"/Kids [6 0 R]" if loop else b""
    return raw_pdf(
        path,
        _with(
            [
                b"<< /T (parent) /FT /Tx /Kids [7 0 R] >>",
                b"<< /T (child) /Parent 6 0 R %s >>" % kids,
            ],
            catalog=b"/AcroForm << /Fields [6 0 R] >>",
        ),
    )


def function_loop(path: Path, *, loop: bool = True) -> Path:
    inner = b"[7 0 R]" if loop else b"[8 0 R]"
    return raw_pdf(
        path,
        _with(
            [
                b"<< /ShadingType 2 /ColorSpace /DeviceRGB /Coords [0 0 1 0] /Function 7 0 R >>",
                b"<< /FunctionType 3 /Domain [0 1] /Functions %s /Bounds [] /Encode [0 1] >>"
                % inner,
                b"<< /FunctionType 2 /Domain [0 1] /C0 [0 0 0] /C1 [1 1 1] /N 1 >>",
            ],
            page=b"/Group << /S /Transparency >> /PieceInfo << /Q << /Sh 6 0 R >> >>",
        ),
    )


def contents_loop(path: Path, *, loop: bool = True) -> Path:
    """A page's /Contents: arrays inside arrays (6 -> [7] -> [8] -> [6]),
    the shape that made the assembler recurse until it failed."""
    objects = _with([b"[7 0 R]", b"[8 0 R]", b"[6 0 R 4 0 R]" if loop else b"[4 0 R]"])
    objects[2] = objects[2].replace(b"/Contents 4 0 R", b"/Contents 6 0 R")
    return raw_pdf(path, objects)


def outline_backwards_loop(path: Path, *, loop: bool = True) -> Path:
    """Outline items whose /Prev links (walked back from /Last) loop, while
    /First and /Next look whole."""
    first_prev = b"/Prev 8 0 R" if loop else b""
    return raw_pdf(
        path,
        _with(
            [
                b"<< /Type /Outlines /First 7 0 R /Last 8 0 R /Count 2 >>",
                b"<< /Title (one) /Parent 6 0 R /Next 8 0 R %s /Dest [3 0 R /Fit] >>" % first_prev,
                b"<< /Title (two) /Parent 6 0 R /Prev 7 0 R /Dest [3 0 R /Fit] >>",
            ],
            catalog=b"/Outlines 6 0 R",
        ),
    )


def page_listed_twice(path: Path) -> Path:
    objects = _one_page()
    objects[1] = b"<< /Type /Pages /Kids [3 0 R 3 0 R] /Count 2 >>"
    return raw_pdf(path, objects)


def resources_loop(path: Path, *, loop: bool = True) -> Path:
    """A form XObject that draws a second one, which draws the first again."""
    back = b"/Resources << /XObject << /A 6 0 R >> >>" if loop else b""
    objects = _with(
        [
            b"<< /Type /XObject /Subtype /Form /BBox [0 0 10 10] "
            b"/Resources << /XObject << /B 7 0 R >> >> /Length 6 >>\nstream\n/B Do\n\nendstream",
            b"<< /Type /XObject /Subtype /Form /BBox [0 0 10 10] %s /Length 6 >>\nstream\n/A Do\n\nendstream"
            % back,
        ]
    )
    objects[2] = objects[2].replace(b"/F1 5 0 R >>", b"/F1 5 0 R >> /XObject << /A 6 0 R >>")
    return raw_pdf(path, objects)


def inherited_resources_loop(path: Path, *, loop: bool = True) -> Path:
    """A form that draws itself, named in resources the page inherits."""
    own = b"/Resources << /XObject << /A 6 0 R >> >>" if loop else b""
    objects = _with(
        [
            b"<< /Type /XObject /Subtype /Form /BBox [0 0 10 10] %s /Length 6 >>"
            b"\nstream\n/A Do\n\nendstream" % own,
        ]
    )
    objects[1] = (
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 "
        b"/Resources << /Font << /F1 5 0 R >> /XObject << /A 6 0 R >> >> >>"
    )
    objects[2] = objects[2].replace(b"/Resources << /Font << /F1 5 0 R >> >> ", b"")
    return raw_pdf(path, objects)


def name_tree_loop(path: Path, *, loop: bool = True) -> Path:
    """A destinations name tree whose leaf lists its own root as a kid."""
    kids = b"/Kids [6 0 R]" if loop else b""
    return raw_pdf(
        path,
        _with(
            [
                b"<< /Kids [7 0 R] >>",
                b"<< /Names [(a) [3 0 R /Fit]] /Limits [(a) (a)] %s >>" % kids,
            ],
            catalog=b"/Names << /Dests 6 0 R >>",
        ),
    )


def structure_loop(path: Path, *, loop: bool = True) -> Path:
    """A structure element whose child lists the element again."""
    back = b"/K [7 0 R]" if loop else b"/K 0"
    return raw_pdf(
        path,
        _with(
            [
                b"<< /Type /StructTreeRoot /K 7 0 R >>",
                b"<< /Type /StructElem /S /P /P 6 0 R /Pg 3 0 R /K 8 0 R >>",
                b"<< /Type /StructElem /S /Span /P 7 0 R /Pg 3 0 R %s >>" % back,
            ],
            catalog=b"/StructTreeRoot 6 0 R /MarkInfo << /Marked true >>",
        ),
    )


def type3_loop(path: Path, *, loop: bool = True) -> Path:
    """A Type 3 font whose glyph resources name the font itself."""
    own = b"/Resources << /Font << /T3 6 0 R >> >>" if loop else b""
    objects = _with(
        [
            b"<< /Type /Font /Subtype /Type3 /FontBBox [0 0 10 10] /FontMatrix [0.1 0 0 0.1 0 0] "
            b"/CharProcs << /a 7 0 R >> /Encoding << /Differences [97 /a] >> "
            b"/FirstChar 97 /LastChar 97 /Widths [10] %s >>" % own,
            b"<< /Length 8 >>\nstream\n10 0 d0\n\nendstream",
        ]
    )
    objects[2] = objects[2].replace(b"/F1 5 0 R >>", b"/F1 5 0 R /T3 6 0 R >>")
    return raw_pdf(path, objects)


BUILDERS = {
    "structure_tree": structure_loop,
    "type3": type3_loop,
    "resources": resources_loop,
    "inherited_resources": inherited_resources_loop,
    "name_trees": name_tree_loop,
    "contents": contents_loop,
    "outlines": outline_loop,
    "outline_links": outline_backwards_loop,
    "annotations": reply_loop,
    "form_fields": field_loop,
    "functions": function_loop,
}


FOUND_AS = {"outline_links": "outlines", "type3": "resources", "inherited_resources": "resources"}
"""What find_cycle names a loop that the builder names more precisely."""


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_a_loop_is_found_and_its_loop_free_twin_is_not(tmp_path: Path, kind: str) -> None:
    build = BUILDERS[kind]
    with pikepdf.open(build(tmp_path / "loop.pdf")) as pdf:
        assert find_cycle(pdf) == FOUND_AS.get(kind, kind)
    with pikepdf.open(build(tmp_path / "tree.pdf", loop=False)) as pdf:
        assert find_cycle(pdf) is None


def test_a_page_tree_loop_is_found(tmp_path: Path) -> None:
    loop = page_tree_loop(tmp_path / "pages.pdf")
    with pikepdf.open(loop, inherit_page_attributes=False) as pdf:
        assert find_cycle(pdf) == "page_tree"


def test_a_page_listed_twice_is_not_a_cycle(tmp_path: Path) -> None:
    with pikepdf.open(page_listed_twice(tmp_path / "twice.pdf")) as pdf:
        assert find_cycle(pdf) is None


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_the_validator_refuses_a_loop_with_its_typed_reason(tmp_path: Path, kind: str) -> None:
    import hashlib

    path = BUILDERS[kind](tmp_path / "loop.pdf")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    finding = inspect_source(str(path), digest, "application/pdf")
    assert finding.reason == "CYCLIC_STRUCTURE"
    clean = BUILDERS[kind](tmp_path / "tree.pdf", loop=False)
    digest = hashlib.sha256(clean.read_bytes()).hexdigest()
    assert inspect_source(str(clean), digest, "application/pdf").reason == ""
