"""What a fetched JSON source is pinned as: its canonical form.

A source system may send the same record with its keys in another order,
other whitespace, or a shipment's events repeated (a retried webhook, a
replica catching up). What later stages read, and what the pin's ``sha256``
is of, is the canonical form of the record with exact duplicate events
dropped, so the same record pins the same digest however it was sent:

- exact duplicate events are dropped, the first of each kept in its place,
  in the lists ``events`` (top level) and ``shipment.events``;
- the document is written as canonical JSON: keys sorted, no whitespace
  (separators ``,`` and ``:``), strings as UTF-8 (no ``\\u`` escapes but
  those JSON requires), numbers exactly as parsed (decimals stay decimals,
  ``1.10`` stays ``1.10``; never through a binary float).

The pin's ``fetched_sha256`` is of the bytes as sent, and its
``normalisations`` name what changed, as stable codes:

- ``DUPLICATE_EVENTS_DROPPED``: at least one event was dropped;
- ``CANONICAL_JSON``: the bytes sent were not already the canonical form of
  what they say (key order, whitespace, escapes, a byte-order mark).

So ``normalisations`` is empty exactly when ``sha256 == fetched_sha256``.

A body that is not one JSON text this rule can rewrite without changing what
it says — invalid UTF-8 or JSON, ``NaN``, a key twice in one object (which
value counts would depend on the reader), nesting too deep — is pinned as
sent, unnormalised; the schema check (if its system has a schema) or the
validator's own check of structured sources then rejects it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

__all__ = [
    "CANONICAL_JSON",
    "DUPLICATE_EVENTS_DROPPED",
    "Normalised",
    "canonical_json",
    "normalise_json",
]

CANONICAL_JSON = "CANONICAL_JSON"
DUPLICATE_EVENTS_DROPPED = "DUPLICATE_EVENTS_DROPPED"
EVENT_LISTS = (("events",), ("shipment", "events"))
"""Where a record's events are (paths of object keys)."""


@dataclass(frozen=True)
class Normalised:
    """A fetched body as it is pinned, and what normalising changed."""

    data: bytes
    """The bytes to pin (canonical JSON, or the body as sent)."""
    document: Any
    """The parsed document (numbers as ``int`` and ``Decimal``); None when
    the body is not JSON this rule can read (``parsed`` is then False)."""
    parsed: bool
    codes: tuple[str, ...]
    """What changed, in a fixed order: ``CANONICAL_JSON``, ``DUPLICATE_EVENTS_DROPPED``."""


class _NotCanonical(ValueError):
    """The body says something canonical JSON cannot say the same way."""


def _no_constant(name: str) -> Any:
    raise _NotCanonical(f"{name} is not a JSON number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document = dict(pairs)
    if len(document) != len(pairs):
        raise _NotCanonical("a key twice in one object")
    return document


def _parse(raw: bytes) -> Any:
    return json.loads(
        raw.decode("utf-8-sig"),
        parse_float=Decimal,
        parse_constant=_no_constant,
        object_pairs_hook=_unique_keys,
    )


def _write(value: Any, out: list[str]) -> None:
    if isinstance(value, dict):
        out.append("{")
        for index, key in enumerate(sorted(value)):
            if index:
                out.append(",")
            out.append(json.dumps(key, ensure_ascii=False))
            out.append(":")
            _write(value[key], out)
        out.append("}")
    elif isinstance(value, list):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _write(item, out)
        out.append("]")
    elif isinstance(value, str) or value is None or isinstance(value, bool):
        out.append(json.dumps(value, ensure_ascii=False))
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, Decimal):
        out.append(str(value))  # exact; JSON's grammar accepts Decimal's text (1.10, 1E+2)
    else:
        raise _NotCanonical(f"{type(value).__name__} is not JSON")


def canonical_json(document: Any) -> bytes:
    """``document`` (as ``normalise_json`` parses) in canonical form."""
    out: list[str] = []
    _write(document, out)
    return "".join(out).encode("utf-8")


def _drop_duplicate_events(document: Any) -> bool:
    """Drop exact duplicates from the event lists in place; True if any went."""
    dropped = False
    for path in EVENT_LISTS:
        holder = document
        for key in path[:-1]:
            holder = holder.get(key) if isinstance(holder, dict) else None
        events = holder.get(path[-1]) if isinstance(holder, dict) else None
        if not isinstance(events, list):
            continue
        seen: set[bytes] = set()
        kept = []
        for event in events:
            form = canonical_json(event)
            if form in seen:
                continue
            seen.add(form)
            kept.append(event)
        if len(kept) != len(events):
            assert isinstance(holder, dict)
            holder[path[-1]] = kept
            dropped = True
    return dropped


def normalise_json(raw: bytes) -> Normalised:
    """The bytes to pin for a JSON body ``raw``, and what changed."""
    try:
        document = _parse(raw)
        as_sent = canonical_json(document)
        dropped = _drop_duplicate_events(document)
        data = canonical_json(document) if dropped else as_sent
    except (ValueError, RecursionError, UnicodeError):
        # ValueError covers invalid JSON and UTF-8, _NotCanonical, and an
        # integer too long to convert; lone surrogates fail to encode.
        return Normalised(raw, None, False, ())
    codes = []
    if as_sent != raw:
        codes.append(CANONICAL_JSON)
    if dropped:
        codes.append(DUPLICATE_EVENTS_DROPPED)
    return Normalised(data, document, True, tuple(codes))
