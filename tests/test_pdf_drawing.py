"""What drawing a page asks of a viewer (``pdfdrawing``): counted, bounded,
and loops found through inherited resources, appearance streams and soft
masks. Asserted on the count the walk makes, never on time."""

from __future__ import annotations

from pathlib import Path

import pikepdf
import pytest

from quire.blobstore import sha256_file
from quire.reasons import ReasonCode
from quire.testing import hostile
from quire.testing.hostile import form, raw_pdf
from quire.validator.inspection import inspect_source
from quire.validator.pdfdrawing import canonical, drawing_verdict, names_used
from quire.validator.pdfgraph import PdfGraph

PDF = "application/pdf"


def _verdict(path: Path, max_draws: int | None = None) -> str:
    with pikepdf.open(path, attempt_recovery=False) as pdf:
        graph = PdfGraph.read(pdf, 10**6)
        if max_draws is None:
            return drawing_verdict(graph)
        return drawing_verdict(graph, max_draws)


def _reason(path: Path) -> tuple[str, str]:
    found = inspect_source(str(path), sha256_file(path)[0], PDF)
    return found.reason, found.detail


def _page_drawing(path: Path, content: bytes, resources: bytes, *more: bytes) -> Path:
    objects = hostile._one_page(content)  # noqa: SLF001 - the shared one-page skeleton
    objects[2] = objects[2].replace(b"/Resources <<", b"/Resources << " + resources)
    objects.extend(more)
    return raw_pdf(path, objects)


def test_each_thing_drawn_counts_once_for_each_time_it_is_named(tmp_path: Path) -> None:
    """The page draws A three times; A draws B twice: 1 + 3 * (1 + 2 * 1) = 10
    draws. A bound of 10 passes it and a bound of 9 does not, so the count is
    exact for forms named as they are drawn."""
    path = _page_drawing(
        tmp_path / "ten.pdf",
        b"/A Do /A Do q /A Do Q",
        b"/XObject << /A 6 0 R >>",
        form(b"/B Do /B Do", b"/XObject << /B 7 0 R >>"),
        form(b"0 0 1 1 re f"),
    )
    assert _verdict(path, max_draws=10) == ""
    assert _verdict(path, max_draws=9) == "unbounded"


def test_a_fan_of_forms_without_a_loop_is_refused_as_unbounded(tmp_path: Path) -> None:
    bomb = hostile.drawing_bomb(tmp_path / "bomb.pdf")
    assert _verdict(bomb) == "unbounded"
    assert _reason(bomb) == (ReasonCode.MALFORMED_PDF, "DRAWING_UNBOUNDED")
    ordinary = hostile.drawing_bomb(tmp_path / "fan.pdf", levels=10)
    assert _reason(ordinary) == ("", "")


def test_a_name_written_with_escapes_is_counted_as_the_name_it_is(tmp_path: Path) -> None:
    """``/#58`` is ``/X`` to every reader: a bomb that spells its names with
    escapes is counted the same."""
    objects = hostile._one_page(b"/#58 Do")  # noqa: SLF001
    objects[2] = objects[2].replace(b"/Resources <<", b"/Resources << /XObject << /X 6 0 R >>")
    for level in range(30):
        if level < 29:
            objects.append(
                form(b"q /#58 Do Q q /X#20Y Do Q", b"/XObject << /X 7 0 R /X#20Y 7 0 R >>")
                .replace(b"/X 7 0 R", b"/X %d 0 R" % (7 + level))
                .replace(b"/X#20Y 7 0 R", b"/X#20Y %d 0 R" % (7 + level))
            )
        else:
            objects.append(form(b"0 0 1 1 re f"))
    path = raw_pdf(tmp_path / "escaped.pdf", objects)
    assert _verdict(path) == "unbounded"
    assert names_used(b"/#58 Do /X#20Y Do (a) Tj /X Do") == {b"X": 2, b"X Y": 1}
    assert canonical("/X Y") == b"X Y"
    assert canonical("n:/X#e9Y") == b"X\xe9Y"


