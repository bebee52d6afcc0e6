"""Repair with evidence, run in a sandbox worker: qpdf's recovery, a clean
rewrite, then every strict check again on the rewritten bytes.

A PDF that the strict open refuses (``inspection``) comes here when the
ruleset's repair policy allows it. The repair is refused, ``MALFORMED_PDF``
with a sub-code, when the result would be a guess:

- ``UNREADABLE``: even qpdf's recovery finds no trailer, root or page tree;
- any damage code outside ``damage.REPAIRABLE`` (content dropped, a key given
  twice, damage not on the list), as that code;
- ``REVISIONS_DISAGREE``: the cross-reference table had to be rebuilt and the
  file defines one object number more than once with different bodies, so
  which revision is the document is the reader's guess;
- ``PAGE_COUNT_MISMATCH``: the repaired page count is not the count the page
  tree claims;
- ``NO_PAGES``;
- ``REPAIR_INCOMPLETE``: the rewritten file still makes qpdf warn.

The rewrite copies stream data as it is (no decoding, so a bomb is not
inflated here; the strict checks measure it with their caps afterwards) and
writes a fresh header, cross-reference table and trailer. The same input
gives the same bytes (a deterministic /ID), so a redelivery stores the same
normalised blob under the same digest.
"""

from __future__ import annotations

import bisect
import hashlib
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from quire.memoryfiles import save_pdf
from quire.reasons import ReasonCode
from quire.validator.damage import codes_of, refusal_of
from quire.validator.pdfcycles import find_cycle

__all__ = [
    "RepairResult",
    "bodies_differ",
    "body_digest",
    "object_bodies",
    "claimed_pages",
    "UNKNOWN",
    "object_header_spans",
    "object_headers",
    "repair_pdf",
    "revisions_disagree",
]

_OBJ = re.compile(rb"obj")
_SPACE_BEFORE = rb"(?:[\x00\t\n\x0c\r ]|[\r\n][^\r\n]*%)+"
"""White space (NUL included) or a comment, read backwards: a comment's end of
line comes first, then its text back to its ``%``."""
_HEADER_BEFORE = re.compile(
    rb"jbo" + _SPACE_BEFORE + rb"([0-9]{1,20})" + _SPACE_BEFORE + rb"([0-9]{1,20})(?![0-9])"
)
"""An object header, ``N G obj`` (numbers not part of longer ones, leading
zeros allowed, comments between the parts, as readers take them), read
backwards from its keyword."""
_PERCENT = re.compile(rb"%")
_BREAK = re.compile(rb"[\r\n]")
_WORD = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_END = re.compile(rb"\bendobj\b")


@dataclass(frozen=True)
class RepairResult:
    """What a repair came to: the rewrite may go on to the strict checks, or the
    reason (and sub-code) it was refused."""

    reason: str
    """Empty when the rewrite may go on to the strict checks."""
    detail: str
    warnings: tuple[str, ...]
    pages: int = 0


def revisions_disagree(path: str) -> bool:
    """Whether the file defines some object number twice with different bodies.

    Read from the raw bytes, as a reader without a usable cross-reference
    table must: when two definitions differ, the document is whichever the
    reader happens to take.
    """
    with open(path, "rb") as handle:
        data = handle.read()
    return bodies_differ(data, object_bodies(data))


def object_bodies(data: bytes) -> dict[tuple[int, int], list[int]]:
    """Where each object's bodies start (just past ``obj``), by number and
    generation, in file order."""
    starts: dict[tuple[int, int], list[int]] = defaultdict(list)
    for number, generation, _start, after in object_header_spans(data):
        starts[(number, generation)].append(after)
    return starts


def bodies_differ(data: bytes, bodies: dict[tuple[int, int], list[int]]) -> bool:
    """Whether some object number has two bodies that differ."""
    # Only an object number defined more than once has bodies to compare:
    # most files define each once.
    for offsets in bodies.values():
        if len(offsets) < 2:
            continue
        digests = set()
        for start in offsets:
            digests.add(body_digest(data, start))
            if len(digests) > 1:
                return True
    return False


def body_digest(data: bytes, start: int) -> bytes:
    """sha256 of the object body that starts at ``start`` (just past its
    ``obj``), up to its ``endobj``, white space around it ignored."""
    end = _END.search(data, start)
    return hashlib.sha256(data[start : end.start() if end else len(data)].strip()).digest()


def object_headers(data: bytes) -> Iterator[tuple[bytes, bytes, int]]:
    """(number, generation, offset just past ``obj``) of every object header in
    ``data``, in order."""
    for number, generation, _start, after in object_header_spans(data):
        if number != UNKNOWN:
            yield b"%d" % number, b"%d" % generation, after


