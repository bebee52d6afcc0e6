"""The bodies a file defines, read from its bytes, against those its
cross-reference table names.

A reader with a table it trusts takes, for each object, the body the table
names. A reader that rebuilds the table (pdfium does, for entries it will
not parse; so does any reader of a damaged file) scans the bytes instead and
takes the last body of each object it finds, objects in object streams too.
An intact file whose bytes hold bodies the table does not name can so be
two documents: the one every check here ran on, and another, with its own
actions, scripts or annotations, that such a reader shows.

Later revisions come later in a file: an incremental update appends its
bodies and a table that names them, so both readers take the last. What is
hidden is a body the table does not name that a rebuilding reader would
take: one later than the body the table names for its object (told by
object number alone: a rebuilding reader takes the later body whatever its
generation), a plain body later than the object stream the table keeps its
object in, an object stream no entry names, a body for an object that no
entry names but a live object refers to (qpdf reads such a reference as
null), or a body whose header a comment may be hiding the numbers of. A
body left behind by an update that freed its object, referred to by
nothing, hides nothing.

Text inside a stream's data that reads like a header (``1 0 obj``) is no
body, when the stream's ``/Length`` is written in its dictionary: a reader
that rebuilds skips the data by that length (one that must look the length
up elsewhere cannot, and is not trusted to). Runs inside a sandbox worker;
every pass over the bytes is linear.
"""

from __future__ import annotations

import bisect
import hashlib
import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from quire.validator.repair import UNKNOWN, object_header_spans

__all__ = ["Bodies"]

_END = re.compile(rb"\bendobj\b")
_STREAM = re.compile(rb"stream(?:\r\n|\n|\r)")
_ESCAPE = re.compile(rb"#([0-9A-Fa-f]{2})")
_OBJECT_STREAM = re.compile(rb"/ObjStm(?![A-Za-z0-9])")
_DICTIONARY_BYTES = 4096
"""How much of a body is read for the object-stream type in its dictionary."""
_GAP = rb"(?:[\x00\t\n\x0c\r ]|%[^\r\n]*[\r\n])+"
_REFERENCE = re.compile(
    rb"(?<![0-9])([0-9]{1,20})" + _GAP + rb"[0-9]{1,20}" + _GAP + rb"R(?![A-Za-z0-9_])"
)
"""A reference, ``N G R``, white space or comments between its parts."""
_START_XREF = re.compile(rb"startxref" + _GAP + rb"([0-9]{1,20})")
_HEADER_WINDOW = 1024 + 5
"""Where a reader looks for the ``%PDF-`` header the offsets count from."""
_TRAILER_BYTES = 65536
"""How much of the last cross-reference section is read for the trailer's references."""