def test_a_form_without_resources_draws_from_the_page_and_may_loop_there(tmp_path: Path) -> None:
    loop = hostile.form_drawing_itself_through_the_page(tmp_path / "loop.pdf")
    assert _verdict(loop) == "cycle"
    assert _reason(loop)[0] == ReasonCode.CYCLIC_STRUCTURE
    # The same form drawing an image the page's resources name: no loop.
    image = hostile._stream(  # noqa: SLF001
        b"\x00",
        b"/Type /XObject /Subtype /Image /Width 1 /Height 1 /ColorSpace /DeviceGray"
        b" /BitsPerComponent 8",
    )
    plain = _page_drawing(
        tmp_path / "plain.pdf",
        b"/X Do",
        b"/XObject << /X 6 0 R /I 7 0 R >>",
        form(b"/I Do"),
        image,
    )
    assert _verdict(plain) == ""
    assert _reason(plain) == ("", "")


def test_an_appearance_that_draws_itself_is_a_loop(tmp_path: Path) -> None:
    objects = hostile._one_page(page_extra=b"/Annots [6 0 R] ")  # noqa: SLF001
    objects.append(b"<< /Type /Annot /Subtype /Square /Rect [0 0 10 10] /AP << /N 7 0 R >> >>")
    objects.append(form(b"/X Do", b"/XObject << /X 7 0 R >>"))
    path = raw_pdf(tmp_path / "appearance.pdf", objects)
    assert _verdict(path) == "cycle"
    assert _reason(path)[0] == ReasonCode.CYCLIC_STRUCTURE


def test_an_appearance_state_that_fans_out_counts_with_its_page(tmp_path: Path) -> None:
    """An annotation's appearance states (``/N`` a dictionary of streams) are
    drawn with the page: their draws are the page's."""
    objects = hostile._one_page(page_extra=b"/Annots [6 0 R] ")  # noqa: SLF001
    objects.append(
        b"<< /Type /Annot /Subtype /Widget /Rect [0 0 10 10] /AP << /N << /On 7 0 R >> >> >>"
    )
    objects.append(form(b"/A Do /A Do /A Do /A Do", b"/XObject << /A 8 0 R >>"))
    objects.append(form(b"0 0 1 1 re f"))
    path = raw_pdf(tmp_path / "states.pdf", objects)
    assert _verdict(path, max_draws=6) == ""  # the page 1, the appearance 1 + 4
    assert _verdict(path, max_draws=5) == "unbounded"


def test_a_soft_mask_group_that_draws_itself_is_a_loop(tmp_path: Path) -> None:
    mask = form(
        b"/G1 gs 0 0 10 10 re f",
        b"/ExtGState << /G1 6 0 R >>",
    ).replace(b"/Subtype /Form", b"/Subtype /Form /Group << /S /Transparency >>")
    path = _page_drawing(
        tmp_path / "mask.pdf",
        b"/G1 gs 0 0 10 10 re f",
        b"/ExtGState << /G1 6 0 R >>",
        b"<< /Type /ExtGState /SMask << /Type /Mask /S /Luminosity /G 7 0 R >> >>",
        mask,
    )
    assert _verdict(path) == "cycle"


def test_pages_are_the_page_tree_leaves_even_without_their_type(tmp_path: Path) -> None:
    """A leaf of the page tree without ``/Type /Page`` is still drawn by
    lenient viewers: its drawing is counted too."""
    objects = hostile._one_page(b"/A Do /A Do")  # noqa: SLF001
    objects[2] = (
        objects[2]
        .replace(b"/Type /Page ", b"")
        .replace(b"/Resources <<", b"/Resources << /XObject << /A 6 0 R >>")
    )
    objects.append(form(b"0 0 1 1 re f"))
    path = raw_pdf(tmp_path / "untyped.pdf", objects)
    assert b"/Type /Page " not in path.read_bytes()
    assert _verdict(path, max_draws=3) == ""
    assert _verdict(path, max_draws=2) == "unbounded"


