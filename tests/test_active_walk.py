"""The active-content search is linear in the file (issue 13): a long chain of
indirect /Next actions is walked once per file, not once per object, and an
active action at the end of such a chain is still found. Asserted on the work
done (the search's counter and its per-file bound), not on wall time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pikepdf
import pytest

from quire.blobstore import sha256_file
from quire.reasons import ReasonCode
from quire.testing import hostile
from quire.validator import pdfchecks
from quire.validator.inspection import inspect_source
from quire.validator.pdfchecks import (
    ACTIVE_WORK_PER_OBJECT,
    PdfLimits,
    _ActiveSearch,
    check_pdf,
)
from quire.validator.pdfgraph import Node, PdfGraph

LENGTH = 20_000
SKELETON = 5  # hostile._one_page: catalog, pages, page, contents, font


def _chain(path: Path, last: bytes = b"/S /GoTo /D [3 0 R /Fit]") -> Path:
    """The catalog's /OpenAction starts a chain of LENGTH indirect /Next actions;
    the last one is ``last``."""
    objects = hostile._one_page()  # noqa: SLF001 - the shared one-page skeleton
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R /OpenAction 6 0 R >>"
    first = len(objects) + 1
    for n in range(LENGTH):
        if n + 1 < LENGTH:
            objects.append(b"<< /S /GoTo /D [3 0 R /Fit] /Next %d 0 R >>" % (first + n + 1))
        else:
            objects.append(b"<< " + last + b" >>")
    return hostile.raw_pdf(path, objects)


def _search_all(pdf: pikepdf.Pdf) -> _ActiveSearch:
    """The search as check_pdf runs it: from every object, then /OpenAction."""
    graph = PdfGraph.read(pdf, 10**9)
    search = _ActiveSearch(graph, limit=10**9)
    for node in graph.containers().values():
        assert not search.reaches_active(node)
    assert not search.reaches_active(_open_action(graph))
    return search


def _open_action(graph: PdfGraph) -> Node:
    return graph.get(graph.root, "/OpenAction")


def test_a_long_chain_of_next_actions_is_walked_once(tmp_path: Path) -> None:
    path = _chain(tmp_path / "chain.pdf")
    with pikepdf.open(path, attempt_recovery=False) as pdf:
        objects = len(pdf.objects)
        search = _search_all(pdf)
    # Each object taken once and its dictionaries visited once, plus one look
    # back at an already-seen link per /Next: linear, where a search per object
    # along the chain would be about LENGTH**2 / 2 = 200 million steps.
    assert search.work <= 4 * objects, (search.work, objects)


def test_a_long_chain_passes_inspection_within_a_bound_scaled_to_its_objects(
    tmp_path: Path,
) -> None:
    path = _chain(tmp_path / "chain.pdf")
    tight = PdfLimits(max_objects=LENGTH + SKELETON + 1)
    assert ACTIVE_WORK_PER_OBJECT * tight.max_objects < LENGTH**2 // 100
    with pikepdf.open(path, attempt_recovery=False) as pdf:
        assert check_pdf(pdf, tight)[:2] == (1, "")
    digest, _ = sha256_file(path)
    assert inspect_source(str(path), digest, "application/pdf", tight).reason == ""


def test_active_content_at_the_end_of_a_long_chain_is_found(tmp_path: Path) -> None:
    path = _chain(tmp_path / "js.pdf", last=b"/S /JavaScript /JS (app.alert(1))")
    tight = PdfLimits(max_objects=LENGTH + SKELETON + 1)
    with pikepdf.open(path, attempt_recovery=False) as pdf:
        assert check_pdf(pdf, tight)[:2] == (1, ReasonCode.ACTIVE_CONTENT)
        allowed = PdfLimits(max_objects=tight.max_objects, allow_active_content=True)
        assert check_pdf(pdf, allowed)[:2] == (1, "")


def test_a_chain_reached_only_from_open_action_is_still_searched(tmp_path: Path) -> None:
    """/OpenAction pointing at the chain's far end, with /Launch there."""
    path = _chain(tmp_path / "launch.pdf", last=b"/S /Launch /F (calc.exe)")
    with pikepdf.open(path, attempt_recovery=False) as pdf:
        search = _ActiveSearch(PdfGraph.read(pdf, 10**9), limit=10**9)
        assert search.reaches_active(_open_action(search.graph))
        assert search.work <= 3 * (LENGTH + 1)


def test_work_past_the_bound_is_refused_as_malformed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _chain(tmp_path / "chain.pdf")
    with pikepdf.open(path, attempt_recovery=False) as pdf:
        search = _ActiveSearch(PdfGraph.read(pdf, 10**9), limit=1000)
        try:
            search.reaches_active(_open_action(search.graph))
        except Exception as error:  # noqa: BLE001 - _TooDeep is private
            assert type(error).__name__ == "_TooDeep"
        else:
            raise AssertionError("the bound was not enforced")
        assert search.work == 1001
    # Through check_pdf: a file whose objects fit max_objects but whose search
    # would need more than the bound allows is MALFORMED_PDF, never half-read.
    monkeypatch.setattr(pdfchecks, "ACTIVE_WORK_PER_OBJECT", 1)
    monkeypatch.setattr(pdfchecks, "MAX_ACTION_HOPS", 0)
    with pikepdf.open(path, attempt_recovery=False) as pdf:
        limits = PdfLimits(max_objects=LENGTH + SKELETON + 1)
        assert check_pdf(pdf, limits)[:3] == (0, ReasonCode.MALFORMED_PDF, "STRUCTURE_TOO_DEEP")


