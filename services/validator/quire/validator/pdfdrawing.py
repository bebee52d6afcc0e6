"""How much drawing each page asks of a viewer, bounded before anything draws it.

A page draws its content, and its content draws what its resources name:
forms, tiling patterns, Type 3 fonts' glyphs, and the soft-mask groups of
its graphics states. Each of those draws what its own resources name in
turn. A form, pattern or font without ``/Resources`` draws from the
resources of what drew it (the page's, or the form's that drew it), as
pdfium and pdf.js do. An annotation's appearance streams are drawn with the
page.

A document can make that drawing grow without any loop: forty forms that
each draw the next twice ask a viewer for 2**40 draws, and it never finishes
the page. So each page's draws are counted, and a page past ``MAX_DRAWS`` is
refused. A form counts once for every time its name appears in the content
that draws it. A pattern or a soft mask, once set, may be drawn again for
every painting operator that follows, and a Type 3 glyph procedure runs
for every glyph shown: when one of those draws anything in turn, it counts
once per painting operator (a pattern, a soft mask) or once per byte of the
content (a glyph), which bounds them from above. A drawing that reaches
itself is a loop (``pdfcycles`` finds the ones through a thing's own
resources; here, through inherited resources, appearances and soft masks
too).

Runs inside a sandbox worker, after every stream's decoded size was measured
(``pdfchecks``): reading a content stream whole is bounded by then. The walk
is iterative, and it works out each thing's draws once for the resources
it draws from.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from quire.validator.pdfgraph import Node, PdfGraph, text

__all__ = ["MAX_DRAWS", "MAX_EXPANSIONS", "canonical", "drawing_verdict", "names_used"]

MAX_DRAWS = 250_000
"""Draws one page may ask for (its forms, patterns, glyph procedures and soft
masks, nested); pdfium draws about 60,000 small forms a second."""
MAX_EXPANSIONS = 500_000
"""Things one document's walk may work out (each once for the resources it
draws from); beyond it the file is unbounded."""
_PARENT_HOPS = 64
_APPEARANCES = ("/N", "/R", "/D")
_WHITE = rb"\x00\t\n\x0c\r "
_NAME = re.compile(rb"/([^" + _WHITE + rb"/\[\]()<>{}%]*)")
"""A name token: PDF's white space (NUL included) and delimiters end it."""
_PAINT = re.compile(
    rb"(?:^|(?<=[" + _WHITE + rb"\])>]))(?:f\*?|F|B\*?|b\*?|S|s|sh|Do|Tj|TJ|'|\"|EI)"
    rb"(?=[" + _WHITE + rb"/\[(<%]|$)"
)
"""Operators that paint (fill, stroke, shade, draw an XObject, show text, an
inline image): each may draw a pattern or a soft mask in effect again. Also
found inside strings and image data, which only raises the bound."""
_ESCAPE = re.compile(rb"#([0-9A-Fa-f]{2})")
_ESCAPE_TEXT = re.compile(r"#([0-9A-Fa-f]{2})")
_FORM, _PATTERN, _GLYPHS, _MASK = "form", "pattern", "glyphs", "mask"

Key = tuple[int, int]
Identity = tuple[str, Any]
"""An object's key, or a direct value's identity (the graph keeps every value
it read alive, so an identity names one value for the walk's life)."""


class _Loop(Exception):
    pass


class _Unbounded(Exception):
    pass


def drawing_verdict(graph: PdfGraph, max_draws: int = MAX_DRAWS) -> str:
    """``"cycle"`` when some drawing reaches itself, ``"unbounded"`` when a
    page asks for more than ``max_draws`` draws (or the walk for more work
    than ``MAX_EXPANSIONS``), else empty."""
    walk = _Drawing(graph, max_draws)
    try:
        for page in walk.pages():
            walk.page(page)
    except _Loop:
        return "cycle"
    except _Unbounded:
        return "unbounded"
    return ""


def canonical(name: str) -> bytes:
    """A name as qpdf's JSON writes it (``/A B``, or ``n:/X#e9Y`` when its
    bytes are not UTF-8), as the bytes it stands for."""
    if name.startswith("n:/"):
        return _ESCAPE_TEXT.sub(lambda m: chr(int(m.group(1), 16)), name[3:]).encode("latin-1")
    return name[1:].encode("utf-8", "surrogateescape")


def names_used(content: bytes) -> Counter[bytes]:
    """How many times each name appears in a content stream, as the bytes it
    stands for (``#xx`` escapes decoded, as qpdf reads them)."""
    counts: Counter[bytes] = Counter()
    for raw in _NAME.findall(content):
        if b"#" in raw:
            raw = _ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), raw)
        counts[raw] += 1
    return counts


