"""What the validator looks for inside a PDF, run in a sandbox worker.

Every check is bounded by the file, not by what the file claims: stream sizes
are measured by decoding every standard filter and chain incrementally with a
cap (never trusting ``/Length``; see ``decoding``), the object
walk is iterative with a depth and count limit, and qpdf's own recovery is
off, so a file that needs repair is refused rather than reinterpreted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from quire.reasons import ReasonCode
from quire.validator.calculator import unbounded_calculator
from quire.validator.decoding import DecodeError, UnsupportedFilter, decoded_size
from quire.validator.pdfdrawing import drawing_verdict
from quire.validator.pdfgraph import Node, PdfGraph, text

__all__ = ["PdfCheck", "PdfLimits", "UNREPAIRABLE_SHAPES", "check_pdf"]

ACTIVE_ACTIONS = {
    "/JavaScript",
    "/Launch",
    "/GoToR",
    "/GoToE",
    "/SubmitForm",
    "/ImportData",
    "/RichMediaExecute",
    "/Rendition",
    "/Movie",
    "/Sound",
}
ACTIVE_KEYS = {"/JS", "/JavaScript", "/XFA", "/EmbeddedFiles", "/RichMedia"}
"""Keys that make a dictionary active by themselves. ``/AA`` (additional
actions) is not one: what its actions do decides, and each action dictionary
is judged by its own ``/S`` (a page that turns to another page on open is not
active; one that runs JavaScript is)."""
EMBEDDED_FILE_KEY = "/EF"
"""A file specification's embedded files: a dictionary of streams. The same
key in usage-rights ``/TransformParams`` is an array of permitted operations
on attachments (``[/Create /Delete]``), which embeds nothing."""
ACTIVE_SUBTYPES = {"/FileAttachment", "/RichMedia", "/Screen", "/Movie", "/Sound", "/3D"}
MAX_WALK_DEPTH = 64
_NOTABLE = frozenset({*ACTIVE_KEYS, EMBEDDED_FILE_KEY, "/S", "/Subtype", "/Next"})
"""Keys without which a dictionary is neither active nor links on."""
_NESTED = (dict, list)
Key = tuple[int, int]
MAX_ACTION_HOPS = 10_000
"""The least active-content search work allowed for any file (see ``active_walk_limit``)."""
ACTIVE_WORK_PER_OBJECT = 4


@dataclass(frozen=True)
class PdfLimits:
    """What a PDF may hold before it is refused, and what the ruleset allows."""

    max_pages: int = 2000
    max_decompressed_bytes: int = 256 * 1024 * 1024
    """Sum over all streams, measured by decoding with a cap."""
    max_objects: int = 500_000
    allow_active_content: bool = False
    review_ambiguity: bool = False
    """A source two readers read differently is parked for review (ruleset
    repair policy "review") instead of refused (``faithfulness``)."""


def _is_active(graph: PdfGraph, dictionary: Node) -> bool:
    """Whether ``dictionary`` is active content."""
    keys = dictionary.value
    if not ACTIVE_KEYS.isdisjoint(keys):
        return True
    if EMBEDDED_FILE_KEY in keys and isinstance(
        graph.get(dictionary, EMBEDDED_FILE_KEY).value, dict
    ):
        return True
    if "/S" in keys and text(graph.get(dictionary, "/S").value) in ACTIVE_ACTIONS:
        return True
    return "/Subtype" in keys and text(graph.get(dictionary, "/Subtype").value) in ACTIVE_SUBTYPES


class _TooDeep(Exception):
    """Nesting beyond what the validator inspects: refused, never skipped."""


class _ActiveSearch:
    """Whether active content is reachable, following action chains (/Next)
    through indirect objects too, over one file: every search shares one
    ``seen`` set, so each indirect object is walked at most once per file.

    Sharing is sound because a search stops at the first active dictionary: an
    object seen by a search that found nothing cannot reach active content,
    and once something is found nothing is searched again. The work (indirect
    objects taken and dictionaries visited) is bounded per file by ``limit``;
    past it the file is refused (``_TooDeep``), never half-inspected."""

    def __init__(self, graph: PdfGraph, limit: int) -> None:
        self.graph = graph
        self.limit = limit
        self.work = 0
        self._seen: set[tuple[int, int]] = set()

    def _spend(self) -> None:
        self.work += 1
        if self.work > self.limit:
            raise _TooDeep()

    def reaches_active(self, root: Node) -> bool:
        graph = self.graph
        pending = [root]
        while pending:
            item = pending.pop()
            self._spend()
            if item.key is not None:
                if item.key in self._seen:
                    continue
                self._seen.add(item.key)
            # The dictionaries reachable from the item through direct objects
            # (a reference is a string here), each judged as it is reached.
            walk: list[tuple[Any, int, Key | None]] = [(item.value, 0, item.key)]
            while walk:
                value, depth, key = walk.pop()
                if depth > MAX_WALK_DEPTH:
                    raise _TooDeep()
                if type(value) is dict:
                    self.work += 1  # _spend(), inline: once per dictionary of the file
                    if self.work > self.limit:
                        raise _TooDeep()
                    if not _NOTABLE.isdisjoint(value):
                        dictionary = Node(key, value)
                        if _is_active(graph, dictionary):
                            return True
                        if "/Next" in value:
                            following = graph.get(dictionary, "/Next")
                            if graph.is_dictionary(following) or isinstance(following.value, list):
                                pending.append(following)
                    inner: Any = value.values()
                elif type(value) is list:
                    inner = value
                else:
                    continue
                for child in inner:
                    if type(child) in _NESTED:
                        walk.append((child, depth + 1, None))
        return False


def _inputs(function: Any) -> int:
    """How many operands a function takes (half its ``/Domain``)."""
    import pikepdf

    domain = function.get("/Domain")
    return len(domain) // 2 if isinstance(domain, pikepdf.Array) else 0


def active_walk_limit(limits: PdfLimits) -> int:
    """The most work one file's active-content search may do: a few steps per
    object the file may hold (each object is taken once, plus the dictionaries
    inside it and the /Next links out of it), never less than MAX_ACTION_HOPS."""
    return max(MAX_ACTION_HOPS, ACTIVE_WORK_PER_OBJECT * limits.max_objects)


class PdfCheck(NamedTuple):
    """What the strict checks found in one PDF: its pages and the first reason to
    refuse it."""

    pages: int
    reason: str
    """The first reason to refuse; empty when the PDF passes."""
    detail: str = ""
    """MALFORMED_PDF's sub-code: ``STRUCTURE_TOO_DEEP``, ``TOO_MANY_OBJECTS``,
    ``DRAWING_UNBOUNDED``
    (hostile shapes a repair cannot help), ``UNDECODABLE_STREAM``,
    ``NO_PAGES`` or ``QPDF_WARNING`` (damage a repair may fix)."""
    damage: tuple[str, ...] = ()
    """Damage the decoders tolerated as viewers do (``FLATE_CHECKSUM_WRONG``)."""


UNREPAIRABLE_SHAPES = frozenset({"STRUCTURE_TOO_DEEP", "TOO_MANY_OBJECTS", "DRAWING_UNBOUNDED"})


def check_pdf(pdf: Any, limits: PdfLimits, graph: PdfGraph | None = None) -> PdfCheck:
    """Page count and the first reason to refuse (empty when the PDF passes).
    ``graph`` is the document's objects when they were read already."""
    if graph is None:
        graph = PdfGraph.read(pdf, limits.max_objects)
    try:
        return _check_pdf(pdf, limits, graph)
    except _TooDeep:
        return PdfCheck(0, ReasonCode.MALFORMED_PDF, "STRUCTURE_TOO_DEEP")


