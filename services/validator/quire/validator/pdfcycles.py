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
- name trees (``/Kids`` of each tree under the catalog's ``/Names``);
- outlines (``/First``, ``/Next``): every item is reached once; and the
  links viewers walk backwards (``/Last``, ``/Prev``) end;
- annotation reply chains (``/IRT``) and field parent chains (``/Parent``);
- function references (``/Functions`` of stitching functions);
- object-stream ``/Extends`` chains.

Runs inside a sandbox worker on an open pikepdf document.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["find_cycle", "MAX_NODES"]

MAX_NODES = 500_000
"""Nodes one walk may visit; beyond it the file is unbounded and refused as a cycle."""


class _Unbounded(Exception):
    pass


def _key(item: Any) -> tuple[int, int] | None:
    return item.objgen if getattr(item, "is_indirect", False) else None


def _children(node: Any, name: str) -> list[Any]:
    import pikepdf

    value = node.get(name) if isinstance(node, pikepdf.Dictionary | pikepdf.Stream) else None
    if isinstance(value, pikepdf.Array):
        return [v for v in value if isinstance(v, pikepdf.Dictionary | pikepdf.Stream)]
    if isinstance(value, pikepdf.Dictionary | pikepdf.Stream):
        return [value]
    return []


def _tree_has_cycle(root: Any, kids: str) -> bool:
    return _has_cycle(root, lambda node: _children(node, kids))


def _has_cycle(
    root: Any,
    children: Callable[[Any], list[Any]],
    finished: set[tuple[int, int]] | None = None,
) -> bool:
    """Depth-first with the path of ancestors: a node met again on its own path.
    A node whose descendants were all walked without a cycle (``finished``,
    which walks from several roots may share) is not walked again, so shared
    resources cost one walk, not one per page."""
    path: set[tuple[int, int]] = set()
    done = finished if finished is not None else set()
    pending: list[tuple[Any, bool]] = [(root, True)]
    visits = 0
    while pending:
        node, entering = pending.pop()
        key = _key(node)
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


def _chain_has_cycle(start: Any, link: str) -> bool:
    seen: set[tuple[int, int]] = set()
    node: Any = start
    for _ in range(MAX_NODES):
        key = _key(node)
        if key is not None:
            if key in seen:
                return True
            seen.add(key)
        following = _children(node, link)
        if not following:
            return False
        node = following[0]
    raise _Unbounded()


def _contents_have_cycle(contents: Any) -> bool:
    """A page's ``/Contents``: a stream, or an array of them; arrays inside it
    (which no writer makes) are walked with their path, and one that holds
    itself, directly or through others, is a loop."""
    import pikepdf

    def arrays(node: Any) -> list[Any]:
        if not isinstance(node, pikepdf.Array):
            return []
        return [item for item in node if isinstance(item, pikepdf.Array)]

    return _has_cycle(contents, arrays)


def _links_end(items: list[Any], link: str) -> bool:
    """Whether following ``link`` from every item always ends: each item has
    at most one successor, so a walk that meets a node of its own walk loops.
    Linear: a node once known to end is not walked again."""
    ends: set[tuple[int, int]] = set()
    for start in items:
        walk: set[tuple[int, int]] = set()
        node: Any = start
        for _ in range(MAX_NODES):
            key = _key(node)
            if key is None or key in ends:
                break
            if key in walk:
                return False
            walk.add(key)
            following = _children(node, link)
            if not following:
                break
            node = following[0]
        else:
            raise _Unbounded()
        ends |= walk
    return True


def _outline_walk(outlines: Any) -> tuple[list[Any], bool]:
    """Every outline item reachable by ``/First`` and ``/Next``, once each, and
    whether any was reached twice (a loop, or an item shared by two chains)."""
    seen: set[tuple[int, int]] = set()
    items: list[Any] = []
    repeated = False
    pending = _children(outlines, "/First")
    while pending:
        item = pending.pop()
        key = _key(item)
        if key is not None:
            if key in seen:
                repeated = True
                continue
            seen.add(key)
        items.append(item)
        if len(items) > MAX_NODES:
            raise _Unbounded()
        pending.extend(_children(item, "/First"))
        pending.extend(_children(item, "/Next"))
    return items, repeated


def _drawn(node: Any) -> list[Any]:
    """What drawing ``node`` (a page, a form, a tiling pattern) draws in turn:
    the form XObjects and patterns its resources name."""
    import pikepdf

    resources = (
        node.get("/Resources") if isinstance(node, pikepdf.Dictionary | pikepdf.Stream) else None
    )
    if not isinstance(resources, pikepdf.Dictionary):
        return []
    drawn = []
    for category, drawing in (("/XObject", "/Form"), ("/Pattern", "/Form"), ("/Font", "/Type3")):
        named = resources.get(category)
        if isinstance(named, pikepdf.Dictionary):
            drawn += [
                value
                for _name, value in named.items()
                if isinstance(value, pikepdf.Stream | pikepdf.Dictionary)
                and value.get("/Subtype", "/Form" if category == "/Pattern" else None) == drawing
            ]
    return drawn


def _structure_kids(node: Any) -> list[Any]:
    """A structure element's children (``/K``: one, or an array), elements
    only: marked-content references and page numbers end the walk."""
    import pikepdf

    kids = node.get("/K") if isinstance(node, pikepdf.Dictionary) else None
    items = list(kids) if isinstance(kids, pikepdf.Array) else [kids]
    return [
        item
        for item in items
        if isinstance(item, pikepdf.Dictionary) and item.get("/Type") not in ("/MCR", "/OBJR")
    ]


def _objects(pdf: Any) -> Iterator[Any]:
    import pikepdf

    for obj in pdf.objects:
        if isinstance(obj, pikepdf.Dictionary | pikepdf.Stream):
            yield obj


def _cycles(pdf: Any) -> Iterator[str]:
    root = pdf.Root
    pages = root.get("/Pages")
    if pages is not None and _tree_has_cycle(pages, "/Kids"):
        yield "page_tree"
    if pages is not None:
        drawn: set[tuple[int, int]] = set()
        for node in _objects(pdf):
            kind = node.get("/Type")
            if kind == "/Page" and _contents_have_cycle(node.get("/Contents")):
                yield "contents"
            # Resources a page inherits from its /Pages ancestors are walked there.
            if kind in ("/Page", "/Pages") and _has_cycle(node, _drawn, drawn):
                yield "resources"
    structure = root.get("/StructTreeRoot")
    if structure is not None and _has_cycle(structure, _structure_kids):
        yield "structure_tree"
    names = root.get("/Names")
    if names is not None:
        for tree in _named_trees(names):
            if _tree_has_cycle(tree, "/Kids"):
                yield "name_trees"
    outlines = root.get("/Outlines")
    if outlines is not None:
        reached, repeated = _outline_walk(outlines)
        if repeated:
            yield "outlines"
        items = [outlines, *reached]
        # Walked backwards from the last: /Last to an item, then /Prev.
        lasts = [item for node in items for item in _children(node, "/Last")]
        links = ((items, "/Prev"), (items, "/Parent"), (lasts, "/Prev"), (lasts, "/Next"))
        if not all(_links_end(start, link) for start, link in links):
            yield "outlines"
    form = root.get("/AcroForm")
    if form is not None:
        for field in _children(form, "/Fields"):
            if _tree_has_cycle(field, "/Kids"):
                yield "form_fields"
    for obj in _objects(pdf):
        keys = set(obj.keys())  # one ask of qpdf, not one per key looked for
        if "/IRT" in keys and _chain_has_cycle(obj, "/IRT"):
            yield "annotations"
        is_field = "/FT" in keys or "/T" in keys
        kind = obj.get("/Type") if "/Type" in keys else None
        is_page = kind in ("/Page", "/Pages")
        if "/Parent" in keys and (is_field or is_page) and _chain_has_cycle(obj, "/Parent"):
            yield "page_tree" if is_page else "form_fields"
        if "/FunctionType" in keys and _tree_has_cycle(obj, "/Functions"):
            yield "functions"
        if kind == "/ObjStm" and _chain_has_cycle(obj, "/Extends"):
            yield "object_streams"


def _named_trees(names: Any) -> list[Any]:
    """Every name tree of the catalog's ``/Names`` dictionary."""
    import pikepdf

    if not isinstance(names, pikepdf.Dictionary):
        return []
    return [value for _name, value in names.items() if isinstance(value, pikepdf.Dictionary)]


def find_cycle(pdf: Any) -> str | None:
    """The first structure found to loop back on itself, or None."""
    try:
        return next(_cycles(pdf), None)
    except _Unbounded:
        return "unbounded"