def _with_additional_actions(path: Path, action: bytes) -> Path:
    objects = hostile._one_page(page_extra=b"/AA << /O 6 0 R >> ")  # noqa: SLF001
    objects.append(action)
    return hostile.raw_pdf(path, objects)


def test_additional_actions_are_judged_by_what_they_do(tmp_path: Path) -> None:
    """A page whose open action turns to a page is ordinary (veraPDF and
    Acrobat output has them); one whose open action runs JavaScript is not."""
    limits = PdfLimits()
    goto = _with_additional_actions(tmp_path / "goto.pdf", b"<< /S /GoTo /D [3 0 R /Fit] >>")
    script = _with_additional_actions(
        tmp_path / "js.pdf", b"<< /S /JavaScript /JS (app.alert(1)) >>"
    )
    with pikepdf.open(goto) as pdf:
        assert check_pdf(pdf, limits)[:2] == (1, "")
    with pikepdf.open(script) as pdf:
        assert check_pdf(pdf, limits)[:2] == (1, ReasonCode.ACTIVE_CONTENT)


def _usage_rights(path: Path, *, attachment: bool) -> Path:
    """A form with Reader usage rights (a UR3 signature whose TransformParams
    grant ``/EF [/Create /Delete]`` on attachments); with ``attachment``, a
    real file specification whose /EF holds an embedded file stream too."""
    objects = hostile._one_page()  # noqa: SLF001 - the shared one-page skeleton
    names = b"/Names << /EmbeddedFiles << /Names [(a.txt) 7 0 R] >> >>" if attachment else b""
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R /Perms << /UR3 6 0 R >> %s >>" % names
    objects.append(
        b"<< /Type /Sig /Filter /Adobe.PPKLite /SubFilter /adbe.pkcs7.detached"
        b" /Contents <00> /ByteRange [0 0 0 0] /Reference [<< /Type /SigRef"
        b" /TransformMethod /UR3 /TransformParams << /Type /TransformParams"
        b" /Annots [/Create /Delete /Modify] /Document [/FullSave]"
        b" /EF [/Create /Delete /Modify /Import] /Form [/Add /Delete /FillIn]"
        b" /V /2.2 >> >>] >>"
    )
    if attachment:
        objects.append(b"<< /Type /Filespec /F (a.txt) /EF << /F 8 0 R >> >>")
        objects.append(hostile._stream(b"hello", b"/Type /EmbeddedFile"))  # noqa: SLF001
    return hostile.raw_pdf(path, objects)


def test_usage_rights_are_not_an_embedded_file_and_an_attachment_is(tmp_path: Path) -> None:
    """``/EF`` in usage rights is an array of permissions; only a file
    specification's ``/EF`` dictionary embeds a file (ACTIVE_CONTENT)."""
    rights = _usage_rights(tmp_path / "rights.pdf", attachment=False)
    assert inspect_source(str(rights), sha256_file(rights)[0], "application/pdf").reason == ""
    attached = _usage_rights(tmp_path / "attached.pdf", attachment=True)
    found = inspect_source(str(attached), sha256_file(attached)[0], "application/pdf")
    assert found.reason == ReasonCode.ACTIVE_CONTENT


@pytest.mark.parametrize(
    ("build", "reason"),
    [
        (hostile.javascript_in_annotation_array, ReasonCode.ACTIVE_CONTENT),
        (hostile.attachment_in_annotation_array, ReasonCode.ACTIVE_CONTENT),
        (hostile.link_in_annotation_array, ""),
    ],
)
def test_a_dictionary_held_in_an_indirect_array_is_searched(
    tmp_path: Path, build: Any, reason: str
) -> None:
    """An array that is an object of its own is searched like a dictionary:
    a JavaScript link or an attachment held in it directly is found, an
    ordinary link is not refused."""
    path = build(tmp_path / "annotations.pdf")
    with pikepdf.open(path, attempt_recovery=False) as pdf:
        graph = PdfGraph.read(pdf, 10**9)
        held = [node for node in graph.containers().values() if isinstance(node.value, list)]
        assert held, "the annotations array is an indirect object"
        assert check_pdf(pdf, PdfLimits())[:2] == (1, reason)
    found = inspect_source(str(path), sha256_file(path)[0], "application/pdf")
    assert found.reason == reason
    allowed = PdfLimits(allow_active_content=True)
    assert inspect_source(str(path), sha256_file(path)[0], "application/pdf", allowed).reason == ""


@pytest.mark.parametrize(
    ("build", "reason"),
    [
        (hostile.javascript_in_direct_catalog, ReasonCode.ACTIVE_CONTENT),
        (hostile.plain_direct_catalog, ""),
    ],
)
def test_a_catalog_written_in_the_trailer_is_searched(
    tmp_path: Path, build: Any, reason: str
) -> None:
    """A catalog that is no object of its own (pdf.js opens it) is searched
    with everything it holds directly."""
    path = build(tmp_path / "catalog.pdf")
    with pikepdf.open(path, attempt_recovery=False) as pdf:
        assert PdfGraph.read(pdf, 10**9).root.key is None
        assert check_pdf(pdf, PdfLimits())[:2] == (1, reason)
    assert inspect_source(str(path), sha256_file(path)[0], "application/pdf").reason == reason
