"""Quire's one exception tree.

    QuireError                      reason code + safe message, never document text
    ├── PermanentError              the input is wrong; retrying cannot help
    │   ├── InvalidInput            the caller sent something malformed (INVALID_ARGUMENT)
    │   ├── NotFound                missing, or another tenant's (NOT_FOUND)
    │   ├── Unauthenticated         bad or missing credentials (UNAUTHENTICATED)
    │   ├── PermissionDenied        a known caller this RPC does not admit (PERMISSION_DENIED)
    │   ├── Conflict                idempotency key reused (ALREADY_EXISTS)
    │   ├── FailedPrecondition      not in a state that allows this (FAILED_PRECONDITION)
    │   ├── DataLoss                stored bytes no longer match their digest (DATA_LOSS)
    │   ├── Rejected                a stage refuses the job's content (job ends REJECTED)
    │   ├── SystemFailure           Quire cannot finish it, retrying won't help (job ends FAILED)
    │   └── JobCancelled            the client cancelled before signing (job ends CANCELLED)
    └── TransientError              may succeed later (UNAVAILABLE); queues retry with backoff
        ├── StaleLease              a newer delivery owns the job; discard this result
        └── Overloaded              shed load (RESOURCE_EXHAUSTED) with a retry hint

Messages must be safe to return to a caller and to log: ids, digests, sizes,
counts and reason codes only. Translation to gRPC status happens in
``quire.grpcstatus``; the queue worker reads ``permanent`` to decide between
terminating and redelivering a message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from quire.reasons import ReasonCode

__all__ = [
    "QuireError",
    "PermanentError",
    "TransientError",
    "InvalidInput",
    "FieldViolation",
    "NotFound",
    "Unauthenticated",
    "PermissionDenied",
    "Conflict",
    "FailedPrecondition",
    "Rejected",
    "DataLoss",
    "StaleLease",
    "JobCancelled",
    "Overloaded",
    "QuotaViolation",
]


class QuireError(Exception):
    """Base of every error Quire raises on purpose."""

    permanent: bool = False

    def __init__(self, reason: ReasonCode | str, message: str = "") -> None:
        self.reason = ReasonCode(reason)
        self.message = message or self.reason.value
        super().__init__(f"{self.reason.value}: {self.message}")

    def __reduce__(self) -> tuple[object, ...]:
        # Errors cross process-pool boundaries; rebuild them from their fields.
        return (_rebuild, (type(self), self.__dict__))


def _rebuild(kind: type[QuireError], state: dict[str, object]) -> QuireError:
    error = kind.__new__(kind)
    error.__dict__.update(state)
    Exception.__init__(error, f"{error.reason.value}: {error.message}")
    return error


class PermanentError(QuireError):
    permanent = True


class TransientError(QuireError):
    """May pass if tried again. Its retry intent is declared here, and read
    by every retry loop (``quire.workqueue.settle`` for the queues)."""

    permanent = False

    waits_off_queue: bool = False
    """The wait is this job's own (a tenant's source system, say): its task is
    deferred off the consumer rather than holding a slot other jobs need."""

    def __init__(
        self, reason: ReasonCode | str, message: str = "", *, retry_after: float | None = None
    ) -> None:
        super().__init__(reason, message)
        self.retry_after = retry_after
        """Seconds to wait before trying again, if the error knows; else the
        caller's backoff decides."""


@dataclass(frozen=True)
class FieldViolation:
    """One problem with one field of a request, for ``google.rpc.BadRequest``."""

    field: str
    description: str
    reason: str = ""


class InvalidInput(PermanentError):
    def __init__(
        self,
        reason: ReasonCode | str,
        message: str = "",
        violations: tuple[FieldViolation, ...] = (),
    ) -> None:
        super().__init__(reason, message)
        self.violations = violations


class NotFound(PermanentError):
    def __init__(
        self, message: str = "not found", reason: ReasonCode | str = ReasonCode.NOT_FOUND
    ) -> None:
        super().__init__(reason, message)


class Unauthenticated(PermanentError):
    def __init__(self, message: str = "missing or invalid bearer token") -> None:
        super().__init__(ReasonCode.UNAUTHENTICATED, message)


class PermissionDenied(PermanentError):
    """The caller proved who it is, and this RPC does not admit it."""

    def __init__(
        self,
        message: str = "caller not allowed",
        reason: ReasonCode | str = ReasonCode.CALLER_NOT_ALLOWED,
    ) -> None:
        super().__init__(reason, message)


class Conflict(PermanentError):
    pass


class FailedPrecondition(PermanentError):
    pass


class DataLoss(PermanentError):
    pass


class Rejected(PermanentError):
    """A stage refuses a job's content; the job ends REJECTED with this reason."""

    def __init__(
        self,
        reason: ReasonCode | str,
        message: str = "",
        *,
        detail: str = "",
        disagreements: tuple[Any, ...] = (),
    ) -> None:
        super().__init__(reason, message)
        self.detail = detail
        """A stable sub-code of the reason, recorded as the ledger's ``reason_detail``."""
        self.disagreements = disagreements
        """``PageDisagreement`` messages: the pages of each source two readers
        read differently, recorded on the ledger's REJECTED entry."""


class SystemFailure(PermanentError):
    """Quire itself cannot finish the job, and retrying will not help (storage
    refusing writes, say): the job ends FAILED with this reason, not REJECTED —
    the input was not at fault."""


class InvalidSetting(PermanentError):
    """A ``QUIRE_*`` variable holds what this process cannot use. Raised while
    settings are read in ``main``, so the process stops before it serves. The
    message names the variable and what it expects, never the value (which
    may be a secret)."""

    def __init__(self, variable: str, expected: str) -> None:
        super().__init__(ReasonCode.INVALID_SETTING, f"{variable}: {expected}")
        self.variable = variable


class JobCancelled(PermanentError):
    """The client cancelled the job before signing began; it ends CANCELLED."""

    def __init__(self) -> None:
        super().__init__(ReasonCode.CANCELLED_BY_CLIENT, "the job was cancelled")


class StaleLease(TransientError):
    def __init__(self, job: str) -> None:
        super().__init__(ReasonCode.INTERNAL, f"lease for {job} superseded")


@dataclass(frozen=True)
class QuotaViolation:
    """One exceeded limit, for ``google.rpc.QuotaFailure``."""

    subject: str
    description: str


class Overloaded(TransientError):
    """Refused for load (RESOURCE_EXHAUSTED) with a retry hint and the limits passed."""

    def __init__(
        self,
        reason: ReasonCode | str,
        message: str = "",
        *,
        retry_after: float | None = None,
        quota: tuple[QuotaViolation, ...] = (),
    ) -> None:
        super().__init__(reason, message, retry_after=retry_after)
        self.quota = quota
