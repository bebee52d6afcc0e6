"""A document's objects, read from qpdf once, for the walks over its structure.

The checks that walk a PDF's structure (``pdfcycles``, and the active-content
search in ``pdfchecks``) ask many small questions of every object: its keys,
one value, the type of what a reference points at. Asked of pikepdf, each
question is a call into qpdf, and for a document of a few hundred pages those
calls are most of the validator's time. Here each object is read once, as
qpdf's own JSON of it (version 2: names as ``/Name``, text strings as
``u:text``, other strings as ``b:hex``, references as ``"N G R"``), and the
walks run over plain Python values.

What the walks see is what pikepdf would have shown them: a reference is
followed to the object it names (null when there is none), a key whose value
is null is absent (qpdf drops it), and a stream is told from a dictionary by
qpdf's own type of the object. Stream data is not read here: ``decoding``
measures it through pikepdf. Runs inside a sandbox worker.
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

__all__ = ["NULL", "Node", "PdfGraph", "text"]

Key = tuple[int, int]
_REFERENCE = re.compile(r"([0-9]+) ([0-9]+) R")
_HOPS = 8
"""References followed from one value at most: an object whose whole value is
a reference to another (``1 0 obj 2 0 R endobj``) is followed as qpdf does;
a ring of them ends as null."""
_TEXT = "u:"
_KNOWN_AT_ONCE = 50_000
"""Objects up to which every reference is resolved as the graph is made."""


class Node(NamedTuple):
    """A value as a walk meets it: ``key`` is the object number and generation
    when it was reached through a reference (None for a direct value), and
    ``value`` is a ``dict`` (a dictionary, or a stream's dictionary), a
    ``list`` (an array) or a scalar."""

    key: Key | None
    value: Any


NULL = Node(None, None)


def text(value: Any) -> str | None:
    """What pikepdf would compare with a name such as ``"/Form"``: a name, or
    the text of a text string; None for anything else."""
    if isinstance(value, str):
        if value.startswith("/"):
            return value
        if value.startswith(_TEXT):
            return value[len(_TEXT) :]
    return None


class PdfGraph:
    """Every object of one open document, in qpdf's order."""

    def __init__(
        self,
        values: dict[Key, Any],
        order: list[Key],
        streams: dict[Key, Any],
        root: Node,
        *,
        complete: bool,
    ) -> None:
        self._values = values
        # What a reference to each object leads to, as qpdf writes one
        # ("N G R"), known at once for every object whose value is no
        # reference itself (``_follow`` takes the rest, any other spelling,
        # and every reference of a file too large to spend the memory on).
        self._followed: dict[str, Node] = (
            {
                f"{key[0]} {key[1]} R": Node(key, value)
                for key, value in values.items()
                if not (type(value) is str and value[:1].isdigit())
            }
            if len(values) <= _KNOWN_AT_ONCE
            else {}
        )
        self.order = order
        """Every object's key, as ``pdf.objects`` lists them."""
        self.streams = streams
        """The pikepdf handle of each stream, by key (for its data)."""
        self.root = root
        self.complete = complete
        """False when the file holds more objects than the read allowed."""

    @classmethod
    def read(cls, pdf: Any, max_objects: int) -> PdfGraph:
        """Read ``pdf``'s objects, at most ``max_objects`` + 1 of them (then
        ``complete`` is False and the walks must not run)."""
        import pikepdf

        order: list[Key] = []
        streams: dict[Key, Any] = {}
        written: list[bytes] = []
        handles: list[Any] = []
        complete = True
        for count, obj in enumerate(pdf.objects):
            if count > max_objects:
                complete = False
                break
            if not isinstance(obj, pikepdf.Object):
                # A number, boolean or null (pikepdf gives it as Python's own,
                # without its key): nothing a walk follows or compares.
                continue
            key = obj.objgen
            order.append(key)
            if isinstance(obj, pikepdf.Stream):
                streams[key] = obj
            written.append(obj.to_json(dereference=True))
            handles.append(obj)
        values = dict(zip(order, _parsed(written, handles), strict=True))
        root = pdf.trailer.get("/Root")
        if root is not None and root.is_indirect:
            node = Node(root.objgen, values.get(root.objgen))
        elif root is not None:
            node = Node(None, _one(root.to_json(), root))
        else:
            node = NULL
        return cls(values, order, streams, node, complete=complete)

    def node(self, value: Any, key: Key | None = None) -> Node:
        """``value`` as a walk meets it: a reference followed to its object."""
        if not isinstance(value, str) or not value[:1].isdigit():
            return Node(key, value)  # not a reference: names, strings and all else
        known = self._followed.get(value)
        if known is None:
            known = self._follow(value)
            self._followed[value] = known
        return known

    def _follow(self, reference_text: str) -> Node:
        key: Key | None = None
        value: Any = reference_text
        for _ in range(_HOPS):
            reference = _REFERENCE.fullmatch(value) if isinstance(value, str) else None
            if reference is None:
                return Node(key, value)
            key = (int(reference.group(1)), int(reference.group(2)))
            value = self._values.get(key)
        return NULL

    def get(self, node: Node, name: str) -> Node:
        """The value under ``name`` of a dictionary or stream node (followed);
        null for anything else, or when the key is absent."""
        value = node.value
        if type(value) is not dict:
            return NULL
        found = value.get(name)
        if type(found) is str and found[:1].isdigit():
            return self._followed.get(found) or self.node(found)
        return Node(None, found)

    def has(self, node: Node, name: str) -> bool:
        return isinstance(node.value, dict) and name in node.value

    def is_stream(self, node: Node) -> bool:
        return node.key is not None and node.key in self.streams

    def is_dictionary(self, node: Node) -> bool:
        """A dictionary, not a stream (pikepdf's ``Dictionary``)."""
        return isinstance(node.value, dict) and not self.is_stream(node)

    def objects(self) -> list[Node]:
        """Every dictionary and stream object, in qpdf's order."""
        return [
            Node(key, value)
            for key in self.order
            if isinstance(value := self._values.get(key), dict)
        ]

    def containers(self) -> dict[Key, Node]:
        """Every dictionary, stream and array object, by key: all that can hold
        a dictionary (an indirect array may hold annotations or actions as
        direct dictionaries)."""
        return {
            key: Node(key, value)
            for key in self.order
            if type(value := self._values.get(key)) is dict or type(value) is list
        }

    def direct_length(self, key: Key) -> int | None:
        """A stream's ``/Length`` when its dictionary writes the number itself
        (None when it refers to another object, or the stream is unknown)."""
        value = self._values.get(key) if key in self.streams else None
        length = value.get("/Length") if isinstance(value, dict) else None
        return length if type(length) is int else None

    def items(self, node: Node) -> list[Node]:
        """An array node's items, followed."""
        if not isinstance(node.value, list):
            return []
        return [self.node(item) for item in node.value]


def _parsed(written: list[bytes], handles: list[Any]) -> list[Any]:
    """Each object's JSON as Python values, in one parse when they all parse."""
    try:
        return list(json.loads(b"[" + b",".join(written) + b"]"))
    except ValueError:
        return [_one(text, handle) for text, handle in zip(written, handles, strict=True)]


def _one(written: bytes, handle: Any) -> Any:
    """One object's JSON as Python values; when qpdf wrote something JSON does
    not take (a real number as the file spells it, ``+.5``), the object as
    pikepdf gives it."""
    try:
        return json.loads(written)
    except ValueError:
        return _native(handle)


def _native(obj: Any) -> Any:
    """``obj`` as qpdf's JSON would give it, built from pikepdf: a reference
    as ``"N G R"``, a string as its text (``u:``), a name as itself."""
    import pikepdf

    if isinstance(obj, pikepdf.Stream):
        obj = obj.stream_dict
    if isinstance(obj, pikepdf.Dictionary):
        return {str(key): _member(value) for key, value in obj.items() if value is not None}
    if isinstance(obj, pikepdf.Array):
        return [_member(value) for value in obj]
    if isinstance(obj, pikepdf.Name):
        return str(obj)
    if isinstance(obj, pikepdf.String):
        return _TEXT + str(obj)
    if isinstance(obj, bool | int) or obj is None:
        return obj
    return float(obj)


def _member(value: Any) -> Any:
    import pikepdf

    if isinstance(value, pikepdf.Object) and value.is_indirect:
        generation = value.objgen
        return f"{generation[0]} {generation[1]} R"
    return _native(value)
