"""What of an exception a diagnostic keeps: its type and its text, scrubbed.

Quire's own errors name ids, digests, sizes and reason codes only
(``quire.errors``), but a library's exception (pikepdf, pyHanko, an OS
error) may quote bytes of the document it choked on. So the text kept is
printable ASCII only (a line break or tab becomes a space, anything else a
``?``) and at most ``MAX_MESSAGE`` characters (bytes), chained causes
included. Nothing here is ever logged.
"""

from __future__ import annotations

__all__ = [
    "MAX_MESSAGE",
    "MAX_TYPE",
    "CarriedCause",
    "carry_causes",
    "causes_of",
    "scrub",
    "type_of",
    "text_of",
]

MAX_MESSAGE = 4096
"""Characters of text kept: the error's own, then its causes', 4 KiB at most."""
MAX_TYPE = 200
MAX_CAUSES = 3
"""Chained causes described after the error itself."""
TRUNCATED = " [truncated]"
_SPACES = frozenset("\n\r\t")


def scrub(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` as printable ASCII, cut to ``limit`` characters (marked when cut)."""
    cut = len(text) > limit
    kept = text[:limit]  # one character in, one out: no need to scrub what is cut
    clean = "".join(c if " " <= c <= "~" else (" " if c in _SPACES else "?") for c in kept)
    if cut:
        clean = clean[: max(0, limit - len(TRUNCATED))] + TRUNCATED
    return clean


class CarriedCause(Exception):  # noqa: N818 - a cause, described, not a failure of its own
    """A chained cause described where it was raised and carried across a
    process boundary by its type's name and its text: a sandbox worker's
    exception reaches the parent pickled, and pickling drops ``__cause__``
    (``quire.sandbox`` sends ``causes_of`` alongside and ``carry_causes``
    puts them back)."""

    def __init__(self, kind: str, text: str) -> None:
        super().__init__(text)
        self.kind = kind
        self.text = text


def causes_of(error: BaseException) -> list[tuple[str, str]]:
    """``error``'s chained causes as (type, text), nearest first, at most
    ``MAX_CAUSES``; plain strings, so they cross a pipe whatever raised them."""
    described: list[tuple[str, str]] = []
    seen = {id(error)}
    cause = _cause(error)
    while cause is not None and id(cause) not in seen and len(described) < MAX_CAUSES:
        seen.add(id(cause))
        described.append((type_of(cause), _own_text(cause)))
        cause = _cause(cause)
    return described


def carry_causes(error: BaseException, causes: list[tuple[str, str]]) -> BaseException:
    """``error`` with ``causes`` (from ``causes_of``) chained under it again."""
    below: BaseException = error
    for kind, text in causes:
        carried = CarriedCause(str(kind), str(text))
        below.__cause__ = carried
        below = carried
    return error


def type_of(error: BaseException) -> str:
    """The exception's class, with its module unless it is a builtin (for a
    carried cause, the class it was raised as)."""
    if isinstance(error, CarriedCause):
        return scrub(error.kind, MAX_TYPE)
    kind = type(error)
    module = getattr(kind, "__module__", "") or ""
    name = kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"
    return scrub(name, MAX_TYPE)


def _own_text(error: BaseException) -> str:
    try:
        return str(error)[: MAX_MESSAGE + 1]  # more would be cut anyway
    except Exception:  # noqa: BLE001 - a broken __str__ must not lose the diagnostic
        return ""


def _cause(error: BaseException) -> BaseException | None:
    if error.__cause__ is not None:
        return error.__cause__
    return None if error.__suppress_context__ else error.__context__


def text_of(error: BaseException) -> str:
    """``str(error)``, then ``; caused by TYPE: TEXT`` for each chained cause,
    scrubbed and capped (see the module docstring)."""
    parts = [_own_text(error)]
    seen = {id(error)}
    cause = _cause(error)
    while cause is not None and id(cause) not in seen and len(parts) <= MAX_CAUSES:
        seen.add(id(cause))
        parts.append(f"caused by {type_of(cause)}: {_own_text(cause)}")
        cause = _cause(cause)
    return scrub("; ".join(parts))
