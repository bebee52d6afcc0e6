"""What fetching a source can end in, beyond the errors every stage knows.

A source system's answer decides as follows (``fetcher``):

    404, 410                       Rejected(SOURCE_NOT_FOUND)       not_found
    more bytes than max_bytes      Rejected(SOURCE_TOO_LARGE)       too_large
    first bytes not the type       Rejected(TYPE_MISMATCH)          type_mismatch
    401, 403, any other answer     SystemFailure(SOURCE_REFUSED)    refused
      that retrying cannot change
    408, 429, 5xx, a connection    SourceCallFailed                 error
      error, a truncated body
    no complete answer in time     SourceCallFailed                 timeout
    no free connection here        TransientError                   (not counted)

Only ``SourceCallFailed`` counts against the system's circuit breaker: every
other answer shows the system up. The job is deferred with ``SourceDeferred``
(a transient error carrying its own delay) while a system stays unavailable.
"""

from __future__ import annotations

from quire.errors import TransientError
from quire.reasons import ReasonCode

__all__ = ["SourceCallFailed", "SourceDeferred", "OUTCOMES", "outcome_of"]

OUTCOMES = (
    "ok",
    "not_found",
    "too_large",
    "type_mismatch",
    "refused",
    "timeout",
    "error",
    "breaker_open",
)
"""Values of ``quire_source_fetches_total``'s ``outcome`` label."""

_PERMANENT_OUTCOMES = {
    ReasonCode.SOURCE_NOT_FOUND: "not_found",
    ReasonCode.SOURCE_TOO_LARGE: "too_large",
    ReasonCode.TYPE_MISMATCH: "type_mismatch",
    ReasonCode.SOURCE_REFUSED: "refused",
}


def outcome_of(reason: ReasonCode) -> str | None:
    """The outcome label of a permanent answer from a source system; None
    for an error that did not come from the system (storage, say)."""
    return _PERMANENT_OUTCOMES.get(reason)


class SourceCallFailed(TransientError):
    """One call to a source system failed in a way that may pass (an error
    status that says so, a connection error, a truncated body, a timeout)."""

    def __init__(self, outcome: str, message: str) -> None:
        super().__init__(ReasonCode.SOURCE_UNAVAILABLE, message)
        self.outcome = outcome
        """``timeout`` or ``error``."""


class SourceDeferred(TransientError):
    """The job waits for a source system that is unavailable now: its task is
    deferred off the queue for ``retry_after`` (the time until the system's
    breaker lets a trial call through, plus jitter, within the job's budget;
    ``quire.workqueue.deferral``), so neither the validator's slot nor one
    of the stage's ``max_ack_pending`` slots is held meanwhile."""

    waits_off_queue = True
    """The wait is this job's own: other tenants' jobs must not queue behind it."""

    def __init__(self, system: str, retry_after: float) -> None:
        super().__init__(
            ReasonCode.SOURCE_UNAVAILABLE,
            f"waiting {retry_after:.1f}s for source system {system}",
            retry_after=retry_after,
        )
        self.system = system