@pytest.mark.parametrize("tree", [b"/PageLabels 6 0 R", b"/StructTreeRoot 8 0 R"])
def test_a_number_tree_whose_kids_loop_is_a_cycle(tmp_path: Path, tree: bytes) -> None:
    objects = hostile._one_page()  # noqa: SLF001
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R %s >>" % tree
    objects.append(b"<< /Kids [7 0 R] >>")
    objects.append(b"<< /Kids [6 0 R] /Limits [0 5] >>")
    objects.append(b"<< /Type /StructTreeRoot /ParentTree 6 0 R >>")
    path = raw_pdf(tmp_path / "tree.pdf", objects)
    assert _reason(path)[0] == ReasonCode.CYCLIC_STRUCTURE


def test_a_nul_between_a_name_and_its_operator_still_names_it(tmp_path: Path) -> None:
    """NUL is white space to PDF readers: ``/X\\x00Do`` draws ``/X``."""
    assert names_used(b"/X\x00Do /Y\x00\x00Do") == {b"X": 1, b"Y": 1}
    bomb = hostile.drawing_bomb(tmp_path / "nul.pdf", separator=b"\x00")
    assert _verdict(bomb) == "unbounded"


def test_a_form_without_resources_draws_from_the_form_that_drew_it(tmp_path: Path) -> None:
    """pdfium and pdf.js give such a form its drawer's resources, not the
    page's: a form naming itself there loops, and forms alternating with and
    without resources fan out all the same."""
    loop = _page_drawing(
        tmp_path / "parent.pdf",
        b"/A Do",
        b"/XObject << /A 6 0 R >>",
        form(b"/X Do", b"/XObject << /X 7 0 R >>"),
        form(b"q /X Do Q q /X Do Q"),
    )
    assert _verdict(loop) == "cycle"
    more = []
    number = 6
    for _ in range(20):
        more.append(
            form(
                b"q /X Do Q q /X Do Q",
                b"/XObject << /X %d 0 R /Y %d 0 R >>" % (number + 1, number + 2),
            )
        )
        more.append(form(b"q /Y Do Q q /Y Do Q"))
        number += 2
    more.append(form(b"0 0 1 1 re f"))
    bomb = _page_drawing(tmp_path / "alternating.pdf", b"/A Do", b"/XObject << /A 6 0 R >>", *more)
    assert _verdict(bomb) == "unbounded"


def test_resources_given_as_a_stream_are_read_as_its_dictionary(tmp_path: Path) -> None:
    """pdfium reads a stream's dictionary where a dictionary is due."""
    objects = hostile._one_page(b"/X Do")  # noqa: SLF001
    objects[2] = objects[2].replace(b"/Resources <<", b"/Resources << /XObject 6 0 R")
    objects.append(hostile._stream(b"", b"/X 7 0 R"))  # noqa: SLF001
    for level in range(40):
        if level < 39:
            objects.append(form(b"q /X Do Q q /X Do Q", b"/XObject << /X %d 0 R >>" % (8 + level)))
        else:
            objects.append(form(b"0 0 1 1 re f"))
    path = raw_pdf(tmp_path / "stream.pdf", objects)
    assert _verdict(path) == "unbounded"


