"""The caller's idempotency key: the ``Idempotency-Key`` header or the body's
``idempotency_key``, whichever is given; both, and they must agree."""

from __future__ import annotations

from quire.errors import FieldViolation, InvalidInput
from quire.reasons import ReasonCode

__all__ = ["request_id_of"]


def request_id_of(header: str | None, body: str | None) -> str:
    """The request_id for admission; empty when neither is given (admission
    then says whether the call needs one)."""
    if header and body and header != body:
        raise InvalidInput(
            ReasonCode.INVALID_REQUEST,
            "the Idempotency-Key header and the body's idempotency_key differ",
            (FieldViolation("idempotency_key", "differs from the Idempotency-Key header"),),
        )
    return header or body or ""
