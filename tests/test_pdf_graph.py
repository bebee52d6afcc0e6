"""The validator's structure walks run over ``pdfgraph``: every object read
once from qpdf as JSON. What they see must be what pikepdf shows: the same
keys, references followed to the same objects, streams told from
dictionaries; and a file whose JSON Python refuses (qpdf writes reals as the
file spells them) is still read whole, so nothing hides behind a ``+.5``."""

from __future__ import annotations

import collections
from pathlib import Path

import pikepdf
import pytest
from conftest import CORPUS

from quire.blobstore import sha256_file
from quire.reasons import ReasonCode
from quire.testing import hostile
from quire.validator.inspection import inspect_source
from quire.validator.pdfgraph import NULL, PdfGraph, text


def _sample(every: int = 40) -> list[Path]:
    """The first PDF of each corpus folder and every ``every``-th after it."""
    if not CORPUS.is_dir():
        return []
    by_folder: dict[Path, list[Path]] = collections.defaultdict(list)
    for path in sorted(CORPUS.rglob("*.pdf")):
        by_folder[path.parent].append(path)
    return sorted(p for files in by_folder.values() for p in files[::every])


def _opened(path: Path) -> pikepdf.Pdf | None:
    try:
        return pikepdf.open(path, attempt_recovery=False, inherit_page_attributes=False)
    except (pikepdf.PdfError, pikepdf.PasswordError, ValueError):
        return None


@pytest.mark.parametrize("path", _sample(), ids=lambda p: p.name)
def test_the_graph_shows_what_pikepdf_shows(path: Path) -> None:
    pdf = _opened(path)
    if pdf is None:
        return  # unreadable without recovery: the walks never see it
    with pdf:
        if pdf.is_encrypted:
            return
        graph = PdfGraph.read(pdf, 500_000)
        assert graph.complete
        objects = {node.key: node for node in graph.objects()}
        for obj in pdf.objects:
            if not isinstance(obj, pikepdf.Dictionary | pikepdf.Stream):
                continue
            node = objects[obj.objgen]
            assert graph.is_stream(node) == isinstance(obj, pikepdf.Stream)
            mine = obj.stream_dict if isinstance(obj, pikepdf.Stream) else obj
            assert set(node.value) == set(mine.keys())
            for key in mine.keys():
                value = mine.get(key)
                followed = graph.get(node, key)
                if isinstance(value, pikepdf.Object) and value.is_indirect:
                    assert followed.key == value.objgen
                if isinstance(value, pikepdf.Dictionary | pikepdf.Stream):
                    assert isinstance(followed.value, dict)
                elif isinstance(value, pikepdf.Array):
                    assert isinstance(followed.value, list)
                    assert len(followed.value) == len(value)
                elif isinstance(value, pikepdf.Name):
                    assert text(followed.value) == str(value)


def test_references_are_followed_to_null_when_nothing_is_there(tmp_path: Path) -> None:
    objects = hostile._one_page()  # noqa: SLF001 - the shared one-page skeleton
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R /Missing 99 0 R /Name 6 0 R /Ring 7 0 R >>"
    objects.append(b"/JavaScript")  # 6: an indirect name
    objects.append(b"8 0 R")  # 7 and 8: objects whose whole value is the other
    objects.append(b"7 0 R")
    path = hostile.raw_pdf(tmp_path / "refs.pdf", objects)
    with pikepdf.open(path) as pdf:
        graph = PdfGraph.read(pdf, 1000)
        assert graph.get(graph.root, "/Missing").value is None
        assert graph.get(graph.root, "/Absent") == NULL
        named = graph.get(graph.root, "/Name")
        assert (named.key, text(named.value)) == ((6, 0), "/JavaScript")
        assert graph.get(graph.root, "/Ring").value is None
        page = graph.get(graph.get(graph.root, "/Pages"), "/Kids")
        assert [item.key for item in graph.items(page)] == [(3, 0)]
        contents = graph.get(graph.items(page)[0], "/Contents")
        assert graph.is_stream(contents) and not graph.is_dictionary(contents)