def _malformed(pages: int, detail: str) -> PdfCheck:
    return PdfCheck(pages, ReasonCode.MALFORMED_PDF, detail)


def _check_pdf(pdf: Any, limits: PdfLimits, graph: PdfGraph) -> PdfCheck:
    pages = len(pdf.pages)
    if pages > limits.max_pages:
        return PdfCheck(pages, ReasonCode.TOO_MANY_PAGES)
    for page in pdf.pages:
        page.obj.get("/Contents")
    if pdf.get_warnings():
        return _malformed(pages, "QPDF_WARNING")
    if pages == 0:
        return _malformed(pages, "NO_PAGES")
    decoded = 0
    tolerated: set[str] = set()
    active = False
    search = _ActiveSearch(graph, active_walk_limit(limits))
    # Every object that can hold a dictionary is searched: arrays too, since
    # an indirect /Annots array may hold a JavaScript link as a direct value.
    containers = graph.containers()
    for key in graph.order:
        node = containers.get(key)
        stream = graph.streams.get(key)
        if stream is not None:
            try:
                decoded += decoded_size(
                    stream,
                    limits.max_decompressed_bytes - decoded,
                    tolerated,
                    node.value if node is not None else None,
                )
            except (UnsupportedFilter, DecodeError):
                return _malformed(pages, "UNDECODABLE_STREAM")
            if decoded > limits.max_decompressed_bytes:
                return PdfCheck(pages, ReasonCode.DECOMPRESSED_SIZE_EXCEEDED)
            # Measured above, so reading it whole is bounded. The type is asked
            # of pikepdf (which follows a reference to a number) only of the
            # streams that name one.
            if (
                node is not None
                and "/FunctionType" in node.value
                and stream.get("/FunctionType") == 4
                and unbounded_calculator(stream.read_bytes(), _inputs(stream))
            ):
                return _malformed(pages, "STRUCTURE_TOO_DEEP")
        if not active and node is not None:
            active = search.reaches_active(node)
    if not graph.complete:
        return _malformed(pages, "TOO_MANY_OBJECTS")
    drawing = drawing_verdict(graph)
    if drawing == "cycle":
        return PdfCheck(pages, ReasonCode.CYCLIC_STRUCTURE)
    if drawing:
        return _malformed(pages, "DRAWING_UNBOUNDED")
    names = pdf.Root.get("/Names")
    if names is not None and "/JavaScript" in names:
        active = True
    if not active and graph.root.key is None:
        # A catalog written directly in the trailer is no object of its own:
        # searched here, with all it holds directly (some viewers open it).
        active = search.reaches_active(graph.root)
    if not active and "/OpenAction" in pdf.Root:
        active = search.reaches_active(graph.get(graph.root, "/OpenAction"))
    if pdf.get_warnings():
        return _malformed(pages, "QPDF_WARNING")  # e.g. nesting qpdf would not parse
    if active and not limits.allow_active_content:
        return PdfCheck(pages, ReasonCode.ACTIVE_CONTENT)
    return PdfCheck(pages, "", damage=tuple(sorted(tolerated)))
