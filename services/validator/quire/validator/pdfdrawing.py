"""How much drawing each page asks of a viewer, bounded before anything draws it.

A page draws its content, and its content draws what its resources name:
forms, tiling patterns, Type 3 fonts' glyphs, and the soft-mask groups of
its graphics states. Each of those draws what its own resources name in
turn; a form, pattern or font without ``/Resources`` draws from the page's,
as viewers do. An annotation's appearance streams are drawn with the page.

A document can make that drawing grow without any loop: forty forms that
each draw the next twice ask a viewer for 2**40 draws, and it never finishes
the page. So each page's draws are counted, each drawing thing once for
every time its name appears in the content that draws it (an upper bound
for forms, patterns and soft masks; a Type 3 font counts once per naming,
not per glyph shown), and a page past ``MAX_DRAWS`` is refused. A drawing
that reaches itself, through inherited resources, an appearance stream or a
soft mask too, is a loop (``pdfcycles`` finds the ones through a thing's
own resources).

Runs inside a sandbox worker, after every stream's decoded size was measured
(``pdfchecks``): reading a content stream whole is bounded by then.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from quire.validator.pdfgraph import NULL, Node, PdfGraph, text

__all__ = ["MAX_DRAWS", "drawing_verdict"]

MAX_DRAWS = 250_000
"""Draws one page may ask for (its forms, patterns, glyph sets and soft masks,
nested); pdfium draws about 60,000 small forms a second."""
MAX_VISITS = 500_000
"""Drawing things one document's walk may visit; beyond it the file is unbounded."""
_PARENT_HOPS = 64
_APPEARANCES = ("/N", "/R", "/D")
_NAME = re.compile(rb"/([^\s/\[\]()<>{}%]*)")
_ESCAPE = re.compile(rb"#([0-9A-Fa-f]{2})")
_ESCAPE_TEXT = re.compile(r"#([0-9A-Fa-f]{2})")

Key = tuple[int, int]
Context = tuple[str, Key | None] | None
"""The page resources a drawing drew from: (``resources``, their key), or
(``page``, the page's key) when they are not an object of their own."""


class _Loop(Exception):
    pass


class _Unbounded(Exception):
    pass


def drawing_verdict(graph: PdfGraph, max_draws: int = MAX_DRAWS) -> str:
    """``"cycle"`` when some drawing reaches itself, ``"unbounded"`` when a
    page asks for more than ``max_draws`` draws, else empty."""
    walk = _Drawing(graph, max_draws)
    try:
        for node in walk.pages():
            walk.page(node)
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