def test_a_soft_mask_or_pattern_that_draws_counts_for_every_painting_after_it(
    tmp_path: Path,
) -> None:
    """Set once, a soft mask (or a pattern) may be drawn again for each thing
    painted under it: one that draws 2**10 forms under 1,000 fills is past
    a bound of 250,000; under one fill it is not."""
    inner = [
        form(b"q /X Do Q q /X Do Q", b"/XObject << /X %d 0 R >>" % (8 + level))
        if level < 9
        else form(b"0 0 1 1 re f")
        for level in range(10)
    ]
    state = b"<< /Type /ExtGState /SMask << /Type /Mask /S /Luminosity /G 7 0 R >> >>"
    many = _page_drawing(
        tmp_path / "many.pdf",
        b"/G gs " + b"0 0 1 1 re f " * 1000,
        b"/ExtGState << /G 6 0 R >>",
        state,
        *inner,
    )
    assert _verdict(many) == "unbounded"
    once = _page_drawing(
        tmp_path / "once.pdf", b"/G gs 0 0 1 1 re f", b"/ExtGState << /G 6 0 R >>", state, *inner
    )
    assert _verdict(once) == ""


def test_a_type3_glyph_that_draws_counts_for_every_byte_shown(tmp_path: Path) -> None:
    font = (
        b"<< /Type /Font /Subtype /Type3 /FontBBox [0 0 1 1] /FontMatrix [1 0 0 1 0 0]"
        b" /CharProcs << /a 7 0 R >> /Encoding << /Differences [97 /a] >> /FirstChar 97"
        b" /LastChar 97 /Widths [1] /Resources << /XObject << /X 8 0 R >> >> >>"
    )
    inner = [
        form(b"q /X Do Q q /X Do Q", b"/XObject << /X %d 0 R >>" % (9 + level))
        if level < 9
        else form(b"0 0 1 1 re f")
        for level in range(10)
    ]
    objects = hostile._one_page(b"BT /T 1 Tf (" + b"a" * 1000 + b") Tj ET")  # noqa: SLF001
    objects[2] = objects[2].replace(b"/Font << /F1 5 0 R >>", b"/Font << /F1 5 0 R /T 6 0 R >>")
    objects += [font, hostile._stream(b"1 0 d0 /X Do"), *inner]  # noqa: SLF001
    path = raw_pdf(tmp_path / "glyphs.pdf", objects)
    assert _verdict(path) == "unbounded"


def test_a_deep_chain_is_walked_without_recursion_and_passes(tmp_path: Path) -> None:
    """1,500 forms each drawing the next once: 1,501 draws, no loop, and deeper
    than Python's recursion limit."""
    objects = hostile._one_page(b"/X Do")  # noqa: SLF001
    objects[2] = objects[2].replace(b"/Resources <<", b"/Resources << /XObject << /X 6 0 R >>")
    for level in range(1500):
        last = level == 1499
        objects.append(
            form(b"0 0 1 1 re f")
            if last
            else form(b"/X Do", b"/XObject << /X %d 0 R >>" % (7 + level))
        )
    path = raw_pdf(tmp_path / "deep.pdf", objects)
    assert _verdict(path) == ""
    assert _verdict(path, max_draws=1500) == "unbounded"


def test_pages_sharing_their_forms_work_them_out_once(tmp_path: Path) -> None:
    """Two hundred pages drawing the same fifty forms, each once: 51 draws a
    page, and no work bound is reached by the sharing."""
    count = 50
    page_objects = []
    forms = [form(b"0 0 1 1 re f") for _ in range(count)]
    first_form = 4 + 200 * 2
    names = b" ".join(b"/F%d %d 0 R" % (i, first_form + i) for i in range(count))
    drawing = b" ".join(b"/F%d Do" % i for i in range(count))
    resources = 3
    kids = b" ".join(b"%d 0 R" % (4 + 2 * i) for i in range(200))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count 200 >>" % kids,
        b"<< /XObject << %s >> >>" % names,
    ]
    for i in range(200):
        page_objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 9 9] /Resources %d 0 R"
            b" /Contents %d 0 R >>" % (resources, 5 + 2 * i)
        )
        page_objects.append(hostile._stream(drawing))  # noqa: SLF001
    path = raw_pdf(tmp_path / "shared.pdf", objects + page_objects + forms)
    assert _verdict(path, max_draws=count + 1) == ""
    assert _verdict(path, max_draws=count) == "unbounded"