@dataclass
class _Content:
    names: Counter[bytes]
    painting: int
    """Painting operators in it."""
    size: int


@dataclass
class _Frame:
    """One thing being worked out: drawn from ``resources`` (its own when it
    has them)."""

    node: Node
    resources: Node
    memo: tuple[Identity, Identity | None]
    page_content: bool = False
    total: int = 1
    pending: list[tuple[str, int, Node]] = field(default_factory=list)
    """(how it multiplies, the times named, the thing) still to work out."""
    content: _Content | None = None
    waiting: tuple[str, int] | None = None
    """How the child being worked out now multiplies, and its times named."""


class _Drawing:
    def __init__(self, graph: PdfGraph, max_draws: int) -> None:
        self.graph = graph
        self.max_draws = max_draws
        self.expansions = 0
        self._contents: dict[Identity, _Content] = {}
        self._named_in: dict[Identity, dict[bytes, list[tuple[str, Node]]]] = {}
        self._known: dict[tuple[Identity, Identity | None], int] = {}
        """A thing's draws, by its identity and the resources it drew from
        (None when it has its own)."""

    def pages(self) -> list[Node]:
        """The page tree's leaves, as viewers find the pages they draw (each
        once; ``pdfcycles`` refused a tree that loops)."""
        graph = self.graph
        pages: list[Node] = []
        seen: set[Key] = set()
        pending = [graph.get(graph.root, "/Pages")]
        while pending:
            node = pending.pop()
            self._expand()
            if not isinstance(node.value, dict):
                continue
            if node.key is not None:
                if node.key in seen:
                    continue
                seen.add(node.key)
            kids = graph.get(node, "/Kids")
            if isinstance(kids.value, list):
                pending.extend(reversed(graph.items(kids)))
            else:
                pages.append(node)
        return pages

    def page(self, page: Node) -> None:
        graph = self.graph
        resources = self._page_resources(page)
        total = self._draws(page, resources, page_content=True)
        annotations = graph.get(page, "/Annots") if "/Annots" in page.value else None
        for annotation in graph.items(annotations) if annotations is not None else []:
            appearances = graph.get(annotation, "/AP")
            if not isinstance(appearances.value, dict):
                continue
            for name in _APPEARANCES:
                appearance = graph.get(appearances, name)
                if graph.is_stream(appearance):
                    streams = [appearance]
                elif isinstance(appearance.value, dict):
                    streams = [graph.node(v) for v in appearance.value.values()]
                else:
                    streams = []
                for stream in streams:
                    if graph.is_stream(stream):
                        total += self._draws(stream, resources)
                        if total > self.max_draws:
                            raise _Unbounded()
        if total > self.max_draws:
            raise _Unbounded()

    def _page_resources(self, page: Node) -> Node:
        """The page's resources, its own or the nearest /Pages ancestor's."""
        graph = self.graph
        node = page
        for _ in range(_PARENT_HOPS):
            resources = graph.get(node, "/Resources")
            if isinstance(resources.value, dict):
                return resources
            node = graph.get(node, "/Parent")
            if not isinstance(node.value, dict):
                break
        return _NO_RESOURCES

    def _expand(self) -> None:
        self.expansions += 1
        if self.expansions > MAX_EXPANSIONS:
            raise _Unbounded()

    def _draws(self, root: Node, resources: Node, *, page_content: bool = False) -> int:
        """How many draws drawing ``root`` once from ``resources`` asks for,
        itself included (iterative: a chain of forms as deep as a file may
        hold is walked without recursion)."""
        first = self._frame(root, resources, page_content)
        known = self._known.get(first.memo)
        if known is not None:
            return known
        stack = [first]
        path = {first.memo}
        self._open(first)
        while True:
            frame = stack[-1]
            if frame.pending:
                how, times, child = frame.pending.pop()
                inner = self._frame(child, frame.resources, False)
                known = self._known.get(inner.memo)
                if known is None and inner.memo in path:
                    raise _Loop()
                if known is None:
                    frame.waiting = (how, times)
                    path.add(inner.memo)
                    self._open(inner)
                    stack.append(inner)
                    continue
                self._add(frame, how, times, known)
                continue
            stack.pop()
            path.discard(frame.memo)
            self._known[frame.memo] = frame.total
            if not stack:
                return frame.total
            parent = stack[-1]
            assert parent.waiting is not None
            how, times = parent.waiting
            parent.waiting = None
            self._add(parent, how, times, frame.total)

    def _frame(self, node: Node, drawer: Node, page_content: bool) -> _Frame:
        """``node`` drawn by something whose resources are ``drawer``."""
        own = self.graph.get(node, "/Resources")
        if page_content:
            return _Frame(node, drawer, (_identity(node), None), page_content=True)
        if isinstance(own.value, dict):
            return _Frame(node, own, (_identity(node), None))
        return _Frame(node, drawer, (_identity(node), _identity(drawer)))

    def _open(self, frame: _Frame) -> None:
        """Find what ``frame``'s content draws, each with how often."""
        self._expand()
        named = self._named(frame.resources)
        if not named:
            return
        content = self._content(frame.node, frame.page_content)
        frame.content = content
        for name, times in content.names.items():
            for how, child in named.get(name, ()):
                frame.pending.append((how, times, child))

    def _add(self, frame: _Frame, how: str, times: int, draws: int) -> None:
        """Add a child's ``draws`` to ``frame``'s total, as often as it is drawn."""
        if draws > 1 and frame.content is not None:
            if how in (_PATTERN, _MASK):
                times = max(times, frame.content.painting)
            elif how == _GLYPHS:
                times = max(times, frame.content.size)
        frame.total += times * draws
        if frame.total > self.max_draws:
            raise _Unbounded()

    def _named(self, resources: Node) -> dict[bytes, list[tuple[str, Node]]]:
        """By name, the drawing things ``resources`` names (worked out once per
        resources dictionary: pages share them)."""
        identity = _identity(resources)
        known = self._named_in.get(identity)
        if known is not None:
            return known
        graph = self.graph
        found: dict[bytes, list[tuple[str, Node]]] = {}
        if isinstance(resources.value, dict):
            for category in ("/XObject", "/Pattern", "/Font", "/ExtGState"):
                if category not in resources.value:
                    continue
                named = graph.get(resources, category)  # a dictionary, or a stream's
                if not isinstance(named.value, dict):
                    continue
                for name, value in named.value.items():
                    drawn = _drawing(graph, category, graph.node(value))
                    if drawn is not None:
                        found.setdefault(canonical(name), []).append(drawn)
        self._named_in[identity] = found
        return found

    def _content(self, node: Node, page_content: bool) -> _Content:
        """What ``node``'s content names and paints (read once per thing)."""
        identity = _identity(node)
        known = self._contents.get(identity)
        if known is not None:
            return known
        graph = self.graph
        if page_content:
            contents = graph.get(node, "/Contents")
            streams = graph.items(contents) if isinstance(contents.value, list) else [contents]
        elif text(graph.get(node, "/Subtype").value) == "/Type3":
            procs = graph.get(node, "/CharProcs")
            values = procs.value.values() if isinstance(procs.value, dict) else ()
            streams = [graph.node(value) for value in values]
        else:
            streams = [node]
        data = b"\n".join(
            _read(graph.streams[stream.key])
            for stream in streams
            if stream.key is not None and stream.key in graph.streams
        )
        content = _Content(names_used(data), len(_PAINT.findall(data)), len(data))
        self._contents[identity] = content
        return content