UNKNOWN = -1
"""The number and generation of a header whose numbers may be inside a
comment: read backwards, a ``%`` earlier on their line cannot be told from
one that starts a comment, so which numbers the header holds is not known."""


def object_header_spans(data: bytes) -> Iterator[tuple[int, int, int, int]]:
    """(number, generation, where the header starts, where its body starts:
    just past ``obj``) of every object header in ``data``, in order; both
    numbers ``UNKNOWN`` when a ``%`` comes before either on its line. Found
    from the keyword back: a scan for the number that starts the header
    would try the pattern at every byte of the file."""
    reverse = data[::-1]
    size = len(data)
    comments = _Comments(data)
    for keyword in _OBJ.finditer(data):
        end = keyword.end()
        if end < size and data[end] in _WORD:
            continue  # "obj" inside a longer word
        header = _HEADER_BEFORE.match(reverse, size - end)
        if header is None:
            continue
        start = size - header.end()
        if comments.before(start) or comments.before(size - header.end(1)):
            yield UNKNOWN, UNKNOWN, start, end
            continue
        number, generation = int(header.group(2)[::-1]), int(header.group(1)[::-1])
        yield number, generation, start, end


class _Comments:
    """Whether a ``%`` comes before a position on its line: the nearest ``%``
    before it, and the first line break after that ``%`` (looked for once
    per ``%``)."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._percents = [match.start() for match in _PERCENT.finditer(data)]
        self._line_ends: dict[int, int] = {}

    def before(self, position: int) -> bool:
        index = bisect.bisect_left(self._percents, position) - 1
        if index < 0:
            return False  # no % before it at all
        percent = self._percents[index]
        end = self._line_ends.get(percent)
        if end is None:
            found = _BREAK.search(self._data, percent)
            end = self._line_ends[percent] = found.start() if found else len(self._data)
        return end > position


def claimed_pages(pdf: Any) -> int | None:
    """The page count the page tree's root claims (``/Count``), if it says."""
    import pikepdf

    tree = pdf.Root.get("/Pages")
    count = tree.get("/Count") if isinstance(tree, pikepdf.Dictionary) else None
    return count if isinstance(count, int) else None


def _refused(detail: str, warnings: list[str], pages: int = 0) -> RepairResult:
    return RepairResult(ReasonCode.MALFORMED_PDF, detail, tuple(warnings), pages)


def repair_pdf(path: str, out_path: str) -> RepairResult:
    """Recover ``path`` with qpdf and, unless the repair would be a guess, write
    the clean rewrite to ``out_path``."""
    import pikepdf  # lazy: only sandbox workers load qpdf

    try:
        with pikepdf.open(path, attempt_recovery=True, inherit_page_attributes=False) as pdf:
            if pdf.is_encrypted:
                return RepairResult(ReasonCode.ENCRYPTED_PDF, "", ())
            messages = list(pdf.get_warnings())
            if find_cycle(pdf) is not None:
                return RepairResult(ReasonCode.CYCLIC_STRUCTURE, "", tuple(codes_of(messages)))
            pages = len(pdf.pages)
            for page in pdf.pages:
                page.obj.get("/Contents")
            claimed = claimed_pages(pdf)
            messages += pdf.get_warnings()
            warnings = codes_of(messages)
            if refused := refusal_of(warnings):
                return _refused(refused, warnings, pages)
            if pages == 0:
                return _refused("NO_PAGES", warnings)
            if claimed not in (None, pages):
                return _refused("PAGE_COUNT_MISMATCH", warnings, pages)
            if "XREF_RECONSTRUCTED" in warnings and revisions_disagree(path):
                return _refused("REVISIONS_DISAGREE", warnings, pages)
            # qpdf keeps the trailer's keys and fills in /Size only when the key
            # is there; a recovered trailer may have lost it.
            pdf.trailer.Size = 0
            save_pdf(
                pdf,
                out_path,
                deterministic_id=True,
                compress_streams=False,
                stream_decode_level=pikepdf.StreamDecodeLevel.none,
                object_stream_mode=pikepdf.ObjectStreamMode.preserve,
            )
            warnings = list(dict.fromkeys(warnings + codes_of(pdf.get_warnings())))
            if refused := refusal_of(warnings):
                return _refused(refused, warnings, pages)
            return RepairResult("", "", tuple(warnings), pages)
    except pikepdf.PasswordError:
        return RepairResult(ReasonCode.ENCRYPTED_PDF, "", ())
    except pikepdf.PdfError as error:
        if "encrypt" in str(error).lower():
            return RepairResult(ReasonCode.ENCRYPTED_PDF, "", ())
        return _refused("UNREADABLE", [])
    except MemoryError:
        raise  # the sandbox reports it as a limit, not as a verdict on the file
    except (RecursionError, ValueError, TypeError, KeyError):
        return _refused("UNREADABLE", [])
