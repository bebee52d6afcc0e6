"""asn1crypto's fix for re-encoding unchanged structures, until a release has it.

asn1crypto 1.5.1 (the latest release) marks a structure built in Python
(``cms.SignedData({...})``, as pyHanko builds every signature) as changed
when it is built, and never clears the mark once it has encoded it. Each
later read of its encoding encodes it again, and so does every read of each
of its parents', several times per level: a PAdES signature's attributes
were encoded hundreds of times per packet, 80 % of the CPU of signing.

Upstream fixed it in commit ``a767d2d`` ("Fix quadratic re-encoding bug
identified in #256", wbond/asn1crypto, July 2026): after encoding its
children, a ``Sequence``, ``SequenceOf``, ``Set`` or ``SetOf`` clears its
mark. A later change to it or to any structure below it marks that one
again, and its parents see the mark when next encoded, exactly as before.
``mend`` applies the same four lines to the classes that lack them, once
per process, and does nothing where the installed asn1crypto already
clears the mark (a release with the fix), so the backport retires itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

__all__ = ["mend", "mended"]

_MARKER = "__quire_clears_mutation__"


def _clearing(encode: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(encode)
    def _set_contents(self: Any, force: bool = False) -> None:
        encode(self, force)
        self._mutated = False

    setattr(_set_contents, _MARKER, True)
    return _set_contents


def _clears_already() -> bool:
    """Whether encoding a built structure clears its mark in this asn1crypto."""
    from asn1crypto import core

    class _Probe(core.Sequence):
        _fields = [("value", core.Integer)]

    probe = _Probe({"value": 1})
    probe.dump()
    return not probe._mutated  # noqa: SLF001 - the mark the fix is about


def mended() -> bool:
    """Whether structures are encoded once until they change, in this process."""
    from asn1crypto import core

    encode = core.Sequence.__dict__["_set_contents"]
    return getattr(encode, _MARKER, False) or _clears_already()


@functools.cache
def mend() -> None:
    """Apply upstream's fix, unless asn1crypto has it already. Idempotent."""
    from asn1crypto import core

    if _clears_already():
        return
    for cls in (core.Sequence, core.SequenceOf, core.Set, core.SetOf):
        # Each of the four defines its own encoding; patch that one.
        encode = cls.__dict__["_set_contents"]
        if not getattr(encode, _MARKER, False):
            cls._set_contents = _clearing(encode)  # type: ignore[method-assign]