_NO_RESOURCES = Node(None, {})


def _identity(node: Node) -> Identity:
    if node.key is not None:
        return ("object", node.key)
    return ("value", id(node.value))


def _drawing(graph: PdfGraph, category: str, item: Node) -> tuple[str, Node] | None:
    """How ``item`` (named under ``category``) is drawn, and what draws, or
    None when it draws nothing in turn: a form, a tiling pattern, a Type 3
    font's glyphs, or a graphics state's soft-mask group."""
    if category == "/ExtGState":
        mask = graph.get(item, "/SMask")
        group = graph.get(mask, "/G") if isinstance(mask.value, dict) else None
        return (_MASK, group) if group is not None and graph.is_stream(group) else None
    if category == "/Font":
        is_type3 = (
            isinstance(item.value, dict) and text(graph.get(item, "/Subtype").value) == "/Type3"
        )
        return (_GLYPHS, item) if is_type3 else None
    if not graph.is_stream(item):
        return None  # a shading pattern: a dictionary that draws nothing in turn
    if category == "/XObject":
        # An image draws nothing in turn; a form with no /Subtype is not drawn.
        return (_FORM, item) if text(graph.get(item, "/Subtype").value) == "/Form" else None
    return (_PATTERN, item)


def _read(stream: Any) -> bytes:
    """A content stream's bytes, decoded (raw when qpdf cannot decode them)."""
    import pikepdf

    try:
        return bytes(stream.read_bytes())
    except pikepdf.PdfError:
        return bytes(stream.read_raw_bytes())
