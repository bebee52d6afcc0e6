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
every painting operator that follows, inside the forms drawn meanwhile too,
and a Type 3 glyph procedure runs for every glyph shown. One font, one soft
mask and a fill and a stroke pattern are in effect at a time, so the
costliest of each that draws (or, for a glyph, paints) more than once counts
again for every painting operator, or byte of string shown, of what sets it
and of the forms it draws: a bound from above. A drawing that reaches
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

__all__ = ["MAX_DRAWS", "MAX_WORK", "canonical", "drawing_verdict", "names_used"]

MAX_DRAWS = 250_000
"""Draws one page may ask for (its forms, patterns, glyph procedures and soft
masks, nested); pdfium draws about 60,000 small forms a second."""
MAX_WORK = 2_000_000
"""Steps one document's walk may take (pages, page tree nodes, annotations,
things named and drawn, each once); beyond it the file is unbounded."""
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
_STRINGS = re.compile(rb"\((?:\\.|[^\\])*?\)|<[^<>]*>")
"""Literal and hex strings: what text operators show (an escaped parenthesis
stays inside; a nested pair ends the match early, which a hex string's two
digits a byte more than make up for in a bound)."""
_ESCAPE = re.compile(rb"#([0-9A-Fa-f]{2})")
_ESCAPE_TEXT = re.compile(r"#([0-9A-Fa-f]{2})")
_FORM, _PATTERN, _GLYPHS, _MASK = "form", "pattern", "glyphs", "mask"

Key = tuple[int, int]
Identity = tuple[str, Any]
"""An object's key, or a direct value's identity (the graph keeps every value
it read alive, so an identity names one value for the walk's life)."""
Memo = tuple[tuple[Identity, str], Identity | None]
"""A thing, how it is drawn, and the resources it draws from when it has none
of its own (None when it has)."""


class _Loop(Exception):
    pass


class _Unbounded(Exception):
    pass


def drawing_verdict(graph: PdfGraph, max_draws: int = MAX_DRAWS) -> str:
    """``"cycle"`` when some drawing reaches itself, ``"unbounded"`` when a
    page asks for more than ``max_draws`` draws (or the walk for more work
    than ``MAX_WORK``), else empty."""
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
    text: int
    """Bytes of the strings in it (hex strings count two a byte)."""


@dataclass
class _Frame:
    """One thing being worked out: drawn from ``resources`` (its own when it
    has them)."""

    node: Node
    resources: Node
    memo: Memo
    how: str = _FORM
    page_content: bool = False
    total: int = 1
    painting: int = 0
    """Painting operators drawing this once runs, in the forms it draws too."""
    text: int = 0
    """Bytes of strings drawing this once may show, in the forms it draws too."""
    pending: list[tuple[str, int, Node]] = field(default_factory=list)
    """(how it is drawn, the times named, the thing) still to work out."""
    state: list[tuple[str, int, _Drawn]] = field(default_factory=list)
    """Patterns, soft masks and glyphs worked out: (how, times named, draws),
    added once every form this draws is counted (they stay in effect there)."""
    waiting: tuple[str, int] | None = None
    """How the child being worked out now is drawn, and its times named."""


@dataclass(frozen=True)
class _Drawn:
    """What drawing a thing once asks for."""

    total: int
    painting: int
    text: int