class _Drawing:
    def __init__(self, graph: PdfGraph, max_draws: int) -> None:
        self.graph = graph
        self.max_draws = max_draws
        self.visits = 0
        self._names: dict[Key, Counter[bytes]] = {}
        self._children_of: dict[int, list[tuple[bytes, Node]]] = {}
        self._drawing_of: dict[tuple[str, Key | None], Node | None] = {}
        self._known: dict[tuple[Key, Context], int] = {}
        """Draws of a thing, by its key and the page resources it drew from
        (None when its drawing used none of them)."""

    def pages(self) -> list[Node]:
        """The page tree's leaves, as viewers find the pages they draw (each
        once; ``pdfcycles`` refused a tree that loops)."""
        graph = self.graph
        pages: list[Node] = []
        seen: set[Key] = set()
        pending = [graph.get(graph.root, "/Pages")]
        while pending:
            node = pending.pop()
            self._visit()
            if not graph.is_dictionary(node):
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

    def _visit(self) -> None:
        self.visits += 1
        if self.visits > MAX_VISITS:
            raise _Unbounded()

    def page(self, page: Node) -> None:
        graph = self.graph
        resources = self._page_resources(page)
        context = ("resources", resources.key) if resources.key is not None else ("page", page.key)
        total = self._draws(page, resources, context, set(), page_content=True)[0]
        annotations = graph.get(page, "/Annots") if "/Annots" in page.value else NULL
        for annotation in graph.items(annotations) if isinstance(annotations.value, list) else []:
            appearances = graph.get(annotation, "/AP")
            if not graph.is_dictionary(appearances):
                continue
            for name in _APPEARANCES:
                appearance = graph.get(appearances, name)
                streams = (
                    [appearance]
                    if graph.is_stream(appearance)
                    else [graph.node(v) for v in appearance.value.values()]
                    if graph.is_dictionary(appearance)
                    else []
                )
                for stream in streams:
                    if graph.is_stream(stream):
                        total += self._draws(stream, resources, context, set())[0]
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
            if graph.is_dictionary(resources):
                return resources
            node = graph.get(node, "/Parent")
            if not graph.is_dictionary(node):
                break
        return Node(None, {})

    def _draws(
        self,
        node: Node,
        page_resources: Node,
        context: Context,
        path: set[Key],
        *,
        page_content: bool = False,
    ) -> tuple[int, bool]:
        """How many draws drawing ``node`` once asks for, itself included, and
        whether that depended on the page's resources."""
        self._visit()
        key = node.key
        if key is not None:
            if key in path:
                raise _Loop()
            for memo in ((key, None), (key, context)):
                if memo in self._known:
                    return self._known[memo], memo[1] is not None
        own = self.graph.get(node, "/Resources")
        inherited = not page_content and not self.graph.is_dictionary(own)
        resources = page_resources if page_content or inherited else own
        children = self._children(resources)
        total, uses_page = 1, inherited
        if children:
            used = self._used(node, page_content)
            if key is not None:
                path.add(key)
            try:
                for name, child in children:
                    times = used.get(name, 0)
                    if not times:
                        continue
                    draws, from_page = self._draws(child, page_resources, context, path)
                    uses_page = uses_page or from_page
                    total += times * draws
                    if total > self.max_draws:
                        raise _Unbounded()
            finally:
                if key is not None:
                    path.discard(key)
        if key is not None:
            self._known[(key, context if uses_page else None)] = total
        return total, uses_page

    def _children(self, resources: Node) -> list[tuple[bytes, Node]]:
        """(name, thing drawn) for each drawing thing ``resources`` names
        (worked out once per resources dictionary: pages share them)."""
        graph = self.graph
        if not graph.is_dictionary(resources):
            return []
        # The graph keeps every value it read for as long as it lives, so a
        # dictionary's identity names it for this walk, direct ones too.
        known = self._children_of.get(id(resources.value))
        if known is None:
            known = self._children_of[id(resources.value)] = self._named(resources)
        return known

    def _named(self, resources: Node) -> list[tuple[bytes, Node]]:
        graph = self.graph
        found: list[tuple[bytes, Node]] = []
        for category in ("/XObject", "/Pattern", "/Font", "/ExtGState"):
            if category not in resources.value:
                continue
            named = graph.get(resources, category)
            if not graph.is_dictionary(named):
                continue
            for name, value in named.value.items():
                item = graph.node(value)
                memo = (category, item.key)
                if item.key is not None and memo in self._drawing_of:
                    drawn = self._drawing_of[memo]
                else:
                    drawn = _drawing(graph, category, item)
                    if item.key is not None:
                        self._drawing_of[memo] = drawn
                if drawn is not None:
                    found.append((canonical(name), drawn))
        return found

    def _used(self, node: Node, page_content: bool) -> Counter[bytes]:
        """The names ``node``'s content uses, counted (read once per stream)."""
        graph = self.graph
        key = node.key
        if key is not None and key in self._names:
            return self._names[key]
        if page_content:
            contents = graph.get(node, "/Contents")
            streams = graph.items(contents) if isinstance(contents.value, list) else [contents]
        elif text(graph.get(node, "/Subtype").value) == "/Type3":
            procs = graph.get(node, "/CharProcs")
            streams = (
                [graph.node(v) for v in procs.value.values()] if graph.is_dictionary(procs) else []
            )
        else:
            streams = [node]
        counts: Counter[bytes] = Counter()
        for stream in streams:
            handle = graph.streams.get(stream.key) if stream.key is not None else None
            if handle is not None:
                counts.update(names_used(_content(handle)))
        if key is not None:
            self._names[key] = counts
        return counts


def _drawing(graph: PdfGraph, category: str, item: Node) -> Node | None:
    """What drawing ``item`` (named under ``category``) draws, or None when it
    draws nothing in turn: a form, a tiling pattern, a Type 3 font, or a
    graphics state's soft-mask group."""
    if category == "/ExtGState":
        mask = graph.get(item, "/SMask")
        group = graph.get(mask, "/G") if graph.is_dictionary(mask) else None
        return group if group is not None and graph.is_stream(group) else None
    if category == "/Font":
        is_type3 = graph.is_dictionary(item) and text(graph.get(item, "/Subtype").value) == "/Type3"
        return item if is_type3 else None
    if not graph.is_stream(item):
        return None  # an image is a stream too, but draws nothing: see below
    if category == "/XObject" and text(graph.get(item, "/Subtype").value) != "/Form":
        return None
    return item


def _content(stream: Any) -> bytes:
    """A content stream's bytes, decoded (raw when qpdf cannot decode them)."""
    import pikepdf

    try:
        return bytes(stream.read_bytes())
    except pikepdf.PdfError:
        return bytes(stream.read_raw_bytes())