class Bodies:
    """Every object body in one file's bytes, by number, in file order."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self._spans = list(object_header_spans(data))
        self._starts = [start for _number, _generation, start, _after in self._spans]
        self._end_list: list[int] | None = None
        self.by_number: dict[int, list[tuple[int, int]]] = {}
        """(where the header starts, where the body starts) of each body."""
        for number, _generation, start, after in self._spans:
            self.by_number.setdefault(number, []).append((start, after))

    @property
    def _ends(self) -> list[int]:
        """Where every ``endobj`` starts (found once, when first asked)."""
        if self._end_list is None:
            self._end_list = [match.start() for match in _END.finditer(self.data)]
        return self._end_list

    def digest(self, after: int) -> bytes:
        """sha256 of the body starting at ``after``: up to its ``endobj``, or
        the next header if one comes first, white space around it ignored."""
        index = bisect.bisect_left(self._ends, after)
        end = self._ends[index] if index < len(self._ends) else len(self.data)
        following = bisect.bisect_right(self._starts, after)
        if following < len(self._starts):
            end = min(end, self._starts[following])
        return hashlib.sha256(self.data[after:end].strip()).digest()

    def differ(self) -> bool:
        """Whether some object number has two bodies that differ."""
        for bodies in self.by_number.values():
            if len(bodies) > 1 and len({self.digest(after) for _start, after in bodies}) > 1:
                return True
        return False

    def hidden(
        self,
        table: Mapping[tuple[int, int], Any],
        lengths: Callable[[tuple[int, int]], int | None],
        object_stream: Callable[[int], bytes],
    ) -> bool:
        """Whether a body is hidden from ``table`` (qpdf's, as
        ``pikepdf.Pdf.get_xref_table`` gives it) that a rebuilding reader would
        take. ``lengths`` gives a live stream's ``/Length`` when its dictionary
        writes it directly (None otherwise), ``object_stream`` the decoded data
        of a live object stream (for the references of the objects in it)."""
        data = self.data
        shift = max(data.find(b"%PDF-", 0, _HEADER_WINDOW), 0)
        offsets = {
            objgen[0]: entry.offset + shift for objgen, entry in table.items() if entry.type == 1
        }
        by_number = self.by_number
        if all(
            len(bodies) == 1 and offsets.get(number) == bodies[0][0]
            for number, bodies in by_number.items()
        ):
            return False  # every body is the one the table names, where it says: most files
        table = self._placed(table)
        entries = {objgen[0]: entry for objgen, entry in table.items() if entry.type in (1, 2)}
        streams = _StreamData(self.data, table, lengths)
        referenced: frozenset[int] | None = None
        for number, bodies in by_number.items():
            entry = entries.get(number)
            if (
                entry is not None
                and entry.type == 1
                and len(bodies) == 1
                and bodies[0][0] >= entry.offset
                and not data[entry.offset : bodies[0][0]].strip()
            ):
                continue  # the one body, the one the table names: most objects
            if number == UNKNOWN:  # a header whose numbers a comment may hold
                if any(not streams.holds(start) for start, _after in bodies):
                    return True
                continue
            if entry is None:
                for start, after in bodies:
                    if streams.holds(start):
                        continue
                    if self._object_stream(after):
                        return True
                    if referenced is None:
                        referenced = self._referenced(table, object_stream)
                    if number in referenced:
                        return True
                continue
            if entry.type == 2:  # kept in an object stream: a plain body after it is hidden
                holder = table.get((entry.obj_stream_number, 0))
                offset = holder.offset if holder is not None and holder.type == 1 else 0
                if any(start > offset and not streams.holds(start) for start, _after in bodies):
                    return True
                continue
            named = next(
                (
                    after
                    for start, after in bodies
                    if start >= entry.offset and not data[entry.offset : start].strip()
                ),
                None,
            )
            later = [
                after
                for start, after in bodies
                if start > entry.offset and after != named and not streams.holds(start)
            ]
            if later:
                digest = self.digest(named) if named is not None else None
                if any(self.digest(after) != digest for after in later):
                    return True
        return False

    def _placed(self, table: Mapping[tuple[int, int], Any]) -> dict[tuple[int, int], _Entry]:
        """The table's entries with their offsets in the file: qpdf counts
        them from the header, which junk may precede (viewers allow 1,024
        bytes of it)."""
        shift = max(self.data.find(b"%PDF-", 0, _HEADER_WINDOW), 0)
        placed: dict[tuple[int, int], _Entry] = {}
        for objgen, entry in table.items():
            kind = entry.type
            if kind == 1:
                placed[objgen] = _Entry(1, entry.offset + shift, 0)
            elif kind == 2:
                placed[objgen] = _Entry(2, 0, entry.obj_stream_number)
        return placed

    def _referenced(
        self, table: Mapping[tuple[int, int], _Entry], object_stream: Callable[[int], bytes]
    ) -> frozenset[int]:
        """The object numbers live objects and the last trailer refer to, read
        from the bytes: qpdf reads a reference to an object its table lacks
        as null, and says nothing of it."""
        texts = [self._body(entry.offset) for entry in table.values() if entry.type == 1]
        holders = {entry.obj_stream_number for entry in table.values() if entry.type == 2}
        texts += [object_stream(number) for number in sorted(holders)]
        pointers = _START_XREF.findall(self.data)
        if pointers:
            offset = int(pointers[-1]) + max(self.data.find(b"%PDF-", 0, _HEADER_WINDOW), 0)
            texts.append(self.data[offset : offset + _TRAILER_BYTES])
        return frozenset(
            int(match.group(1)) for text in texts for match in _REFERENCE.finditer(text)
        )

    def _body(self, header: int) -> bytes:
        """The bytes of the object whose header starts at ``header``, to its
        ``endobj``."""
        index = bisect.bisect_left(self._ends, header)
        return self.data[header : self._ends[index] if index < len(self._ends) else len(self.data)]

    def _object_stream(self, after: int) -> bool:
        """Whether the body starting at ``after`` is an object stream: its
        dictionary names the type (escapes read as readers read them)."""
        head = self.data[after : after + _DICTIONARY_BYTES]
        keyword = _STREAM.search(head)
        if keyword is None:
            return False
        dictionary = _ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), head[: keyword.start()])
        return _OBJECT_STREAM.search(dictionary) is not None


class _Entry(NamedTuple):
    type: int
    offset: int
    """Where the body the entry names starts, in the file (type 1)."""
    obj_stream_number: int
    """The object stream the object is kept in (type 2)."""


class _StreamData:
    """Whether an offset lies in the data of a stream the table names, whose
    ``/Length`` its dictionary gives directly: the live object just before
    the offset, looked at once when first asked."""

    def __init__(
        self,
        data: bytes,
        table: Mapping[tuple[int, int], _Entry],
        lengths: Callable[[tuple[int, int]], int | None],
    ) -> None:
        self._data = data
        self._lengths = lengths
        self._table = table
        self._offsets: list[int] = []
        self._objects: list[tuple[int, int]] = []
        self._spans: dict[int, tuple[int, int] | None] = {}
        self._sorted = False

    def holds(self, offset: int) -> bool:
        if not self._sorted:
            live = sorted((e.offset, objgen) for objgen, e in self._table.items() if e.type == 1)
            self._offsets = [start for start, _objgen in live]
            self._objects = [objgen for _start, objgen in live]
            self._sorted = True
        index = bisect.bisect_right(self._offsets, offset - 1) - 1
        if index < 0:
            return False
        if index not in self._spans:
            self._spans[index] = self._span(index)
        span = self._spans[index]
        return span is not None and span[0] <= offset < span[1]

    def _span(self, index: int) -> tuple[int, int] | None:
        size = self._lengths(self._objects[index])
        if size is None:
            return None
        begins = self._offsets[index]
        ends = self._offsets[index + 1] if index + 1 < len(self._offsets) else len(self._data)
        keyword = _STREAM.search(self._data, begins, ends)
        if keyword is None:
            return None
        # The keyword found may come before the real one (a string in the
        # dictionary): the span then ends sooner, inside the object all the same.
        return keyword.end(), keyword.end() + size
