"""Cycles in the structures readers walk, found before anything walks them.

A viewer, a renderer or the assembler follows these links as trees or
chains; a file built so that one leads back to itself makes a careless
walker loop (and a signed packet would carry the trap on). Each walk here is
iterative, remembers what it has seen by object number, and is bounded:

- the page tree and the form-field tree (``/Kids``): a node that is its own
  ancestor (a page listed twice under different parents is not a cycle);
- a page's ``/Contents``: arrays that hold (or lead back to) themselves;
- what a page draws: form XObjects, patterns and Type 3 fonts whose
  resources draw themselves again;
- the structure tree (``/StructTreeRoot``, ``/K``) that accessibility tools walk;
- name trees (``/Kids`` of each tree under the catalog's ``/Names``, and the
  structure tree's ``/IDTree``) and number trees (``/PageLabels``, the
  structure tree's ``/ParentTree``);
- outlines (``/First``, ``/Next``): every item is reached once; and the
  links viewers walk backwards (``/Last``, ``/Prev``) end;
- annotation reply chains (``/IRT``) and field parent chains (``/Parent``);
- function references (``/Functions`` of stitching functions);
- object-stream ``/Extends`` chains.

Runs inside a sandbox worker, over the document's objects as ``pdfgraph``
reads them from an open pikepdf document.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from quire.validator.pdfgraph import NULL, Node, PdfGraph, text

__all__ = ["find_cycle", "MAX_NODES"]

MAX_NODES = 500_000
"""Nodes one walk may visit; beyond it the file is unbounded and refused as a cycle."""

Key = tuple[int, int]


_DRAWING = (("/XObject", "/Form"), ("/Pattern", "/Form"), ("/Font", "/Type3"))
"""The resource categories that draw, and the subtype that does."""


class _Unbounded(Exception):
    pass


class _Walks:
    """The walks over one document's graph."""

    def __init__(self, graph: PdfGraph) -> None:
        self.graph = graph
        self._ended: dict[str, set[Key]] = {}
        """By link: nodes whose chain is known to end."""
        self._drawing_of: dict[tuple[str, str], Node | None] = {}
        """By category and reference: the thing named, when it draws."""

    def children(self, node: Node, name: str) -> list[Node]:
        """The dictionaries and streams under ``name``: one, or those of an array."""
        value = self.graph.get(node, name)
        if isinstance(value.value, list):
            return [item for item in self.graph.items(value) if isinstance(item.value, dict)]
        if isinstance(value.value, dict):
            return [value]
        return []

    def tree_has_cycle(self, root: Node, kids: str) -> bool:
        return self.has_cycle(root, lambda node: self.children(node, kids))

    def has_cycle(
        self,
        root: Node,
        children: Callable[[Node], list[Node]],
        finished: set[Key] | None = None,
    ) -> bool:
        """Depth-first with the path of ancestors: a node met again on its own path.
        A node whose descendants were all walked without a cycle (``finished``,
        which walks from several roots may share) is not walked again, so shared
        resources cost one walk, not one per page."""
        path: set[Key] = set()
        done = finished if finished is not None else set()
        pending: list[tuple[Node, bool]] = [(root, True)]
        visits = 0
        while pending:
            node, entering = pending.pop()
            key = node.key
            if not entering:
                if key is not None:
                    path.discard(key)
                    done.add(key)
                continue
            visits += 1
            if visits > MAX_NODES:
                raise _Unbounded()
            if key is not None:
                if key in path:
                    return True
                if key in done:
                    continue
                path.add(key)
            pending.append((node, False))
            pending.extend((child, True) for child in children(node))
        return False

    def chain_has_cycle(self, start: Node, link: str) -> bool:
        """Whether following ``link`` from ``start`` comes back to a node of its
        own walk. Every page's ``/Parent`` chain is walked once, not once per
        page: what an earlier walk followed to its end is remembered."""
        ended = self._ended.setdefault(link, set())
        return not self.chain_ends(start, link, ended, through_direct=True)

    def chain_ends(self, start: Node, link: str, ended: set[Key], *, through_direct: bool) -> bool:
        """Whether following ``link`` from ``start`` ends. Each node has at most
        one successor, so a walk that meets a node of its own walk loops, and
        one that reaches a node in ``ended`` ends too; the nodes of a walk that
        ends join ``ended``. A direct node ends the walk unless
        ``through_direct``."""
        seen: set[Key] = set()
        node = start
        for _ in range(MAX_NODES):
            key = node.key
            if key is None and not through_direct:
                break
            if key is not None:
                if key in ended:
                    break
                if key in seen:
                    return False
                seen.add(key)
            following = self.children(node, link)
            if not following:
                break
            node = following[0]
        else:
            raise _Unbounded()
        ended |= seen
        return True

    def contents_have_cycle(self, contents: Node) -> bool:
        """A page's ``/Contents``: a stream, or an array of them; arrays inside it
        (which no writer makes) are walked with their path, and one that holds
        itself, directly or through others, is a loop."""

        def arrays(node: Node) -> list[Node]:
            return [item for item in self.graph.items(node) if isinstance(item.value, list)]

        return self.has_cycle(contents, arrays)

    def links_end(self, items: list[Node], link: str) -> bool:
        """Whether following ``link`` from every item always ends (linear: a
        node once known to end is not walked again)."""
        ends: set[Key] = set()
        return all(self.chain_ends(item, link, ends, through_direct=False) for item in items)

    def outline_walk(self, outlines: Node) -> tuple[list[Node], bool]:
        """Every outline item reachable by ``/First`` and ``/Next``, once each, and
        whether any was reached twice (a loop, or an item shared by two chains)."""
        seen: set[Key] = set()
        items: list[Node] = []
        repeated = False
        pending = self.children(outlines, "/First")
        while pending:
            item = pending.pop()
            key = item.key
            if key is not None:
                if key in seen:
                    repeated = True
                    continue
                seen.add(key)
            items.append(item)
            if len(items) > MAX_NODES:
                raise _Unbounded()
            pending.extend(self.children(item, "/First"))
            pending.extend(self.children(item, "/Next"))
        return items, repeated

    def drawn(self, node: Node) -> list[Node]:
        """What drawing ``node`` (a page, a form, a tiling pattern) draws in turn:
        the form XObjects and patterns its resources name."""
        graph = self.graph
        resources = graph.get(node, "/Resources")
        if not graph.is_dictionary(resources):
            return []
        drawn = []
        for category, drawing in _DRAWING:
            if category not in resources.value:
                continue
            named = graph.get(resources, category)
            if not graph.is_dictionary(named):
                continue
            for value in named.value.values():
                item = self._drawing(category, drawing, value)
                if item is not None:
                    drawn.append(item)
        return drawn

    def _drawing(self, category: str, drawing: str, value: Any) -> Node | None:
        """What ``value`` names under ``category``, when it is a thing that
        draws; worked out once per reference (pages share fonts and forms)."""
        memo = (category, value) if type(value) is str else None
        if memo is not None and memo in self._drawing_of:
            return self._drawing_of[memo]
        graph = self.graph
        item = graph.node(value)
        found = None
        if isinstance(item.value, dict):
            absent = "/Form" if category == "/Pattern" else None
            subtype = (
                text(graph.get(item, "/Subtype").value) if graph.has(item, "/Subtype") else absent
            )
            if subtype == drawing:
                found = item
        if memo is not None:
            self._drawing_of[memo] = found
        return found

    def structure_kids(self, node: Node) -> list[Node]:
        """A structure element's children (``/K``: one, or an array), elements
        only: marked-content references and page numbers end the walk."""
        graph = self.graph
        if not graph.is_dictionary(node):
            return []
        kids = graph.get(node, "/K")
        items = graph.items(kids) if isinstance(kids.value, list) else [kids]
        return [
            item
            for item in items
            if graph.is_dictionary(item)
            and text(graph.get(item, "/Type").value) not in ("/MCR", "/OBJR")
        ]

    def named_trees(self, names: Node) -> list[Node]:
        """Every name tree of the catalog's ``/Names`` dictionary."""
        graph = self.graph
        if not graph.is_dictionary(names):
            return []
        return [
            item
            for item in (graph.node(value) for value in names.value.values())
            if graph.is_dictionary(item)
        ]

    def cycles(self) -> Iterator[str]:
        graph = self.graph
        root = graph.root
        objects = graph.objects()
        kinds = [text(graph.get(node, "/Type").value) for node in objects]
        pages = graph.get(root, "/Pages")
        if pages.value is not None and self.tree_has_cycle(pages, "/Kids"):
            yield "page_tree"
        if pages.value is not None:
            drawn: set[Key] = set()
            for node, kind in zip(objects, kinds, strict=True):
                contents = graph.get(node, "/Contents") if kind == "/Page" else NULL
                # Only an array holds arrays: a stream's contents cannot loop.
                if isinstance(contents.value, list) and self.contents_have_cycle(contents):
                    yield "contents"
                # Resources a page inherits from its /Pages ancestors are walked there.
                # A page that draws nothing in turn has no loop to find.
                if (
                    kind in ("/Page", "/Pages")
                    and self.drawn(node)
                    and self.has_cycle(node, self.drawn, drawn)
                ):
                    yield "resources"
        structure = graph.get(root, "/StructTreeRoot")
        if structure.value is not None and self.has_cycle(structure, self.structure_kids):
            yield "structure_tree"
        # Number trees (page labels, the structure's parent tree) and the
        # structure's ID name tree: /Kids, as any name tree.
        for tree in (
            graph.get(root, "/PageLabels"),
            graph.get(structure, "/ParentTree"),
            graph.get(structure, "/IDTree"),
        ):
            if graph.is_dictionary(tree) and self.tree_has_cycle(tree, "/Kids"):
                yield "number_trees"
        names = graph.get(root, "/Names")
        if names.value is not None:
            for tree in self.named_trees(names):
                if self.tree_has_cycle(tree, "/Kids"):
                    yield "name_trees"
        outlines = graph.get(root, "/Outlines")
        if outlines.value is not None:
            reached, repeated = self.outline_walk(outlines)
            if repeated:
                yield "outlines"
            items = [outlines, *reached]
            # Walked backwards from the last: /Last to an item, then /Prev.
            lasts = [item for node in items for item in self.children(node, "/Last")]
            links = ((items, "/Prev"), (items, "/Parent"), (lasts, "/Prev"), (lasts, "/Next"))
            if not all(self.links_end(start, link) for start, link in links):
                yield "outlines"
        form = graph.get(root, "/AcroForm")
        if form.value is not None:
            for field in self.children(form, "/Fields"):
                if self.tree_has_cycle(field, "/Kids"):
                    yield "form_fields"
        for obj, kind in zip(objects, kinds, strict=True):
            keys = obj.value
            if "/IRT" in keys and self.chain_has_cycle(obj, "/IRT"):
                yield "annotations"
            is_field = "/FT" in keys or "/T" in keys
            is_page = kind in ("/Page", "/Pages")
            if "/Parent" in keys and (is_field or is_page) and self.chain_has_cycle(obj, "/Parent"):
                yield "page_tree" if is_page else "form_fields"
            if "/FunctionType" in keys and self.tree_has_cycle(obj, "/Functions"):
                yield "functions"
            if kind == "/ObjStm" and self.chain_has_cycle(obj, "/Extends"):
                yield "object_streams"


def find_cycle(pdf: Any, graph: PdfGraph | None = None) -> str | None:
    """The first structure found to loop back on itself, or None. A document
    with more objects than a walk may visit is unbounded."""
    if graph is None:
        graph = PdfGraph.read(pdf, MAX_NODES)
    if not graph.complete:
        return "unbounded"
    try:
        return next(_Walks(graph).cycles(), None)
    except _Unbounded:
        return "unbounded"