def _references(value: object) -> list[str]:
    """Every reference written anywhere in ``value`` (qpdf's ``"N G R"``)."""
    if isinstance(value, dict):
        return [r for item in value.values() for r in _references(item)]
    if isinstance(value, list):
        return [r for item in value for r in _references(item)]
    return [value] if isinstance(value, str) and value[:1].isdigit() else []


@pytest.mark.parametrize("sample", ["refs", *(p.name for p in _sample(120))])
def test_a_reference_known_at_once_leads_where_following_it_leads(
    sample: str, tmp_path: Path
) -> None:
    """References are resolved as the graph is made (``_KNOWN_AT_ONCE``):
    each leads to what following it reference by reference gives, chains,
    rings and references to nothing included."""
    if sample == "refs":
        objects = hostile._one_page()  # noqa: SLF001 - the shared one-page skeleton
        objects[0] = b"<< /Type /Catalog /Pages 2 0 R /Missing 99 0 R /Chain 6 0 R /Ring 8 0 R >>"
        objects.append(b"7 0 R")  # 6: an object whose whole value is a reference
        objects.append(b"<< /Deep true >>")  # 7
        objects.append(b"9 0 R")  # 8 and 9: each the other
        objects.append(b"8 0 R")
        path = hostile.raw_pdf(tmp_path / "refs.pdf", objects)
    else:
        path = next(p for p in _sample(120) if p.name == sample)
    pdf = _opened(path)
    if pdf is None or pdf.is_encrypted:
        return
    with pdf:
        graph = PdfGraph.read(pdf, 500_000)
        references = {r for node in graph.objects() for r in _references(node.value)}
        assert references or sample != "refs"
        for reference in references:
            assert graph.node(reference) == graph._follow(reference), reference  # noqa: SLF001
        if sample == "refs":
            assert graph.get(graph.root, "/Ring").value is None
            assert graph.get(graph.root, "/Missing").value is None


def _spelled(path: Path, action: bytes, *, kids: bytes = b"[3 0 R]") -> Path:
    """A page whose open action is ``action`` beside reals spelled ``+.5``,
    which qpdf copies into its JSON as they are."""
    objects = hostile._one_page(page_extra=b"/UserUnit +.88 /AA << /O 6 0 R >> ")  # noqa: SLF001
    objects[1] = b"<< /Type /Pages /Kids %s /Count 1 /Odd +.5 >>" % kids
    objects.append(b"<< /Odd +.123 " + action + b" >>")
    return hostile.raw_pdf(path, objects)


def test_reals_json_refuses_do_not_hide_what_the_walks_look_for(tmp_path: Path) -> None:
    plain = _spelled(tmp_path / "goto.pdf", b"/S /GoTo /D [3 0 R /Fit]")
    with pikepdf.open(plain) as pdf:
        graph = PdfGraph.read(pdf, 1000)
        pages = graph.get(graph.root, "/Pages")
        assert set(pages.value) == {"/Type", "/Kids", "/Count", "/Odd"}
        assert pages.value["/Odd"] == pytest.approx(0.5)
    assert inspect_source(str(plain), sha256_file(plain)[0], "application/pdf").reason == ""
    script = _spelled(tmp_path / "js.pdf", b"/S /JavaScript /JS (app.alert(1))")
    found = inspect_source(str(script), sha256_file(script)[0], "application/pdf")
    assert found.reason == ReasonCode.ACTIVE_CONTENT
    looped = _spelled(tmp_path / "loop.pdf", b"/S /GoTo /D [3 0 R /Fit]", kids=b"[3 0 R 2 0 R]")
    found = inspect_source(str(looped), sha256_file(looped)[0], "application/pdf")
    assert found.reason == ReasonCode.CYCLIC_STRUCTURE


def test_a_file_with_more_objects_than_allowed_is_not_read_whole(tmp_path: Path) -> None:
    objects = hostile._one_page()  # noqa: SLF001
    objects += [b"<< /N %d >>" % n for n in range(50)]
    path = hostile.raw_pdf(tmp_path / "many.pdf", objects)
    with pikepdf.open(path) as pdf:
        assert not PdfGraph.read(pdf, 20).complete
        assert PdfGraph.read(pdf, 100).complete