def _chain(first: int, levels: int = 40) -> list[bytes]:
    """Forms numbered from ``first``, each drawing the next twice."""
    return [
        form(b"q /X Do Q q /X Do Q", b"/XObject << /X %d 0 R >>" % (first + level + 1))
        if level + 1 < levels
        else form(b"0 0 1 1 re f")
        for level in range(levels)
    ]


@pytest.mark.parametrize("mark", [b"", b"/Subtype /Type3 "])
def test_a_pattern_is_read_as_a_pattern_whatever_its_subtype_says(
    tmp_path: Path, mark: bytes
) -> None:
    """What draws a thing decides how it is read: a tiling pattern marked
    ``/Subtype /Type3`` is still a pattern cell, drawing what it names."""
    pattern = hostile._stream(  # noqa: SLF001
        b"/X Do",
        b"/PatternType 1 /PaintType 1 /TilingType 1 /BBox [0 0 1 1] /XStep 1 /YStep 1 "
        + mark
        + b"/Resources << /XObject << /X 7 0 R >> >>",
    )
    path = _page_drawing(
        tmp_path / "pattern.pdf",
        b"/Pattern cs /P scn 0 0 1 1 re f",
        b"/Pattern << /P 6 0 R >>",
        pattern,
        *_chain(7),
    )
    assert _verdict(path) == "unbounded"


def test_a_pattern_set_on_the_page_counts_for_the_fills_of_the_forms_it_draws(
    tmp_path: Path,
) -> None:
    """The page sets a pattern and draws a form that fills 1,000 times: each
    fill may draw the pattern's 2**9 forms again."""
    pattern = hostile._stream(  # noqa: SLF001
        b"/X Do",
        b"/PatternType 1 /PaintType 1 /TilingType 1 /BBox [0 0 1 1] /XStep 1 /YStep 1"
        b" /Resources << /XObject << /X 8 0 R >> >>",
    )
    fills = form(b"0 0 1 1 re f " * 1000)
    path = _page_drawing(
        tmp_path / "fills.pdf",
        b"/Pattern cs /P scn /Y Do",
        b"/Pattern << /P 6 0 R >> /XObject << /Y 7 0 R >>",
        pattern,
        fills,
        *_chain(8, levels=10),
    )
    assert _verdict(path) == "unbounded"
    assert _verdict(path, max_draws=10**9) == ""


def test_a_page_deep_in_its_tree_draws_from_its_farthest_ancestor(tmp_path: Path) -> None:
    """Seventy levels of ``/Pages`` over the page, resources only at the root:
    viewers find them up the ``/Parent`` chain, and so does the count."""
    depth = 70
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    # Objects 2 .. depth + 1 are /Pages nodes, each the parent of the next.
    for level in range(depth):
        number = 2 + level
        kid = number + 1
        parent = b"/Parent %d 0 R " % (number - 1) if level else b""
        resources = (
            b"/Resources << /XObject << /X %d 0 R >> >> " % (depth + 4) if not level else b""
        )
        objects.append(b"<< /Type /Pages /Kids [%d 0 R] /Count 1 %s%s>>" % (kid, parent, resources))
    page = depth + 2
    objects.append(
        b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 9 9] /Contents %d 0 R >>"
        % (page - 1, page + 1)
    )
    objects.append(hostile._stream(b"/X Do"))  # noqa: SLF001
    objects += _chain(depth + 4)
    path = raw_pdf(tmp_path / "deep-tree.pdf", objects)
    assert _verdict(path) == "unbounded"