class _Drawing:
    def __init__(self, graph: PdfGraph, max_draws: int) -> None:
        self.graph = graph
        self.max_draws = max_draws
        self.work = 0
        self._contents: dict[tuple[Identity, bool], _Content] = {}
        self._named_in: dict[Identity, dict[bytes, list[tuple[str, Node]]]] = {}
        self._appearances: dict[tuple[Identity, Identity], int] = {}
        """Draws of a page's annotations' appearances, by the annotation array
        and the page resources (pages may share both)."""
        self._known: dict[Memo, _Drawn] = {}
        """A thing's draws, by its identity and the resources it drew from
        (None when it has its own)."""
        self._drawing_of: dict[tuple[str, Identity], tuple[str, Node] | None] = {}
        """How each thing a resources dictionary names is drawn (pages share
        fonts and forms under dictionaries of their own)."""

    def pages(self) -> list[Node]:
        """The page tree's leaves, as viewers find the pages they draw (each
        once; ``pdfcycles`` refused a tree that loops)."""
        graph = self.graph
        pages: list[Node] = []
        seen: set[Key] = set()
        pending = [graph.get(graph.root, "/Pages")]
        while pending:
            node = pending.pop()
            self._step()
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
        if not self._named(resources) and "/Annots" not in page.value:
            return  # draws its content and nothing in turn: most pages
        total = self._draws(page, resources, page_content=True)
        if "/Annots" in page.value:
            annotations = graph.get(page, "/Annots")
            if isinstance(annotations.value, list):
                total += self._appearances_of(annotations, resources)
        if total > self.max_draws:
            raise _Unbounded()

    def _appearances_of(self, annotations: Node, resources: Node) -> int:
        """Draws of every appearance stream of the annotations, drawn with the
        page (worked out once for an array and resources pages share)."""
        graph = self.graph
        memo = (_identity(annotations), _identity(resources))
        known = self._appearances.get(memo)
        if known is not None:
            return known
        total = 0
        for annotation in graph.items(annotations):
            self._step()
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
                    self._step()
                    if graph.is_stream(stream):
                        total += self._draws(stream, resources)
                        if total > self.max_draws:
                            raise _Unbounded()
        self._appearances[memo] = total
        return total

    def _page_resources(self, page: Node) -> Node:
        """The page's resources, its own or the nearest ``/Parent``
        ancestor's, as pdfium and pdf.js look them up (however deep)."""
        graph = self.graph
        node = page
        seen: set[Identity] = set()
        while isinstance(node.value, dict) and _identity(node) not in seen:
            self._step()
            seen.add(_identity(node))
            resources = graph.get(node, "/Resources")
            if isinstance(resources.value, dict):
                return resources
            node = graph.get(node, "/Parent")
        return _NO_RESOURCES

    def _step(self) -> None:
        self.work += 1
        if self.work > MAX_WORK:
            raise _Unbounded()

    def _draws(self, root: Node, resources: Node, *, page_content: bool = False) -> int:
        """How many draws drawing ``root`` once from ``resources`` asks for,
        itself included (iterative: a chain of forms as deep as a file may
        hold is walked without recursion)."""
        first = self._frame(root, resources, _FORM, page_content)
        known = self._known.get(first.memo)
        if known is not None:
            return known.total
        stack = [first]
        path = {first.memo}
        self._open(first)
        while True:
            frame = stack[-1]
            if frame.pending:
                how, times, child = frame.pending.pop()
                self._step()
                inner = self._frame(child, frame.resources, how, False)
                drawn = self._known.get(inner.memo)
                if drawn is None and inner.memo in path:
                    raise _Loop()
                if drawn is None:
                    frame.waiting = (how, times)
                    path.add(inner.memo)
                    self._open(inner)
                    stack.append(inner)
                    continue
                self._add(frame, how, times, drawn)
                continue
            stack.pop()
            path.discard(frame.memo)
            drawn = self._close(frame)
            self._known[frame.memo] = drawn
            if not stack:
                return drawn.total
            parent = stack[-1]
            assert parent.waiting is not None
            how, times = parent.waiting
            parent.waiting = None
            self._add(parent, how, times, drawn)

    def _frame(self, node: Node, drawer: Node, how: str, page_content: bool) -> _Frame:
        """``node`` drawn (as ``how`` says) by something whose resources are
        ``drawer``."""
        identity = (_identity(node), how)
        if page_content:
            return _Frame(node, drawer, (identity, None), how, page_content=True)
        own = self.graph.get(node, "/Resources")
        if isinstance(own.value, dict):
            return _Frame(node, own, (identity, None), how)
        return _Frame(node, drawer, (identity, _identity(drawer)), how)

    def _open(self, frame: _Frame) -> None:
        """Find what ``frame``'s content draws, each with how often."""
        self._step()
        named = self._named(frame.resources)
        if not named and frame.page_content:
            return  # a page that draws nothing in turn: what it paints sets nothing off
        content = self._content(frame.node, frame.how, frame.page_content)
        frame.painting, frame.text = content.painting, content.text
        if not named:
            return
        for name, times in content.names.items():
            for how, child in named.get(name, ()):
                frame.pending.append((how, times, child))

    def _add(self, frame: _Frame, how: str, times: int, drawn: _Drawn) -> None:
        """Count a child drawn ``times`` (named so often) into ``frame``: a form
        at once, with the painting and content it runs; a pattern, soft mask
        or glyph set once it is known how much painting it stays in effect for."""
        if how != _FORM:
            frame.state.append((how, times, drawn))
            return
        frame.total += times * drawn.total
        frame.painting += times * drawn.painting
        frame.text += times * drawn.text
        if frame.total > self.max_draws:
            raise _Unbounded()

    def _close(self, frame: _Frame) -> _Drawn:
        """Count the patterns, soft masks and glyphs ``frame`` sets, now that
        the painting they may stay in effect for is known. Each counts once
        for each time it is named; and one font, one soft mask, and a fill
        and a stroke pattern are in effect at a time, so the costliest of
        each that draws in turn counts again for every byte of string shown
        (a glyph, whose own painting counts too) and every painting operator."""
        costliest: dict[str, int] = {}
        glyph_painting = 0
        for how, times, drawn in frame.state:
            frame.total += times * drawn.total
            weight = drawn.total
            if how == _GLYPHS:
                weight = max(weight, drawn.painting)
                glyph_painting = max(glyph_painting, drawn.painting)
            if weight > 1:
                costliest[how] = max(costliest.get(how, 0), weight)
        if _GLYPHS in costliest:
            frame.total += frame.text * costliest[_GLYPHS]
            frame.painting += frame.text * glyph_painting
        frame.total += 2 * frame.painting * costliest.get(_PATTERN, 0)
        frame.total += frame.painting * costliest.get(_MASK, 0)
        if frame.total > self.max_draws:
            raise _Unbounded()
        return _Drawn(frame.total, frame.painting, frame.text)

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
                    item = graph.node(value)
                    memo = (category, _identity(item))
                    if memo in self._drawing_of:
                        drawn = self._drawing_of[memo]
                    else:
                        drawn = self._drawing_of[memo] = _drawing(graph, category, item)
                    if drawn is not None:
                        found.setdefault(canonical(name), []).append(drawn)
        self._named_in[identity] = found
        return found

    def _content(self, node: Node, how: str, page_content: bool) -> _Content:
        """What ``node``'s content names and paints, read as what draws it
        reads it: a page's contents, a Type 3 font's glyph procedures, or the
        thing's own stream (read once per thing and way)."""
        identity = (_identity(node), how == _GLYPHS)
        known = self._contents.get(identity)
        if known is not None:
            return known
        graph = self.graph
        if page_content:
            contents = graph.get(node, "/Contents")
            streams = graph.items(contents) if isinstance(contents.value, list) else [contents]
        elif how == _GLYPHS:
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
        text = sum(len(string) for string in _STRINGS.findall(data))
        content = _Content(names_used(data), len(_PAINT.findall(data)), text)
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
