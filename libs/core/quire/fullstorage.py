"""A full disk or quota, wherever it is met: a transient storage error.

``quire.blobstore`` classifies the errors of the blob store's own writes.
A stage's work writes elsewhere too, on the same disk: a source decrypted
into the attempt's private directory, a sandbox worker's output. An
``ENOSPC`` or ``EDQUOT`` from any of them is the same fault, and is
reported the same way, ``STORAGE_UNAVAILABLE`` (retried with backoff),
not as an unexpected error: space comes back as work finishes, leftovers
are swept and operators free it, and the stage's pull gate
(``quire.tempspace.TempBudget``) stops taking work meanwhile.
"""

from __future__ import annotations

import errno

from quire.errors import TransientError
from quire.reasons import ReasonCode

__all__ = ["FULL", "as_storage_error", "is_full"]

FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
"""What a disk or quota with no room left answers a write."""


def is_full(error: BaseException) -> bool:
    """Whether ``error`` says a disk or quota is full."""
    return isinstance(error, OSError) and error.errno in FULL


def as_storage_error(error: Exception) -> Exception:
    """STORAGE_UNAVAILABLE for a full disk or quota; any other error as it is."""
    if not is_full(error):
        return error
    converted = TransientError(ReasonCode.STORAGE_UNAVAILABLE, "disk or quota full")
    converted.__cause__ = error
    return converted