def test_pages_sharing_their_annotations_work_them_out_once(tmp_path: Path) -> None:
    """A hundred pages share one array of 500 annotations with appearances:
    the appearances are worked out once, not once a page."""
    from quire.validator.pdfdrawing import _Drawing  # noqa: PLC0415 - the walk's own count

    pages, notes = 100, 500
    first_note = 3 + 2 * pages + 1
    annots = b"[%s]" % b" ".join(b"%d 0 R" % (first_note + i) for i in range(notes))
    kids = b" ".join(b"%d 0 R" % (3 + 2 * i) for i in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages),
    ]
    array = first_note + notes
    for i in range(pages):
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 9 9] /Contents %d 0 R /Annots %d 0 R >>"
            % (4 + 2 * i, array)
        )
        objects.append(hostile._stream(b"0 0 1 1 re f"))  # noqa: SLF001
    appearance = array + 1
    for _ in range(notes):
        objects.append(
            b"<< /Type /Annot /Subtype /Square /Rect [0 0 1 1] /AP << /N %d 0 R >> >>" % appearance
        )
    objects.append(annots)
    objects.append(form(b"0 0 1 1 re f"))
    path = raw_pdf(tmp_path / "shared-notes.pdf", objects)
    with pikepdf.open(path, attempt_recovery=False) as pdf:
        walk = _Drawing(PdfGraph.read(pdf, 10**6), 10**6)
        for page in walk.pages():
            walk.page(page)
    assert walk.work < 4 * notes + 10 * pages, walk.work


def _type3_page(tmp_path: Path, shown: bytes, glyph: bytes, extra: bytes = b"") -> Path:
    font = (
        b"<< /Type /Font /Subtype /Type3 /FontBBox [0 0 1 1] /FontMatrix [1 0 0 1 0 0]"
        b" /CharProcs << /a 7 0 R >> /Encoding << /Differences [97 /a] >> /FirstChar 97"
        b" /LastChar 97 /Widths [1] >>"
    )
    objects = hostile._one_page(b"BT /T 1 Tf " + extra + b"(" + shown + b") Tj ET")  # noqa: SLF001
    objects[2] = objects[2].replace(b"/Font << /F1 5 0 R >>", b"/Font << /F1 5 0 R /T 6 0 R >>")
    objects += [font, hostile._stream(b"1 0 d0 " + glyph)]  # noqa: SLF001
    return raw_pdf(tmp_path / "glyphs.pdf", objects)


def test_a_glyph_that_paints_much_counts_for_every_byte_shown(tmp_path: Path) -> None:
    """4,000 glyphs whose procedure fills 400 times: 1.6 million fills for one
    string, past the bound; a glyph of one fill shown as often is not."""
    heavy = _type3_page(tmp_path, b"a" * 4000, b"0 0 1 1 re f " * 400)
    assert _verdict(heavy) == "unbounded"
    light = _type3_page(tmp_path, b"a" * 4000, b"0 0 1 1 re f")
    assert _verdict(light) == ""


def test_many_patterns_named_on_a_page_count_as_the_two_in_effect(tmp_path: Path) -> None:
    """Thirty pattern names on a page of 5,000 fills: at most a fill and a
    stroke pattern are in effect at a time, so the page is counted as if two
    of them were set for every fill, not thirty."""
    pattern = hostile._stream(  # noqa: SLF001
        b"/X Do",
        b"/PatternType 1 /PaintType 1 /TilingType 1 /BBox [0 0 1 1] /XStep 1 /YStep 1"
        b" /Resources << /XObject << /X 7 0 R >> >>",
    )
    names = b" ".join(b"/P%d 6 0 R" % i for i in range(30))
    setting = b" ".join(b"/Pattern cs /P%d scn" % i for i in range(30))
    path = _page_drawing(
        tmp_path / "hatches.pdf",
        setting + b" " + b"0 0 1 1 re f " * 5000,
        b"/Pattern << %s >>" % names,
        pattern,
        form(b"0 0 1 1 re f"),
    )
    assert _verdict(path) == ""
    assert _verdict(path, max_draws=2 * 5000 * 2) == "unbounded"
